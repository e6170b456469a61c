"""The NCCL parser (issue 36): nccl-tests tables, NCCL_DEBUG=INFO transport, bus bandwidth, the pair verdict.

Real captures (tests/fixtures/nccl/README.md) first; older and optional layouts are written here from nccl-tests'
own printf formats, each cited (so %-formatting, as the C source has it).
"""

# ruff: noqa: UP031

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit._ansible_modules import STANDINS, host_util

nccl = host_util("nccl")

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "nccl"
STANDIN = STANDINS / "all_reduce_perf"
SPARK_HCAS = ["rocep1s0f0", "roceP2p1s0f0"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---- the real nccl-tests 2.19.6 capture (2 x H200, one process, NCCL INFO lines before the table)


def test_real_all_reduce_perf_table_header_rows_and_footer():
    table = nccl.parse_nccl_tests(fixture("all_reduce_perf-2.19.6-h200x2-p2p.log"))
    assert table["warnings"] == []
    assert table["program"] == "all_reduce_perf"
    assert (table["nccl_tests_version"], table["nccl_headers"], table["nccl_library"]) == ("2.19.6", 22809, 22809)
    assert table["config"] == {"nthread": 1, "ngpus": 2, "min_bytes": 8 << 20, "max_bytes": 2 << 30, "step": 2,
                               "step_kind": "factor", "warmup_iters": 1, "iters": 20, "agg_iters": 1,
                               "validation": 1, "graph": 0, "unalign": 0}
    assert [d["name"] for d in table["devices"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert table["devices"][1] == {"rank": 1, "group": 0, "pid": 1505, "host": "vm", "device": 1,
                                   "bus": "0000:00:07", "name": "NVIDIA H200"}
    assert table["time_column"] == "time" and table["per_iteration"] is False
    assert [r["size_bytes"] for r in table["rows"]] == [(8 << 20) << k for k in range(9)]
    first = table["rows"][0]
    assert (first["count"], first["type"], first["redop"], first["root"]) == (2097152, "float", "sum", -1)
    assert first["out_of_place"] == {"time_us": 49.73, "algbw_gbs": 168.69, "busbw_gbs": 168.69, "wrong": 0}
    assert first["in_place"] == {"time_us": 49.33, "algbw_gbs": 170.06, "busbw_gbs": 170.06, "wrong": 0}
    assert (table["out_of_bounds"], table["out_of_bounds_ok"]) == (0, True)
    assert table["avg_busbw_gbs"] == 272.685 and table["avg_busbw_check"] is None
    assert table["concluded"] is True
    # the floor's figure: the worst half of the rows of 1 GiB and more
    assert nccl.large_message_busbw(table) == 326.34
    assert nccl.large_message_busbw(table, 2 << 30) == 336.89


@pytest.mark.parametrize("name, nranks", [("all_reduce_perf-2.19.6-h200x2-p2p.log", 2),
                                          ("all_reduce_perf-2.19.6-h200x2-socket.log", 2)])
def test_bus_bandwidth_reproduces_the_real_tables_columns(name, nranks):
    """sparkfleet's algbw/busbw from nccl-tests' own time column give nccl-tests' own algbw/busbw columns."""
    table = nccl.parse_nccl_tests(fixture(name))
    assert table["rows"]
    for row in table["rows"]:
        for half in (row["out_of_place"], row["in_place"]):
            seconds = half["time_us"] * 1e-6
            assert nccl.algorithm_bandwidth(row["size_bytes"], seconds) == pytest.approx(half["algbw_gbs"], rel=4e-3)
            assert nccl.bus_bandwidth("all_reduce_perf", row["size_bytes"], seconds, nranks) == \
                pytest.approx(half["busbw_gbs"], rel=4e-3)


def test_real_single_host_log_says_socket_network_but_p2p_channels():
    """One host without RDMA: NCCL lists no IB device, picks the Socket network, yet its channels are P2P."""
    transport = nccl.nccl_transport(fixture("all_reduce_perf-2.19.6-h200x2-p2p.log"))
    assert transport["version"] == "2.28.9+cuda13.0"
    assert transport["net"] == "Socket" and transport["networks"] == ["Socket"]
    assert transport["ib_no_device"] is True and transport["ib_devices"] == []
    assert transport["socket_devices"] == [{"index": 0, "name": "eth0", "address": "192.0.2.2<0>"}]
    assert transport["transports"] == ["P2P"]
    assert transport["channels"][0]["via"] == "P2P/direct pointer"
    assert transport["hosts"] == ["vm"] and transport["warnings"] == []
    ok, reason = nccl.transport_verdict(transport, SPARK_HCAS)
    assert not ok
    assert "Socket network" in reason and "NET/IB : No device found" in reason


@pytest.mark.parametrize("name", ["all_reduce_perf-2.19.6-h200x2-socket.log",
                                  "torch-allreduce-h200x2-socket-nccl-debug.log"])
def test_real_socket_fallback_is_refused_naming_the_channels(name):
    transport = nccl.nccl_transport(fixture(name))
    assert transport["transports"] == ["NET/Socket"]
    assert transport["net_devices_used"] == [0]
    directions = {c["direction"] for c in transport["channels"]}
    assert directions == {"send", "receive"}
    ok, reason = nccl.transport_verdict(transport, SPARK_HCAS)
    assert not ok
    assert reason.startswith("NCCL fell back to sockets:") and "via NET/Socket" in reason


def test_real_torch_log_p2p_cumem():
    transport = nccl.nccl_transport(fixture("torch-allreduce-h200x2-p2p-nccl-debug.log"))
    assert transport["version"] == "2.28.9+cuda13.0"
    assert transport["transports"] == ["P2P"]
    assert {c["via"] for c in transport["channels"]} == {"P2P/CUMEM"}


# ---- a Spark pair with RDMA (composed from NCCL's formats, see the fixtures' README)


def test_spark_pair_over_roce_passes_and_names_both_hcas():
    transport = nccl.nccl_transport(fixture("nccl-info-spark-pair-roce.log"))
    assert transport["net"] == "IB" and transport["hosts"] == ["spark-a", "spark-b"]
    assert transport["ib_devices"] == [{"index": 0, "name": "rocep1s0f0", "port": 1, "link_layer": "RoCE"},
                                       {"index": 1, "name": "roceP2p1s0f0", "port": 1, "link_layer": "RoCE"}]
    assert set(transport["ib_devices_by_host"]) == {"spark-a", "spark-b"}
    assert transport["ib_oob"] == "enp1s0f0np0:192.168.100.10<0>" and transport["relaxed_ordering"] is True
    assert transport["transports"] == ["NET/IB"] and transport["net_devices_used"] == [0, 1]
    ok, reason = nccl.transport_verdict(transport, SPARK_HCAS)
    assert ok, reason
    assert "rocep1s0f0/RoCE" in reason and "roceP2p1s0f0/RoCE" in reason
    assert nccl.transport_verdict(transport, "rocep1s0f0, roceP2p1s0f0")[0]


def test_verdict_names_the_host_missing_an_hca_and_a_wrong_link_layer():
    text = fixture("nccl-info-spark-pair-roce.log")
    one_hca = text.replace("[0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:192.168.100.11",
                           "[0]rocep1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:192.168.100.11")
    ok, reason = nccl.transport_verdict(nccl.nccl_transport(one_hca), SPARK_HCAS)
    assert not ok and "roceP2p1s0f0" in reason and "on spark-b" in reason
    infiniband = text.replace("/RoCE", "/IB")
    ok, reason = nccl.transport_verdict(nccl.nccl_transport(infiniband), SPARK_HCAS)
    assert not ok and "link layer IB, not RoCE" in reason
    assert nccl.transport_verdict(nccl.nccl_transport(infiniband), SPARK_HCAS, link_layer=None)[0]


def test_verdict_refuses_a_pair_whose_channels_never_crossed_the_network_and_a_silent_log():
    no_net = "\n".join(line for line in fixture("nccl-info-spark-pair-roce.log").splitlines() if "via NET" not in line)
    ok, reason = nccl.transport_verdict(nccl.nccl_transport(no_net), SPARK_HCAS)
    assert not ok and "did not cross the network" in reason
    assert nccl.transport_verdict(nccl.nccl_transport(no_net), SPARK_HCAS, require_net_channels=False)[0]
    ok, reason = nccl.transport_verdict(nccl.nccl_transport("#  all_reduce_perf without NCCL_DEBUG\n"), SPARK_HCAS)
    assert not ok and "NCCL_DEBUG=INFO" in reason


def test_one_rank_on_sockets_makes_the_pair_socket():
    text = fixture("nccl-info-spark-pair-roce.log").replace(
        "spark-b:3877:3896 [0] NCCL INFO Using network IB", "spark-b:3877:3896 [0] NCCL INFO Using network Socket")
    transport = nccl.nccl_transport(text)
    assert transport["networks"] == ["IB", "Socket"] and transport["net"] == "Socket"
    assert not nccl.transport_verdict(transport, SPARK_HCAS)[0]


def test_ib_line_formats_rail_plane_and_older_nccl():
    """net_ib/init.cc appends ``:rail`` or ``::plane`` before the link layer; NCCL 2.7-era lines had no [RO]."""
    lines = ("h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1:3/IB [1]mlx5_1:1::2/RoCE ; OOB ib0:10.0.0.1<0>\n"
             "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
             "h:1:1 [0] NCCL WARN NET/IB : Got async event : port error\n")
    transport = nccl.nccl_transport(lines)
    assert [(d["name"], d["port"], d["link_layer"]) for d in transport["ib_devices"]] == \
        [("mlx5_0", 1, "IB"), ("mlx5_1", 1, "RoCE")]
    assert transport["relaxed_ordering"] is False and transport["net"] == "IB"
    assert transport["channels"][0]["conn"] is None and transport["transports"] == ["SHM"]
    assert transport["warnings"] == ["NET/IB : Got async event : port error"]


# ---- table layouts written from nccl-tests' printf formats

#: NVIDIA/nccl-tests src/common.cu at v2.13.9 (c6afef0b6f76ffc55d4172d971be6cf5a08a73a4), writeResultHeader:
#: "#wrong" in %6s then "%5s" on the units line, no version or "Collective test" lines, %g avg with no trailing text.
OLD_HEADER = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                 "busbw", "#wrong"))


def preamble(size: int, count: int, typ: str = "float", op: str = "sum", root: int = -1) -> str:
    """util.cu writeBenchmarkLinePreamble: "%12li  %12li  %8s  %6s  %6s" with the root as "%6i"."""
    return "%12li  %12li  %8s  %6s  %6s" % (size, count, typ, op, "%6i" % root)


def body(time_us: str, algbw: str, busbw: str, wrong: float | None) -> str:
    """util.cu writeBenchmarkLineBody: "  %7s  %6s  %6s  %6g", or "    N/A" without validation."""
    return "  %7s  %6s  %6s" % (time_us, algbw, busbw) + ("  %6g" % wrong if wrong is not None else "    N/A")


def test_older_header_and_wide_figures():
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0\n#\n" + OLD_HEADER
            + preamble(4294967296, 1073741824) + body("32336", "132.82", "232.44", 0)
            + body("1.2e+05", "132.34", "231.59", 3) + "\n"
            + "# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : 66.2058 \n#\n")
    table = nccl.parse_nccl_tests(text)
    assert table["program"] is None and table["nccl_tests_version"] is None
    assert table["config"]["ngpus"] == 8 and "unalign" not in table["config"]
    row = table["rows"][0]
    assert row["out_of_place"]["time_us"] == 32336.0 and row["in_place"]["time_us"] == 120000.0
    assert row["in_place"]["wrong"] == 3
    assert (table["out_of_bounds"], table["out_of_bounds_ok"], table["avg_busbw_gbs"]) == (3, False, 66.2058)
    assert table["concluded"] is False and table["warnings"] == []


