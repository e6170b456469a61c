"""The report says plainly when a cell's native and container runs did not load the same environment: a
"not like for like" caveat on that cell's environment verdict (HTML, markdown and --json)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from test_compare import write_campaign

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract
from sparkfleet.cli import main

LD = "/usr/local/tensorrt/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64"


def _fingerprint(libcuda: tuple[str, str], ld: str = LD, kind: str = "container") -> dict:
    return {"pid": 7, "depth": 2, "comm": "python3", "exe": "/usr/bin/python3.12", "chroot": False,
            "libraries": [
                {"name": "libcuda", "version": libcuda[0], "source": libcuda[1],
                 "path": "/usr/local/cuda/compat/lib/libcuda.so.1" if libcuda[1] == "compat"
                 else "/usr/lib/aarch64-linux-gnu/libcuda.so.1"},
                {"name": "libcudart", "version": "13.0.88", "source": "image",
                 "path": "/usr/local/cuda/lib64/libcudart.so.13.0.88"}],
            "env": {"LD_LIBRARY_PATH": ld}, "env_names": ["LD_LIBRARY_PATH", "PATH"], "python": "3.12",
            "packages": {"torch": "2.9.0a0", "tensorrt_llm": "1.2.0rc6", "tensorrt": "10.13.3.9"}, "samples": 3,
            "environment_kind": kind}


def _campaign(root: Path, container_print: dict | None) -> Path:
    cells = {("m", "native"): {"output_tok_s": [100.0, 101.0, 99.0, 100.5], "peak_memory_gib": [40, 40.2, 39.9, 40]},
             ("m", "container"): {"output_tok_s": [100.2, 100.9, 99.3, 100.1],
                                  "peak_memory_gib": [41, 41.1, 40.9, 41]}}
    write_campaign(root, cells)
    for path in root.glob("*/runs/*/record.json"):
        data = contract.upgrade(json.loads(path.read_text()))
        native = data["environment"] == "native"
        data["fingerprint"] = _fingerprint(("580.95.05", "host"), kind="native") if native else container_print
        assert contract.validate(data) == [], contract.validate(data)
        contract.write_json_atomic(path, data)
    return root


def _report(results: Path) -> tuple[dict, str, str]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["report", str(results), "--json"]) == 0
    out = json.loads(buffer.getvalue())
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(results), "--out", str(results / "report")]) == 0
    html = next((results / "report").glob("*.html")).read_text()
    md = "\n".join(p.read_text() for p in (results / "report").glob("*.md"))
    return out, html, md


def _environment_line(out: dict) -> dict:
    (line,) = [v for v in out["verdicts"] if v["question"] == "environment"]
    return line


def test_same_fingerprints_no_caveat(tmp_path: Path) -> None:
    out, html, md = _report(_campaign(tmp_path / "c", _fingerprint(("580.95.05", "host"))))
    line = _environment_line(out)
    assert line["caveats"] == [] and "like for like" not in line["text"]
    assert "not like for like" not in html and "not like for like" not in md


def test_compat_libcuda_in_the_container_is_a_caveat_everywhere(tmp_path: Path) -> None:
    out, html, md = _report(_campaign(tmp_path / "c", _fingerprint(("590.44.01", "compat"))))
    line = _environment_line(out)
    expected = "native loaded libcuda 580.95.05 from the host, container libcuda 590.44.01 compat"
    assert line["caveats"] == [f"not like for like: {expected}"]
    assert f"Caveat: not like for like: {expected}." in line["text"]
    assert "Not like for like" in line["headline"]
    assert expected in html and expected in md


def test_ld_library_path_difference_and_no_fingerprint(tmp_path: Path) -> None:
    other = _fingerprint(("580.95.05", "host"), ld="/usr/local/cuda/lib64")
    out, _html, _md = _report(_campaign(tmp_path / "a", other))
    (caveat,) = _environment_line(out)["caveats"]
    assert caveat.startswith("not like for like: LD_LIBRARY_PATH differs: native ")
    out, _html, _md = _report(_campaign(tmp_path / "b", None))  # older records: nothing to compare, no caveat
    assert _environment_line(out)["caveats"] == []
    bare = _fingerprint(("580.95.05", "host"), ld="/usr/lib", kind="bare")  # bare is meant to differ: no caveat
    out, _html, _md = _report(_campaign(tmp_path / "c", bare))
    assert _environment_line(out)["caveats"] == []
