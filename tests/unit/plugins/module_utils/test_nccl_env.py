"""cluster/nccl_env.py: NCCL's all-reduce inside a multi-node run's environment, as data. Which environments it runs
in (plan), what a node's output says (parse), and the pair's checks (judge, and through pair.judge). A node's log
is composed from NCCL's own formats (NVIDIA/nccl @5067397c: src/debug.cc's prefix, src/init.cc, the net_ib and
net_socket transports, src/transport/net.cc's channel lines); tests/unit/test_torch_standin.py runs the script for
real against the torch stand-in."""

from __future__ import annotations

import json

import pytest
from _ansible_modules import host_util

nccl_env = host_util("cluster.nccl_env")
pair = host_util("cluster.pair")
GIB = 1 << 30
HCAS = ("rocep1s0f0", "roceP2p1s0f0")


def _log(host: str, rank: int, net: str = "IB", version: str = "2.27.7+cuda13.0") -> str:
    pre = f"{host}:4242:4251 [0] NCCL INFO "
    lines = [pre + f"NCCL version {version}"]
    if net == "IB":
        lines += [pre + "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:"
                  f"192.168.200.{12 + rank}<0>", pre + "Using network IB"]
        lines += [pre + f"Channel 0{c}/0 : {rank}[0] -> {1 - rank}[0] [send] via NET/IB/{c}/GDRDMA" for c in (0, 1)]
    else:
        lines += [pre + "NET/IB : No device found.", pre + f"NET/Socket : Using [0]eth0:10.0.0.{rank + 2}<0>",
                  pre + "Using network Socket"]
        lines += [pre + f"Channel 0{c}/0 : {rank}[0] -> {1 - rank}[0] [send] via NET/Socket/0" for c in (0, 1)]
    return "\n".join(lines)


def _output(host: str, rank: int, seconds=(0.05, 0.09), net="IB", version="2.27.7+cuda13.0", correct=True,
            world=2) -> str:
    result = {"rank": rank, "world": world, "torch": "2.9.0", "cuda": "13.0", "nccl": version.split("+")[0],
              "device": "NVIDIA GB10",
              "rows": [{"size_bytes": size, "seconds": s, "correct": correct}
                       for size, s in zip((GIB, 2 * GIB), seconds, strict=True)]}
    return _log(host, rank, net, version) + "\n" + nccl_env.MARK + "result== " + json.dumps(result) + "\n"


def _registered(host: str, rank: int, env: str = "ctr", **kw) -> dict:
    """A node's cluster_nccl_env result with one environment run (as preflight_work returns it)."""
    text = kw.pop("text", None)
    text = _output(host, rank, **kw) if text is None else text
    reading = nccl_env.parse(text)
    error = None if reading["result"] else "exit 1: {}".format(reading["error"])
    return {"changed": False, "environments": [{"environment": env, "kind": "container", "judged": True,
                                                "reason": "", "rank": rank, "world": 2, "error": error,
                                                "reading": reading, "command": ["docker", "run"], "log": None}]}


def _judge(results, floor=20.0, hcas=(HCAS, HCAS)):
    return nccl_env.judge(["spark1", "spark2"], results, [list(h) for h in hcas], floor)


def test_the_output_is_read_into_the_rank_s_figures_and_its_transport():
    reading = nccl_env.parse(_output("spark1", 0))
    assert reading["error"] is None and reading["result"]["rank"] == 0
    assert [r["size_bytes"] for r in reading["result"]["rows"]] == [GIB, 2 * GIB]
    assert reading["transport"]["net"] == "IB" and reading["transport"]["version"] == "2.27.7+cuda13.0"


def test_a_script_error_and_a_cut_output_are_read_as_no_result():
    assert nccl_env.parse(nccl_env.MARK + "error== RuntimeError: no CUDA device")["error"].startswith("RuntimeError")
    cut = nccl_env.parse(_log("spark1", 0) + "\n" + nccl_env.MARK + "result== {\"rank\": 0, \"ro")
    assert cut["result"] is None and cut["transport"]["net"] == "IB"