def test_cputime_no_validation_timestamps_and_a_checked_average():
    """-C 1 names the column cputime; -c 0 prints N/A; -S 1 appends "%Y-%m-%d %H:%M:%S" (util.cu writeTimestamp);
    writeResultFooter prints OK/FAILED after the average when -a checks it."""
    header = OLD_HEADER.replace("   time", "cputime")
    text = ("#\n" + header + preamble(1 << 30, 1 << 28) + body("45800.8", "23.44", "23.44", None)
            + body("45884.3", "23.40", "23.40", None) + " 2026-11-28 02:39:01\n"
            + "# Avg bus bandwidth    : 23.42 OK\n")
    table = nccl.parse_nccl_tests(text)
    row = table["rows"][0]
    assert table["time_column"] == "cputime"
    assert row["out_of_place"]["wrong"] is None and row["in_place"]["busbw_gbs"] == 23.40
    assert row["timestamp"] == "2026-11-28 02:39:01"
    assert table["avg_busbw_check"] == "OK"


def test_per_iteration_columns():
    """-I 1 (2.19+): util.cu writePerIterReport adds "  %7s  %7s  %7s  %7s" (i_min i_max i_p99 i_cv%) per half."""
    header = ("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s"
              "  %7s  %7s %*s\n" % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                                    "i_min", "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min",
                                    "i_max", "i_p99", "i_cv%", 0, ""))
    per_iter = "  %7s  %7s  %7s  %7s" % ("3280.10", "3301.00", "3300.50", "0.21")
    text = ("#\n" + header + preamble(1 << 30, 1 << 28) + body("3289.13", "326.45", "326.45", 0) + per_iter
            + body("3290.27", "326.34", "326.34", 0) + per_iter + "\n")
    table = nccl.parse_nccl_tests(text)
    assert table["per_iteration"] is True
    half = table["rows"][0]["in_place"]
    assert half["busbw_gbs"] == 326.34 and half["i_p99_us"] == 3300.50 and half["i_cv_pct"] == 0.21


