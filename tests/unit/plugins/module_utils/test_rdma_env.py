"""cluster/rdma_env.py: RDMA as the engine's environment sees it (issue 36). The probe's output is built from the
real formats (rdma-core @00b335ca30c62282efda76304630a06397642d0f libibverbs/examples/devinfo.c, through the
ibv_devinfo stand-in; sysfs's ``"%d: %s"`` port state), the verdicts are data, and :func:`check` runs the real
probe through real wrappers."""

from __future__ import annotations

import os
import resource
import subprocess

import pytest
from _ansible_modules import STANDINS, host_util

rdma_env = host_util("cluster.rdma_env")

TWINS = "rocep1s0f0,roceP2p1s0f0"


def _devinfo(state: str = "ACTIVE", hcas: str = TWINS) -> str:
    """ibv_devinfo's output for the HCAs, each port in ``state`` (the stand-in prints devinfo.c's format)."""
    return subprocess.run([str(STANDINS / "ibv_devinfo")], capture_output=True, text=True, timeout=30, check=True,
                          env={**os.environ, "SPARKFLEET_FAKE_RDMA_HCAS": hcas,
                               "SPARKFLEET_FAKE_RDMA_STATE": state}).stdout


def _output(devices=("rdma_cm", "uverbs0", "uverbs1"), devinfo=None, sysfs=(), memlock="unlimited",
            end=True) -> str:
    """The probe's output as its script prints it."""
    parts = ["==sparkfleet-rdma:dev==", *devices, "==sparkfleet-rdma:ibv_devinfo=="]
    if devinfo is not None:
        parts += [devinfo.rstrip("\n"), "rc=0"]
    parts += ["==sparkfleet-rdma:sysfs==", *sysfs, "==sparkfleet-rdma:memlock==", memlock]
    return "\n".join(parts + (["==sparkfleet-rdma:end=="] if end else [])) + "\n"


SYSFS_UP = ("/sys/class/infiniband/rocep1s0f0/ports/1/state 4: ACTIVE",
            "/sys/class/infiniband/roceP2p1s0f0/ports/1/state 4: ACTIVE",
            "/sys/class/infiniband/rocep1s0f1/ports/1/state 1: DOWN")


def test_parse_reads_ibv_devinfo_ports_devices_and_memlock():
    reading = rdma_env.parse(_output(devinfo=_devinfo()))
    assert reading["complete"] and reading["devices"] == ["rdma_cm", "uverbs0", "uverbs1"]
    assert reading["ports_from"] == "ibv_devinfo" and reading["memlock"] == "unlimited"
    assert reading["ports"] == [
        {"hca": "rocep1s0f0", "port": 1, "state": "ACTIVE", "state_code": 4, "active": True},
        {"hca": "roceP2p1s0f0", "port": 1, "state": "ACTIVE", "state_code": 4, "active": True}]
    assert reading["ibv_devinfo"] == {"rc": 0, "error": None}


def test_parse_falls_back_to_sysfs_and_reads_a_memlock_limit_in_kib():
    reading = rdma_env.parse(_output(sysfs=SYSFS_UP, memlock="8192"))
    assert reading["ports_from"] == "sysfs" and reading["ibv_devinfo"] is None
    assert [(p["hca"], p["state"], p["active"]) for p in reading["ports"]] == [
        ("rocep1s0f0", "ACTIVE", True), ("roceP2p1s0f0", "ACTIVE", True), ("rocep1s0f1", "DOWN", False)]
    assert reading["memlock"] == "8192" and reading["memlock_kib"] == 8192


def test_parse_prefers_sysfs_when_ibv_devinfo_cannot_open_the_device():
    # devinfo.c prints "Failed to open device" when the uverbs node is missing: no port, sysfs still shows them
    text = _output(devices=(), sysfs=SYSFS_UP[:1]).replace(
        "==sparkfleet-rdma:ibv_devinfo==", "==sparkfleet-rdma:ibv_devinfo==\nFailed to open device\nrc=1")
    reading = rdma_env.parse(text)
    assert reading["ports_from"] == "sysfs" and reading["ibv_devinfo"] == {"rc": 1, "error": "Failed to open device"}


