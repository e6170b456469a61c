"""host_attest (issue 24): the module run in-process against the nvidia-smi stand-in on PATH, the real fwupdmgr,
DMI, meminfo and buddyinfo captures of tests/fixtures/attestation/, and the bandwidth probe."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from _ansible_modules import REPO, STANDINS, load_module, run_module

host_attest = load_module("host_attest")
FIXTURES = REPO / "tests" / "fixtures" / "attestation"
PROBE = REPO / "roles" / "matrix" / "files" / "gpu_probe.py"


def script(path: Path, body: str) -> str:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """PATH with the nvidia-smi stand-in; /proc made of the real H100 host captures; a fwupdmgr that prints
    fwupd's own published get-devices --json (a stand-in of a few lines: the format is the fixture's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(STANDINS / "nvidia-smi")
    fixture = FIXTURES / "fwupdmgr-get-devices-fwupd-qubes-test.json"
    script(bin_dir / "fwupdmgr", "import sys\nassert sys.argv[1:] == ['get-devices', '--json'], sys.argv\n"
                                 f"sys.stdout.write(open({str(fixture)!r}).read())\n")
    for name in [n for n in os.environ if n.startswith("SPARKFLEET_FAKE")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SPARKFLEET_FAKE_GPU_STATE", str(tmp_path / "gpu-state.json"))
    proc = tmp_path / "proc"
    proc.mkdir()
    shutil.copy(FIXTURES / "meminfo-h100-lent-host.txt", proc / "meminfo")
    shutil.copy(FIXTURES / "buddyinfo-h100-lent-host.txt", proc / "buddyinfo")
    return {"proc_root": str(proc), "dmi_root": str(FIXTURES / "dmi-id-supermicro-sys-6019p-wt"),
            "dmidecode": "/nonexistent/dmidecode"}


def fake_bandwidth(tmp_path: Path, rc: int = 0) -> str:
    """A probe that answers as gpu_probe.py bandwidth does: 2 GiB copied in 1 ms is 2 x 2 GiB / 1 ms."""
    return script(tmp_path / "probe.py", "import json, sys\n"
                  "assert sys.argv[1] == 'bandwidth'\n"
                  "print(json.dumps({'backend': 'torch', 'device': 'cuda:0 fake', 'bytes_copied': 2147483648, "
                  "'seconds': 0.001, 'bandwidth_bytes_s': 4294967296000.0, 'error': None}))\n"
                  f"sys.exit({rc})\n")


def test_the_attestation_of_a_gb10_stand_in_with_fwupd(host, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKFLEET_FAKE_VBIOS", "9A.0B.2D.00.00")
    out = run_module(host_attest, {**host, "image_digest": "sha256:abc", "probe_script": fake_bandwidth(tmp_path),
                                   "python": sys.executable})
    assert out["changed"] is False and "failed" not in out
    att = out["attestation"]
    assert att["kernel"] == os.uname().release and att["image_digest"] == "sha256:abc"
    assert (att["driver_version"], att["cuda_version"]) == ("580.95.05", "13.0")
    assert [(g["product_name"], g["vbios_version"]) for g in att["gpus"]] == [("NVIDIA GB10", "9A.0B.2D.00.00")]
    assert att["gpus"][0]["unified_memory"] is True  # ATS, FB memory N/A
    assert att["firmware_source"] == "fwupd"
    assert [(d["name"], d["version"]) for d in att["firmware"]][0] == ("ColorHug2", "2.0.6")
    assert (att["bios_vendor"], att["bios_version"]) == ("American Megatrends Inc.", "2.0a")
    assert att["mem_available_kib"] is not None and att["free_huge_blocks"] > 0
    assert att["missing"] == [] and out["errors"] == []
    assert out["bandwidth"]["bandwidth_bytes_s"] == 4294967296000.0 and out["bandwidth"]["backend"] == "torch"


def test_without_fwupd_the_dmi_strings_stand_for_the_firmware(host, tmp_path):
    out = run_module(host_attest, {**host, "fwupdmgr": "/nonexistent/fwupdmgr", "bandwidth": False})
    att = out["attestation"]
    assert att["firmware"] == [] and att["firmware_source"] == "dmi" and att["bios_version"] == "2.0a"
    assert "fwupd" in att["missing"]
    assert out["errors"] == ["/nonexistent/fwupdmgr: not found"]
    assert out["bandwidth"]["bandwidth_bytes_s"] is None and "bandwidth: false" in out["bandwidth"]["error"]


def test_hosts_differing_in_vbios_are_a_blocking_difference(host, tmp_path, monkeypatch):
    attestation = pytest.importorskip(
        "ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health.attestation")
    fleet = {}
    for name, vbios in (("spark1", ""), ("spark2", "9A.0B.2D.00.00")):
        monkeypatch.setenv("SPARKFLEET_FAKE_VBIOS", vbios)
        fleet[name] = run_module(host_attest, {**host, "bandwidth": False})["attestation"]
    blocking = attestation.blocking_differences(attestation.differences(fleet))
    assert list(blocking) == ["gpu0.vbios_version"]
    assert blocking["gpu0.vbios_version"]["spark2"] == "9A.0B.2D.00.00"


def test_the_real_probe_without_torch_or_cupy_records_null_with_the_reason(host):
    import importlib.util

    if importlib.util.find_spec("torch") or importlib.util.find_spec("cupy"):
        pytest.skip("torch or cupy importable here")
    out = run_module(host_attest, {**host, "probe_script": str(PROBE), "python": sys.executable})
    bandwidth = out["bandwidth"]
    assert bandwidth["bandwidth_bytes_s"] is None and bandwidth["backend"] is None
    assert "no GPU array library" in bandwidth["error"] and "torch" in bandwidth["error"]


def test_a_probe_that_crashes_or_is_missing_is_a_reason_not_a_failure(host, tmp_path):
    crash = script(tmp_path / "crash.py", "import sys\nsys.stderr.write('Traceback: boom\\n')\nsys.exit(1)\n")
    out = run_module(host_attest, {**host, "probe_script": crash, "python": sys.executable})
    assert out["bandwidth"]["bandwidth_bytes_s"] is None and "rc=1 Traceback: boom" in out["bandwidth"]["error"]
    out = run_module(host_attest, {**host, "probe_script": str(tmp_path / "absent.py")})
    assert "not found" in out["bandwidth"]["error"]


def test_no_driver_and_no_proc_files_leave_their_parts_null(host, tmp_path):
    out = run_module(host_attest, {**host, "nvidia_smi": "/nonexistent/nvidia-smi", "proc_root": str(tmp_path),
                                   "bandwidth": False})
    att = out["attestation"]
    assert att["driver_version"] is None and att["gpus"] == []
    assert {"nvidia-smi", "meminfo", "buddyinfo"} <= set(att["missing"])
    assert any(e.startswith("/nonexistent/nvidia-smi") for e in out["errors"])


def test_bad_options_fail_naming_them(host):
    out = run_module(host_attest, {**host, "bandwidth_mib": 0})
    assert out["failed"] and "bandwidth_mib" in out["msg"]


def test_a_latin1_byte_in_dmidecode_or_a_dmi_file_is_read_not_fatal(host, tmp_path):
    """Issue 33: one Latin-1 byte in dmidecode's output failed the module with a bare UTF-8 error
    and dropped the host at preflight. Its text is read (the byte replaced); the other fields are intact."""
    dmi = tmp_path / "dmi"
    dmi.mkdir()
    (dmi / "bios_vendor").write_bytes(b"Soci\xe9t\xe9 BIOS\n")  # read from sysfs
    for name in ("bios_date", "board_name", "product_name"):  # sys_vendor and bios_version left to dmidecode
        shutil.copy(FIXTURES / "dmi-id-supermicro-sys-6019p-wt" / name, dmi / name)
    text = (FIXTURES / "dmidecode-supermicro-sys-6019p-wt.txt").read_bytes()
    text = text.replace(b"\tManufacturer: Supermicro", b"\tManufacturer: Supermicro Fran\xe7ais", 1)
    assert b"\xe7" in text
    (tmp_path / "dmidecode.txt").write_bytes(text)
    dmidecode = script(tmp_path / "dmidecode", "import sys\n"
                       f"sys.stdout.buffer.write(open({str(tmp_path / 'dmidecode.txt')!r}, 'rb').read())\n")
    out = run_module(host_attest, {**host, "dmi_root": str(dmi), "dmidecode": dmidecode, "bandwidth": False})
    assert "failed" not in out and out["errors"] == []
    att = out["attestation"]
    assert att["bios_version"] == "2.0a"  # from dmidecode, beside the byte
    assert att["sys_vendor"].startswith("Supermicro Fran") and "\ufffd" in att["sys_vendor"]
    assert att["bios_vendor"].startswith("Soci") and "dmidecode" not in att["missing"]