def test_row_cut_by_nccl_log_lines_is_put_back_together_and_in_place_only_rows():
    """NCCL connects lazily during the first collective and logs to the same stdout: a row can be cut after its
    preamble. Trace replay prints the in-place half only (util.cu writeBenchMarkLineNullBody)."""
    text = ("#\n" + OLD_HEADER
            + preamble(8388608, 2097152) + "spark-a:4021:4052 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] "
            "via NET/IB/0/GDRDMA\nspark-b:3877:3905 [0] NCCL WARN something\n"
            + body("387.20", "21.67", "21.67", 0) + body("388.46", "21.59", "21.59", 0) + "\n"
            + preamble(16777216, 4194304) + " " * 32 + body("744.42", "22.54", "22.54", 0) + "\n"
            + "# Avg bus bandwidth    : 21.9 \n")
    table = nccl.parse_nccl_tests(text)
    first, second = table["rows"]
    assert first["root"] == -1 and first["out_of_place"]["time_us"] == 387.20
    assert first["in_place"]["busbw_gbs"] == 21.59
    assert second["out_of_place"] is None and second["in_place"]["time_us"] == 744.42
    assert nccl.nccl_transport(text)["transports"] == ["NET/IB"]


@pytest.mark.parametrize("text", ["", "garbage\x00\n# size count\n", "     12  a  b\n",
                                  "#\n" + OLD_HEADER + "   8  2\n"])
