"""The RDMA check inside a real container (issue 36): the probe of cluster/rdma_env.py run by ``docker run`` with the
environment's flags, as rank 0's run and the pair preflight run it. RDMA hardware is a stand-in: /dev/null passed as
/dev/infiniband/uverbs0 (--device), the ibv_devinfo stand-in (tests/fleet/standins, rdma-core's devinfo.c format)
mounted in on the PATH, as an NGC image has rdma-core's. With --device and --ulimit memlock=-1 it passes; without
them it is refused naming both causes and their fixes."""

from __future__ import annotations

import resource
import subprocess

import pytest
from _ansible_modules import STANDINS, host_util

pytestmark = [pytest.mark.root, pytest.mark.docker]

rdma_env = host_util("cluster.rdma_env")
runexec = host_util("run.runexec")

NAME = "sparkfleet-test-rdma-probe"
HCAS = ["rocep1s0f0", "roceP2p1s0f0"]
#: the stand-in on the PATH, both twins ACTIVE; no network: the probe reads files only
BASE_FLAGS = ["--network", "none", "--mount", f"type=bind,source={STANDINS},target=/opt/standins,readonly"]
ENV = {"PATH": "/opt/standins:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "SPARKFLEET_FAKE_RDMA_HCAS": ",".join(HCAS), "SPARKFLEET_FAKE_RDMA_STATE": "ACTIVE"}
#: this machine may not grant an unlimited memlock (no CAP_SYS_RESOURCE: runc cannot set it); then the container
#: gets the hard limit there is, and the check must name exactly that
UNLIMITED = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] == resource.RLIM_INFINITY
MEMLOCK = "memlock=-1" if UNLIMITED else f"memlock={resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]}"


def _probe(image: str, flags: list) -> dict:
    def wrap(argv):
        return runexec.container_command("docker", NAME, image, BASE_FLAGS + flags, argv, ENV, "/", [],
                                         {"sparkfleet.step": "rdma"})
    try:
        return rdma_env.check(wrap, HCAS, 120)
    finally:
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def test_rdma_is_seen_in_a_container_given_the_device_and_memlock(test_image):
    result = _probe(test_image, ["--device=/dev/null:/dev/infiniband/uverbs0", "--ulimit", MEMLOCK])
    reading = result["reading"]
    assert reading["complete"], result
    assert reading["devices"] == ["uverbs0"] and reading["ports_from"] == "ibv_devinfo"
    assert [p["hca"] for p in reading["ports"] if p["active"]] == HCAS
    if UNLIMITED:
        assert result["pass"] is True and reading["memlock"] == "unlimited", result["reason"]
        assert "uverbs0 in /dev/infiniband; ACTIVE inside: rocep1s0f0, roceP2p1s0f0" in result["reason"]
    else:  # the devices and ports pass; the limit this machine allows is named in KiB
        kib = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1] // 1024
        assert result["pass"] is False and result["reason"].startswith(f"memlock limited to {kib} KiB"), result


def test_a_container_without_the_device_and_memlock_flags_is_refused_naming_both(test_image):
    result = _probe(test_image, [])
    assert result["pass"] is False and result["reading"]["complete"], result
    reason = result["reason"]
    assert "no uverbs device in /dev/infiniband" in reason and "--device=/dev/infiniband" in reason
    if result["reading"]["memlock"] != "unlimited":  # a dockerd started with LimitMEMLOCK=infinity passes it on
        assert "memlock limited to" in reason and "KiB" in reason and "--ulimit memlock=-1" in reason
    assert "ACTIVE port" not in reason  # the ports were seen: only what is missing is named
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode != 0  # nothing left
