"""`sparkfleet fleet` refuses (exit 1) a results tree whose hosts' attestation.json differ in VBIOS or driver
(issue 24), and compares it (exit 0) once acknowledged: by --acknowledge-differences or by campaign.json. The
tree is test_host_normal's synthetic fleet with every host healthy, so the refusal is the only reason to fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_host_normal import build, host_attestation  # sibling test module: the same synthetic fleet

from sparkfleet.cli import main


def healthy_fleet(root: Path, **spark2) -> Path:
    """Four healthy hosts on the same firmware, then spark2's attestation.json given the fields in ``spark2``."""
    build(root, degraded=None, firmware_differs=False)
    att = host_attestation()
    att.update({k: v for k, v in spark2.items() if k != "vbios"})
    if "vbios" in spark2:
        att["gpus"] = [{**att["gpus"][0], "vbios_version": spark2["vbios"]}]
    (root / "spark2" / "attestation.json").write_text(json.dumps(att))
    return root


def fleet_json(root: Path, *extra: str, capsys) -> tuple[int, dict]:
    status = main(["fleet", str(root), "--json", *extra])
    return status, json.loads(capsys.readouterr().out)


def test_the_same_firmware_everywhere_passes(tmp_path: Path, capsys) -> None:
    status, state = fleet_json(healthy_fleet(tmp_path / "fleet"), capsys=capsys)
    assert status == 0 and state["refused"] is False and state["outside_hosts"] == []


@pytest.mark.parametrize(("spark2", "field", "value"), [
    ({"vbios": "98.11"}, "gpu0.vbios_version", "98.11"),
    ({"driver_version": "580.126.09"}, "driver_version", "580.126.09"),
])
def test_a_vbios_or_driver_difference_is_refused_until_acknowledged(tmp_path: Path, capsys, spark2, field,
                                                                    value) -> None:
    root = healthy_fleet(tmp_path / "fleet", **spark2)
    status, state = fleet_json(root, capsys=capsys)
    assert status == 1 and state["refused"] is True and state["outside_hosts"] == []
    assert state["host_verdicts"]["blocking"][field]["spark2"] == value
    # the markdown names the refusal too, and the report files are written either way
    assert main(["fleet", str(root)]) == 1
    assert "REFUSED: firmware or driver differs" in capsys.readouterr().out
    assert "REFUSED" in (root / "report" / "fleet.md").read_text()

    status, state = fleet_json(root, "--acknowledge-differences", capsys=capsys)
    assert status == 0 and state["refused"] is False
    assert state["host_verdicts"]["acknowledged"] is True and field in state["host_verdicts"]["blocking"]
    assert "REFUSED" not in (root / "report" / "fleet.md").read_text()


def test_campaign_json_acknowledgement_is_read_when_the_flag_is_not_given(tmp_path: Path, capsys) -> None:
    root = healthy_fleet(tmp_path / "fleet", vbios="98.11")
    (root / "campaign.json").write_text(json.dumps({"campaign": "fleet", "acknowledge_host_differences": True}))
    status, state = fleet_json(root, capsys=capsys)
    assert status == 0 and state["host_verdicts"]["acknowledged"] is True


def test_a_kernel_only_difference_is_not_refused(tmp_path: Path, capsys) -> None:
    status, state = fleet_json(healthy_fleet(tmp_path / "fleet", kernel="6.11.0-1017-nvidia"), capsys=capsys)
    assert status == 0 and state["refused"] is False
    assert state["host_verdicts"]["blocking"] == {} and "kernel" in state["host_verdicts"]["differences"]