def test_garbage_never_raises(text):
    table = nccl.parse_nccl_tests(text)
    assert table["rows"] == [] and table["warnings"]
    assert nccl.nccl_transport(text)["net"] is None


# ---- bus bandwidth


@pytest.mark.parametrize("collective, nranks, factor", [
    ("all_reduce", 2, 1.0), ("allreduce", 8, 1.75), ("all_reduce_perf", 4, 1.5),
    ("all_gather", 8, 0.875), ("reduce_scatter_perf", 2, 0.5), ("alltoall", 4, 0.75),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0), ("all_reduce", 1, 0.0),
])
def test_bus_factors_are_nccl_tests(collective, nranks, factor):
    assert nccl.bus_factor(collective, nranks) == pytest.approx(factor)
    assert nccl.bus_bandwidth(collective, 2e9, 0.5, nranks) == pytest.approx(4.0 * factor)


@pytest.mark.parametrize("args", [("gather", 1 << 20, 1.0, 2), ("all_reduce", 1 << 20, 1.0, 0),
                                  ("all_reduce", 1 << 20, 0.0, 2)])
def test_bus_bandwidth_refuses_what_it_cannot_compute(args):
    with pytest.raises(ValueError):
        nccl.bus_bandwidth(*args)


# ---- the stand-in, read by the product's parser


