"""cluster/pair.py and cluster/node.py: the pair preflight's verdict over what the playbook registers, built from
the stand-ins' real-format outputs (perftest's and nccl-tests'), and a node read from a fake DGX Spark /sys.

The cases are data: each names what breaks and the check and text the verdict must name."""

from __future__ import annotations

import json
import os
import subprocess

import fakesysfs
import pytest
from _ansible_modules import STANDINS, host_util

pair = host_util("cluster.pair")
node = host_util("cluster.node")
FLOORS = {"mtu_min": 9000, "rdma_gbps_min": 85.0, "rdma_sum_gbps_min": 170.0, "rdma_lat_us_max": 3.0,
          "nccl_busbw_gbs_min": 20.0, "rdma_port": 18515, "rdma_duration_s": 5}
TWINS = (("rocep1s0f0", "enp1s0f0np0", "192.168.200.%d"), ("roceP2p1s0f0", "enP2p1s0f0np0", "192.168.201.%d"))


def _standin(tool: str, args: list, **env) -> dict:
    """A registered command result, as ansible.builtin.command gives it, of a stand-in run."""
    argv = [tool, *args]
    proc = subprocess.run([str(STANDINS / tool), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SPARKFLEET_FAKE_RDMA_PEERLESS": "1", **env})
    return {"cmd": argv, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _rails(n: int, **override) -> list:
    return [{"hca": hca, "netdev": dev, "port": 1, "state": "ACTIVE", "active": True, "mtu": 9000,
             "ipv4": ip % n, "prefixlen": 24, **override} for hca, dev, ip in TWINS]


ENGINE_ENV = {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "HF_TOKEN": "hf_secret"}


def _nodes(gbps="92.57", lat="1.47", net="IB", busbw="23.7", rails2=None, driver2="580.95.05", ping_rc=0,
           image2="sha256:1a2b", nccl_versions="2.27.7+cuda13.0", engine_env2=None, clock_cap2="none applied",
           probe_mhz=(2400.0, 2380.0)) -> list:
    rails1, rails2 = _rails(12), rails2 or _rails(13)
    bw = [_standin("ib_write_bw", [*pair.perftest_args(r, FLOORS, i), peer["ipv4"]], SPARKFLEET_FAKE_RDMA_GBPS=gbps)
          for i, (r, peer) in enumerate(zip(rails1, rails2, strict=True))]
    lat_runs = [_standin("ib_write_lat", [*pair.perftest_args(r, FLOORS, i, latency=True), peer["ipv4"]],
                         SPARKFLEET_FAKE_RDMA_LAT_US=lat)
                for i, (r, peer) in enumerate(zip(rails1, rails2, strict=True))]
    nccl = _standin("all_reduce_perf", ["-b", "8M", "-e", "2G", "-f", "2", "-g", "1"], NCCL_DEBUG="INFO",
                    SPARKFLEET_FAKE_NCCL_NET=net, SPARKFLEET_FAKE_NCCL_BUSBW_GBS=busbw,
                    SPARKFLEET_FAKE_NCCL_VERSION=nccl_versions)
    pings = {"results": [{"cmd": ["ping", "-M", "do", "-s", "8972", "-c", "3", "-W", "2", "-I", r["netdev"],
                                  peer["ipv4"]], "rc": ping_rc, "stdout": "", "stderr": ""}
                         for r, peer in zip(rails1, rails2, strict=True)]}
    facts = {"driver": "580.95.05", "kernel": "6.11.0-1016-nvidia", "firmware": "28.45.4028",
             "image_digest": "sha256:1a2b", "clock_cap": "none applied",
             "engine_env": {k: node.value_digest(v) for k, v in ENGINE_ENV.items()}}
    facts2 = {**facts, "driver": driver2, "image_digest": image2, "clock_cap": clock_cap2,
              "engine_env": {k: node.value_digest(v) for k, v in (engine_env2 or ENGINE_ENV).items()}}
    probe1, probe2 = ({"sm_clock_mhz": mhz, "run_id": "r1" if mhz else None} for mhz in probe_mhz)
    return [{"inventory_hostname": "spark1", "pair_node": {"rails": rails1, "facts": facts, "given": True,
                                                           "probe": probe1},
             "pair_pings": pings,
             "pair_bw": {"results": bw}, "pair_lat": {"results": lat_runs}, "pair_nccl": nccl},
            {"inventory_hostname": "spark2", "pair_node": {"rails": rails2, "facts": facts2, "given": True,
                                                           "probe": probe2},
             "pair_pings": pings, "pair_bw": {"skipped": True}}]


def test_a_healthy_pair_passes_every_check():
    verdict = pair.judge("pair", _nodes(), FLOORS)
    assert verdict["pass"] is True, verdict["causes"]
    assert verdict["nodes"] == ["spark1", "spark2"] and verdict["floors"]["nccl_busbw_gbs_min"] == 20.0
    names = {(c["check"], c["node"]) for c in verdict["checks"]}
    assert {("ib_write_bw", "spark1"), ("nccl_transport", "spark1"), ("nccl_busbw", "spark1"),
            ("parity", "spark1"), ("mtu", "spark2"), ("subnets", "spark2")} <= names
    assert len([c for c in verdict["checks"] if c["check"] == "ib_write_lat"]) == 2


@pytest.mark.parametrize("broken, check, words", [
    ({"net": "Socket"}, "nccl_transport on spark1", "Socket"),
    ({"busbw": "12"}, "nccl_busbw on spark1", "(floor 20.00)"),
    ({"gbps": "60"}, "ib_write_bw on spark1", "below 85.00 Gb/s per twin"),
    ({"lat": "9.5"}, "ib_write_lat on spark1", "above 3.00"),
    ({"driver2": "580.159.04"}, "parity on spark1", "driver: spark1='580.95.05', spark2='580.159.04'"),
    ({"image2": "sha256:9f8e"}, "parity on spark1", "image_digest: spark1='sha256:1a2b', spark2='sha256:9f8e'"),
    ({"rails2": _rails(13, mtu=1500)}, "mtu on spark2", "MTU below 9000"),
    ({"rails2": [dict(r, ipv4="192.168.200.13") for r in _rails(13)]}, "subnets on spark2", "share a subnet"),
    ({"rails2": _rails(13, state="DOWN", active=False)}, "rails_active on spark2", "DOWN"),
    ({"ping_rc": 1}, "jumbo_ping on spark1", "did not cross"),
    # each rank's own "NCCL version" line (NCCL_DEBUG=INFO), rank i on node i
    ({"nccl_versions": "2.27.7+cuda13.0,2.26.2+cuda12.9"}, "parity on spark1",
     "nccl_version: spark1='2.27.7+cuda13.0', spark2='2.26.2+cuda12.9'"),
    ({"engine_env2": {**ENGINE_ENV, "VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}}, "parity on spark1",
     "engine_env.VLLM_ATTENTION_BACKEND: spark1='sha256:"),
    ({"engine_env2": {"HF_TOKEN": "hf_secret"}}, "parity on spark1",
     "engine_env.VLLM_ATTENTION_BACKEND: spark1='sha256:"),
    ({"clock_cap2": "GPU0 locked 2100-2100 MHz"}, "parity on spark1",
     "clock_cap: spark1='none applied', spark2='GPU0 locked 2100-2100 MHz'"),
    ({"driver2": None}, "parity on spark1", "unread: driver on spark2 (spark1='580.95.05')"),
    ({"probe_mhz": (2400.0, 1900.0)}, "probe_clocks on spark1", "spark1=2400 MHz, spark2=1900 MHz"),
], ids=lambda v: v if isinstance(v, str) and " on " in v else "")
def test_a_broken_pair_is_refused_naming_the_cause(broken, check, words):
    verdict = pair.judge("pair", _nodes(**broken), FLOORS)
    assert verdict["pass"] is False
    named = [c for c in verdict["causes"] if c.startswith(check + ":")]
    assert named and words in named[0], verdict["causes"]


def test_the_engine_environment_is_compared_without_recording_its_values():
    verdict = pair.judge("pair", _nodes(engine_env2={**ENGINE_ENV, "HF_TOKEN": "hf_other"}), FLOORS)
    assert verdict["pass"] is False and "engine_env.HF_TOKEN" in verdict["causes"][0]
    assert "hf_secret" not in json.dumps(verdict) and "hf_other" not in json.dumps(verdict)


def test_a_probe_clock_not_read_yet_is_named_and_does_not_refuse():
    verdict = pair.judge("pair", _nodes(probe_mhz=(2400.0, None)), FLOORS)
    assert verdict["pass"] is True, verdict["causes"]
    (probe,) = [c for c in verdict["checks"] if c["check"] == "probe_clocks"]
    assert "unread on spark2" in probe["reason"] and probe["floor"] == "probe_clock_ratio_min=0.9"


def test_an_image_not_built_yet_is_named_unread_and_does_not_refuse():
    # bench.yml builds or pulls the image after the preflight: a first campaign's nodes have none yet
    verdict = pair.judge("pair", _nodes(image2=None), FLOORS)
    assert verdict["pass"] is True, verdict["causes"]
    (parity,) = [c for c in verdict["checks"] if c["check"] == "parity"]
    assert "not read (not judged): image_digest on spark2 (spark1='sha256:1a2b')" in parity["reason"]


def test_each_check_records_its_floor():
    checks = pair.judge("pair", _nodes(), {**FLOORS, "probe_clock_ratio_min": 0.9})["checks"]
    floors = {c["check"]: c["floor"] for c in checks}
    assert floors["nccl_busbw"] == "nccl_busbw_gbs_min=20.0" and floors["mtu"] == "mtu_min=9000"
    assert floors["parity"] == "equal on every node" and floors["probe_clocks"] == "probe_clock_ratio_min=0.9"


def test_no_nccl_output_leaves_each_node_s_version_unread():
    nodes = _nodes()
    nodes[0]["pair_nccl"] = {"cmd": "all_reduce_perf", "rc": 127, "stdout": "", "stderr": "not found"}
    causes = pair.judge("pair", nodes, FLOORS)["causes"]
    assert any(c.startswith("parity on spark1:") and "unread: nccl_version on spark1, spark2" in c for c in causes)


def test_a_rank_the_nccl_test_does_not_place_on_a_host_leaves_its_version_unread():
    run = _standin("all_reduce_perf", ["-b", "1G", "-e", "1G"], NCCL_DEBUG="INFO",
                   SPARKFLEET_FAKE_NCCL_VERSION="2.27.7+cuda13.0,2.26.2+cuda12.9")
    assert pair.nccl_versions(run, ["spark1", "spark2"]) == {"spark1": "2.27.7+cuda13.0", "spark2": "2.26.2+cuda12.9"}
    run["stdout"] = "\n".join(line for line in run["stdout"].splitlines() if "Rank  1" not in line)
    assert pair.nccl_versions(run, ["spark1", "spark2"]) == {"spark1": "2.27.7+cuda13.0", "spark2": None}


def test_a_tool_that_never_answered_is_a_cause_not_a_pass():
    nodes = _nodes()
    nodes[0]["pair_bw"]["results"][0] = {"cmd": ["ib_write_bw", "-d", "rocep1s0f0", "192.168.200.13"], "rc": 1,
                                         "stdout": "", "stderr": "Couldn't connect to 192.168.200.13:18515"}
    nodes[0]["pair_nccl"] = {"cmd": "mpirun -np 2 all_reduce_perf", "rc": 127, "stdout": "",
                             "stderr": "mpirun: not found"}
    causes = pair.judge("pair", nodes, FLOORS)["causes"]
    assert any("rocep1s0f0->192.168.200.13 gave no result: rc=1 Couldn't connect" in c for c in causes), causes
    assert any(c.startswith("nccl_busbw on spark1: no result row") and "mpirun: not found" in c for c in causes)


def test_command_lines():
    rail = {"hca": "rocep1s0f0", "port": 1, "roce_v2_gid_index": 3}
    assert pair.perftest_args(rail, FLOORS, 1) == ["-d", "rocep1s0f0", "-i", "1", "-p", "18516", "-F", "-x", "3",
                                                   "--report_gbits", "-D", "5"]
    assert pair.perftest_args(rail, FLOORS, 0, latency=True)[4:6] == ["-p", "18615"]
    argv = pair.nccl_argv(["mpirun", "-np", "{nodes}", "-H", "{hosts}", "all_reduce_perf"],
                          [_rails(12), _rails(13)])
    assert argv == ["mpirun", "-np", "2", "-H", "192.168.200.12:1,192.168.200.13:1", "all_reduce_perf"]


def _runner(outputs: dict):
    def run(argv):
        return outputs[argv[0]]
    return run


def test_a_node_is_read_from_sysfs_and_a_given_rail_is_checked_against_it(tmp_path):
    spark = [{"hca": hca, "netdev": dev, "active": hca == "rocep1s0f0", "ipv4": (ip % 12) + "/24"}
             for hca, dev, ip in TWINS]
    sysfs = str(fakesysfs.build(tmp_path / "sys", spark))
    outputs = {"ip": (0, fakesysfs.ip_addr_json(spark), ""), "nvidia-smi": (0, "580.95.05\n", ""),
               "ibv_devinfo": (1, "", "no devices")}
    which = {"ip": "/sbin/ip", "nvidia-smi": "/usr/bin/nvidia-smi"}.get
    found = node.readings(None, _runner(outputs), which, sysfs=sysfs)
    assert [(r["hca"], r["state"], r["mtu"], r["ipv4"]) for r in found["ports"]] == [
        ("rocep1s0f0", "ACTIVE", 9000, "192.168.200.12"), ("roceP2p1s0f0", "DOWN", 9000, "192.168.201.12")]
    assert [r["hca"] for r in found["rails"]] == ["rocep1s0f0"] and found["given"] is False
    # found rails: both twins of the cable must be up; here one is, and the verdict says so
    verdict = pair.judge("pair", [{"inventory_hostname": "spark1", "pair_node": found}], FLOORS)
    assert "rails_active on spark1: 1 ACTIVE rail(s) (rocep1s0f0), need 2" in verdict["causes"]
    assert found["env"]["NCCL_IB_HCA"] == "rocep1s0f0" and found["facts"]["driver"] == "580.95.05"
    assert found["facts"]["env"] == found["env"] and found["facts"]["firmware"] is None  # no ibv_devinfo here

    given = node.readings([{"hca": "roceP2p1s0f0", "netdev": "enP2p1s0f0np0"}], _runner(outputs), which,
                          sysfs=sysfs)
    (rail,) = given["rails"]
    assert rail["state"] == "DOWN" and rail["active"] is False and rail["ipv4"] == "192.168.201.12", rail
    assert given["env"] == {}  # no ACTIVE rail: nothing for NCCL
    assert json.dumps(given)  # what the module returns is plain data


def test_a_node_records_its_engine_env_digest_clock_cap_and_latest_probe(tmp_path):
    results_root, results_dir = tmp_path / "results", tmp_path / "results" / "study" / "spark1"
    for run_id, mhz, age in (("old", 2000.0, 100), ("new", 2405.0, 10), ("unprobed", None, 1)):
        record = results_dir / "runs" / run_id / "record.json"
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"readiness": {"sm_clock_mhz": mhz}}))
        os.utime(record, (os.path.getmtime(record) - age,) * 2)
    lock_record = tmp_path / "gpu-state.json"
    lock_record.write_text(json.dumps({"locked_clocks": {"0": {"min": 2100, "max": 2100}}}))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "gpu_state_saved.json").write_text(json.dumps(
        {"host": "spark1", "saved": {"gpus": []}, "state_file": str(lock_record)}))
    found = node.readings([], _runner({}), lambda _tool: None, sysfs=str(tmp_path / "nosys"),
                          workload_env={"HF_TOKEN": "hf_secret"}, results_root=str(results_root),
                          results_dir=str(results_dir))
    assert found["facts"]["clock_cap"] == "GPU0 locked 2100-2100 MHz"
    assert found["facts"]["engine_env"] == {"HF_TOKEN": node.value_digest("hf_secret")}
    assert "hf_secret" not in json.dumps(found)
    assert found["probe"] == {"sm_clock_mhz": 2405.0, "run_id": "new"}
    # no gpu_state record: nothing applied; an unreadable one: unread (None), never "none"
    assert node.clock_cap({"applied": False, "error": None}) == "none applied"
    assert node.clock_cap({"applied": False, "error": "gpu_state_saved.json: not JSON"}) is None
    assert node.latest_probe(str(tmp_path / "empty")) == {"sm_clock_mhz": None, "run_id": None}


def test_rdma_inside_each_environment_is_a_check_per_node_and_environment():
    """cluster_rdma_env's entries (rdma_env.in_environments): a refused one refuses the pair naming its cause, one
    not judged yet (no image on the node) passes naming why; none registered (the playbook run alone) adds none."""
    rdma_env = host_util("cluster.rdma_env")
    refused = rdma_env.verdict(rdma_env.parse("==sparkfleet-rdma:dev==\n==sparkfleet-rdma:memlock==\n64\n"
                                              "==sparkfleet-rdma:end==\n"), ["rocep1s0f0"])[1]
    nodes = _nodes()
    nodes[0]["pair_rdma_env"] = {"environments": [
        {"environment": "ngc", "kind": "container", "judged": True, "pass": False, "reason": refused}]}
    nodes[1]["pair_rdma_env"] = {"environments": rdma_env.in_environments(
        [{"name": "ngc", "kind": "container", "docker_flags": []}, {"name": "chroot", "kind": "native"}],
        ["rocep1s0f0"], lambda: False, lambda env: None, lambda: None)}
    verdict = pair.judge("pair", nodes, FLOORS)
    checks = [c for c in verdict["checks"] if c["check"] == "rdma_in_environment"]
    assert [(c["node"], c["pass"]) for c in checks] == [("spark1", False), ("spark2", True), ("spark2", True)]
    (cause,) = verdict["causes"]
    assert cause.startswith("rdma_in_environment on spark1: ngc (container): no uverbs device") and "64 KiB" in cause
    assert "the image is not on the node yet; each multi-node run checks it at its start" in checks[1]["reason"]
    assert "native rootfs" in checks[2]["reason"]
    assert not any(c["check"] == "rdma_in_environment" for c in pair.judge("pair", _nodes(), FLOORS)["checks"])