def test_busbw_averages_the_ranks_times_as_nccl_tests_does():
    # 2 ranks: 2(n-1)/n = 1, so busbw = algbw = size / mean time; 1 GiB in 0.05 s and 0.07 s -> 0.06 s
    rows = nccl_env.busbw_rows([_registered("spark1", 0, seconds=(0.05, 0.09))["environments"][0],
                                _registered("spark2", 1, seconds=(0.07, 0.09))["environments"][0]])
    assert [r["size_bytes"] for r in rows] == [GIB, 2 * GIB] and rows[0]["ranks"] == 2
    assert rows[0]["seconds"] == pytest.approx(0.06)
    assert rows[0]["busbw_gbs"] == pytest.approx(GIB / 0.06 / 1e9, abs=1e-3)
    assert rows[0]["busbw_gbs"] == rows[0]["algbw_gbs"]


def test_four_ranks_apply_nccl_tests_all_reduce_factor():
    entries = [_registered(f"s{r}", r, seconds=(0.1, 0.2), world=4)["environments"][0] for r in range(4)]
    (row, _) = nccl_env.busbw_rows(entries)
    assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 1.5, abs=1e-3)


def test_a_healthy_pair_inside_the_image_passes_with_versions_for_parity():
    checks, versions = _judge([_registered("spark1", 0), _registered("spark2", 1)])
    assert {(c, n) for c, n, _ in checks} == {("nccl_in_environment", "spark1"), ("nccl_in_environment", "spark2"),
                                              ("nccl_busbw_in_environment", "spark1")}
    assert all(ok for _, _, (ok, _) in checks), checks
    assert versions == {"ctr": {"spark1": "2.27.7", "spark2": "2.27.7"}}
    busbw = next(reason for c, _, (_, reason) in checks if c == "nccl_busbw_in_environment")
    assert "ctr" in busbw and "2 ranks" in busbw


@pytest.mark.parametrize("node2, floor, check, words", [
    ({"net": "Socket"}, 20.0, "nccl_in_environment", "Socket"),
    ({"correct": False}, 20.0, "nccl_in_environment", "wrong"),
    ({"text": nccl_env.MARK + "error== DistStoreError: timed out"}, 20.0, "nccl_in_environment", "DistStoreError"),
    ({}, 30.0, "nccl_busbw_in_environment", "floor 30.00"),
])
def test_a_broken_pair_inside_the_image_is_refused_naming_the_cause(node2, floor, check, words):
    checks, _ = _judge([_registered("spark1", 0), _registered("spark2", 1, **node2)], floor=floor)
    failed = [(c, reason) for c, _, (ok, reason) in checks if not ok]
    assert failed and all(c == check for c, _ in failed), failed
    assert words in failed[0][1], failed


def test_a_node_that_did_not_complete_leaves_busbw_and_version_unjudged_rather_than_guessed():
    checks, versions = _judge([_registered("spark1", 0), _registered("spark2", 1, text="killed")])
    assert versions == {} and not [c for c, _, _ in checks if c == "nccl_busbw_in_environment"]


def test_an_environment_not_run_is_named_and_passes():
    skipped = {"environments": [{"environment": "ctr", "kind": "container", "judged": False,
                                 "reason": nccl_env.NOT_JUDGED % "the image is not on the node yet"}]}
    checks, versions = _judge([skipped, skipped])
    assert versions == {} and [ok for _, _, (ok, _) in checks] == [True, True]
    assert "not on the node" in checks[0][2][1]


def test_a_left_out_test_gives_no_check():
    assert _judge([{"skipped": True}, {"skipped": True}]) == ([], {})


RDMA_OK = {"environments": [{"environment": "ctr", "kind": "container", "judged": True, "pass": True}]}