def standin(*args: str, name: Path = STANDIN, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKFLEET_FAKE", "NCCL_"))}
    environ.update(env)
    return subprocess.run([sys.executable, str(name), *args], capture_output=True, text=True, env=environ,
                          timeout=60, check=False)


def test_standin_pair_over_roce_reads_as_a_good_pair():
    run = standin("-b", "8M", "-e", "2G", "-f", "2", "-g", "1", NCCL_DEBUG="INFO")
    assert run.returncode == 0, run.stderr
    table = nccl.parse_nccl_tests(run.stdout)
    assert table["warnings"] == [] and table["concluded"]
    assert len(table["rows"]) == 9 and table["config"]["min_bytes"] == 8 << 20
    assert [d["host"] for d in table["devices"]] == ["spark-a", "spark-b"]
    assert nccl.large_message_busbw(table) == pytest.approx(23.5, rel=0.01)
    for row in table["rows"]:
        half = row["out_of_place"]
        assert nccl.bus_bandwidth("all_reduce", row["size_bytes"], half["time_us"] * 1e-6, 2) == \
            pytest.approx(half["busbw_gbs"], rel=4e-3)
    transport = nccl.nccl_transport(run.stdout)
    assert transport["version"] == "2.27.7+cuda13.0" and transport["hosts"] == ["spark-a", "spark-b"]
    assert nccl.transport_verdict(transport, SPARK_HCAS)[0]


def test_standin_knobs_socket_fallback_slow_link_one_hca_and_corruption():
    socket = standin("-b", "1G", "-e", "1G", NCCL_DEBUG="info", SPARKFLEET_FAKE_NCCL_NET="Socket")
    ok, reason = nccl.transport_verdict(nccl.nccl_transport(socket.stdout), SPARK_HCAS)
    assert not ok and "fell back to sockets" in reason
    assert nccl.large_message_busbw(nccl.parse_nccl_tests(socket.stdout)) == pytest.approx(2.5, rel=0.01)

    slow = standin("-b", "1G", "-e", "2G", "-f", "2", SPARKFLEET_FAKE_NCCL_BUSBW_GBS="12.5")
    assert nccl.large_message_busbw(nccl.parse_nccl_tests(slow.stdout)) == pytest.approx(12.5, rel=0.01)
    assert nccl.nccl_transport(slow.stdout)["info_lines"] == 0  # no NCCL_DEBUG: no log lines

    one = standin("-b", "8M", "-e", "8M", NCCL_DEBUG="INFO", SPARKFLEET_FAKE_NCCL_HCAS="rocep1s0f0",
                  SPARKFLEET_FAKE_NCCL_VERSION="2.28.9+cuda13.0")
    transport = nccl.nccl_transport(one.stdout)
    assert transport["version"] == "2.28.9+cuda13.0"
    assert "nccl-headers=22809" in one.stdout
    ok, reason = nccl.transport_verdict(transport, SPARK_HCAS)
    assert not ok and "roceP2p1s0f0 is not in NCCL's NET/IB device list" in reason

    bad = standin("-b", "8M", "-e", "16M", "-f", "2", SPARKFLEET_FAKE_NCCL_WRONG="2")
    table = nccl.parse_nccl_tests(bad.stdout)
    assert bad.returncode == 1 and table["out_of_bounds_ok"] is False
    assert table["rows"][0]["out_of_place"]["wrong"] == 2


def test_standin_as_all_gather_on_four_ranks(tmp_path):
    link = tmp_path / "all_gather_perf"
    link.symlink_to(STANDIN)
    run = standin("-b", "64M", "-e", "64M", "-c", "0", name=link, SPARKFLEET_FAKE_NCCL_NRANKS="4")
    table = nccl.parse_nccl_tests(run.stdout)
    assert table["program"] == "all_gather_perf"
    row = table["rows"][0]
    assert row["redop"] == "none" and row["count"] == (64 << 20) // 4 // 4 and row["out_of_place"]["wrong"] is None
    seconds = row["out_of_place"]["time_us"] * 1e-6
    assert nccl.bus_bandwidth(table["program"], row["size_bytes"], seconds, 4) == \
        pytest.approx(row["out_of_place"]["busbw_gbs"], rel=4e-3)