# Each case: the probe's output, the rail HCAs, pass, what the reason must name (and must not).
VERDICTS = {
    "all there, by ibv_devinfo": (_output(devinfo=_devinfo()), ["rocep1s0f0", "roceP2p1s0f0"], True,
                                  ["uverbs0, uverbs1", "ACTIVE inside: rocep1s0f0, roceP2p1s0f0", "ibv_devinfo"], []),
    "all there, by sysfs, no hcas": (_output(sysfs=SYSFS_UP), [], True, ["sysfs", "memlock unlimited"], []),
    "no /dev/infiniband": (_output(devices=(), sysfs=SYSFS_UP), ["rocep1s0f0"], False,
                           ["no uverbs device", "no /dev/infiniband at all", "--device=/dev/infiniband",
                            "--privileged"], ["memlock", "rail HCA"]),
    "rdma_cm only": (_output(devices=("rdma_cm",), sysfs=SYSFS_UP), [], False, ["no uverbs device", "(rdma_cm)"],
                     []),
    "a twin down": (_output(devinfo=_devinfo(state="rocep1s0f0=ACTIVE,roceP2p1s0f0=DOWN")),
                    ["rocep1s0f0", "roceP2p1s0f0"], False,
                    ["rail HCA(s) roceP2p1s0f0 with no ACTIVE port", "roceP2p1s0f0/1 DOWN"], ["rocep1s0f0 with"]),
    "a rail not visible": (_output(sysfs=SYSFS_UP[:1]), ["rocep1s0f0", "roceP2p1s0f0"], False,
                           ["roceP2p1s0f0 with no ACTIVE port", "(read by sysfs)"], []),
    "no port at all, no hcas": (_output(), None, False, ["no ACTIVE RDMA port", "no RDMA port visible"], []),
    "memlock 64 KiB": (_output(sysfs=SYSFS_UP, memlock="64"), ["rocep1s0f0"], False,
                       ["memlock limited to 64 KiB", "--ulimit memlock=-1"], ["uverbs"]),
    "memlock unread": (_output(sysfs=SYSFS_UP, memlock=""), [], False, ["memlock limited to unread"], []),
    "output cut short": (_output(sysfs=SYSFS_UP, end=False), [], False, ["did not run to its end"], []),
}


@pytest.mark.parametrize("case", list(VERDICTS))
def test_verdict(case):
    text, hcas, passes, named, unnamed = VERDICTS[case]
    ok, reason = rdma_env.verdict(rdma_env.parse(text), hcas)
    assert ok is passes, reason
    for part in named:
        assert part in reason, (part, reason)
    for part in unnamed:
        assert part not in reason, (part, reason)


def test_verdict_names_every_cause_at_once():
    ok, reason = rdma_env.verdict(rdma_env.parse(_output(devices=(), memlock="8192")), ["rocep1s0f0"])
    assert not ok and reason.count("; ") == 2
    assert "no uverbs device" in reason and "rocep1s0f0 with no ACTIVE port" in reason and "8192 KiB" in reason


@pytest.fixture
def standin_path(tmp_path):
    """A PATH whose ibv_devinfo is the stand-in (as an NGC image has rdma-core's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ibv_devinfo").symlink_to(STANDINS / "ibv_devinfo")
    return f"{bin_dir}:{os.environ['PATH']}"


def _limited(memlock: str, path: str):
    """A wrapper that runs the argv with a memlock limit and ibv_devinfo's stand-in on the PATH."""
    return lambda argv: ["env", f"PATH={path}", f"SPARKFLEET_FAKE_RDMA_HCAS={TWINS}",
                         "SPARKFLEET_FAKE_RDMA_STATE=ACTIVE", "sh", "-c", f'ulimit -l {memlock} && exec "$0" "$@"',
                         *argv]


@pytest.mark.skipif(os.path.isdir("/dev/infiniband"), reason="a host with RDMA devices: no refusal to assert")
def test_check_runs_the_probe_through_the_wrapper(standin_path):
    result = rdma_env.check(_limited("64", standin_path), ["rocep1s0f0", "roceP2p1s0f0"], 30)
    assert result["pass"] is False and result["command"][:2] == ["env", f"PATH={standin_path}"]
    reading = result["reading"]
    assert reading["complete"] and reading["rc"] == 0 and reading["memlock_kib"] == 64
    assert reading["ports_from"] == "ibv_devinfo" and all(p["active"] for p in reading["ports"])
    # this host has no /dev/infiniband: the devices and the memlock limit are named, the ports are not
    assert "no uverbs device" in result["reason"] and "memlock limited to 64 KiB" in result["reason"]
    assert "ACTIVE port" not in result["reason"]


@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] != resource.RLIM_INFINITY,
                    reason="memlock's hard limit is not unlimited here (no CAP_SYS_RESOURCE to raise it)")
def test_check_sees_an_unlimited_memlock_set_by_the_wrapper(standin_path):
    result = rdma_env.check(_limited("unlimited", standin_path), ["rocep1s0f0"], 30)
    assert result["reading"]["memlock"] == "unlimited" and "memlock" not in result["reason"]


def test_check_never_raises_for_a_failing_probe():
    def refusing(argv):
        raise ValueError("no docker flags resolved for environment 'study'")

    built = rdma_env.check(refusing, [], 5)
    assert built["pass"] is False and built["command"] is None and "no docker flags resolved" in built["reason"]
    slow = rdma_env.check(lambda argv: ["sleep", "30"], [], 0.5)
    assert slow["pass"] is False and "did not end within 0 s" in slow["reason"]
    missing = rdma_env.check(lambda argv: ["/nonexistent/docker", "run"] + argv, [], 5)
    assert missing["pass"] is False and "could not start" in missing["reason"]
    failed = rdma_env.check(lambda argv: ["sh", "-c", "echo 'docker: Error response from daemon' >&2; exit 125"],
                            [], 5)
    assert failed["pass"] is False and failed["reading"]["rc"] == 125
    assert "did not run to its end" in failed["reason"] and "Error response from daemon" in failed["reason"]