@pytest.mark.parametrize("rdma, run, words", [
    ([RDMA_OK, RDMA_OK], True, ""),
    ([{"skipped": True}, {"skipped": True}], True, ""),
    ([RDMA_OK, {"environments": [{"environment": "ctr", "kind": "container", "judged": True, "pass": False}]}],
     False, "RDMA is not visible"),
    ([RDMA_OK, {"environments": [{"environment": "ctr", "kind": "container", "judged": False, "pass": True}]}],
     False, "not on every node"),
    ([RDMA_OK, {"environments": []}], False, "not checked on every node"),
])
def test_the_plan_runs_where_every_node_sees_rdma_inside(rdma, run, words):
    (planned,) = nccl_env.plan([{"name": "ctr", "kind": "container", "docker_flags": []}], rdma)
    assert planned["run"] is run and words in planned["reason"]


def test_the_plan_never_runs_in_a_native_environment():
    (planned,) = nccl_env.plan([{"name": "nat", "kind": "native", "docker_flags": None}], [RDMA_OK, RDMA_OK])
    assert planned["run"] is False and "rootfs" in planned["reason"]


def test_the_process_gets_the_fabric_over_the_workload_and_the_rendezvous():
    env = nccl_env.process_env(1, 2, "192.168.200.12", 29517, {"NCCL_IB_HCA": "rocep1s0f0"},
                               {"NCCL_IB_HCA": "mlx5_0", "VLLM_X": "1"}, sizes=[GIB], warmup=1, iters=2)
    assert env["NCCL_IB_HCA"] == "rocep1s0f0" and env["VLLM_X"] == "1" and env["NCCL_DEBUG"] == "INFO"
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("1", "2", "192.168.200.12",
                                                                                        "29517")
    assert env["SPARKFLEET_NCCL_SIZES"] == str(GIB)


def test_a_wrapper_that_refuses_or_a_program_that_is_missing_is_an_error_not_a_raise():
    def refuse(_argv):
        raise ValueError("no docker flags resolved")

    assert "could not be built" in nccl_env.run(refuse)["error"]
    assert "could not start" in nccl_env.run(lambda a: ["/nonexistent/python3", *a[1:]])["error"]
    done = nccl_env.run(lambda a: ["sh", "-c", "echo 'NCCL WARN boom'; exit 3"])
    assert done["rc"] == 3 and done["error"].startswith("exit 3")


# ---- through pair.judge

FLOORS = {"mtu_min": 9000, "rdma_gbps_min": 85.0, "rdma_sum_gbps_min": 170.0, "rdma_lat_us_max": 3.0,
          "nccl_busbw_gbs_min": 20.0}


def _pair_nodes(nccl2: dict) -> list:
    rails = [{"hca": h, "netdev": f"eth{i}", "active": True, "mtu": 9000, "ipv4": f"192.168.{200 + i}.12",
              "prefixlen": 24} for i, h in enumerate(HCAS)]
    facts = {"driver": "580.95.05", "kernel": "6.11", "firmware": "28.45", "image_digest": "sha256:1", "clock_cap":
             "none applied"}
    return [{"inventory_hostname": n, "pair_node": {"rails": rails, "facts": facts}, "pair_nccl_env": r}
            for n, r in (("spark1", _registered("spark1", 0)), ("spark2", nccl2))]


def test_pair_judge_records_the_in_image_checks_their_floor_and_compares_the_image_nccl_versions():
    verdict = pair.judge("pair", _pair_nodes(_registered("spark2", 1, version="2.26.2+cuda12.9")), FLOORS)
    by = {(c["check"], c["node"]): c for c in verdict["checks"]}
    assert by[("nccl_busbw_in_environment", "spark1")]["floor"] == "nccl_busbw_gbs_min=20.0"
    assert by[("nccl_in_environment", "spark2")]["pass"] is True
    parity = by[("parity", "spark1")]
    assert parity["pass"] is False and "nccl_version[ctr]" in parity["reason"] and "2.26.2" in parity["reason"]
    assert any(c.startswith("parity on spark1") for c in verdict["causes"])


def test_pair_judge_refuses_an_image_whose_nccl_falls_back_to_sockets_on_one_node():
    verdict = pair.judge("pair", _pair_nodes(_registered("spark2", 1, net="Socket")), FLOORS)
    assert any(c.startswith("nccl_in_environment on spark2") and "Socket" in c for c in verdict["causes"]), \
        verdict["causes"]
