"""The RDMA parsers (parsers/rdma.py) on published runs (tests/fixtures/rdma/README.md) and on the formats of
the tools' sources."""

from __future__ import annotations

import pytest
from _ansible_modules import host_util
from _shared import own_fixture

rdma = host_util("rdma")


def fixture(name: str) -> str:
    return own_fixture(f"rdma/{name}").read_text()


# --------------------------------------------------------------------------- ib_write_bw


@pytest.mark.parametrize("name, device, local, remote, average, rows", [
    ("ib_write_bw-spark-playbook-client1-run-infinitely.txt", "rocep1s0f0", "192.168.200.13", "192.168.200.12",
     92.57, 5),
    ("ib_write_bw-spark-playbook-client2-run-infinitely.txt", "roceP2p1s0f0", "192.168.201.13", "192.168.201.12",
     97.28, 6),
])
def test_nvidia_two_spark_run_infinitely_clients(name, device, local, remote, average, rows):
    out = rdma.parse_ib_write_bw(fixture(name))
    assert out["ok"] is True and out["errors"] == []
    assert out["test"] == "RDMA_Write BW Test" and out["device"] == device
    assert (out["transport"], out["connection"], out["qps"]) == ("IB", "RC", 1)
    assert (out["link_type"], out["gid_index"], out["mtu_bytes"], out["rdma_cm"]) == ("Ethernet", 3, 1024, "OFF")
    assert (out["local_ipv4"], out["remote_ipv4"]) == (local, remote)
    assert out["unit"] == "Gb/sec" and len(out["rows"]) == rows and out["bytes"] == 65536
    assert out["bw_average_gbps"] == average
    assert out["peak_measured"] is False and out["bw_peak_gbps"] is None  # --run_infinitely prints 0.00
    assert out["warnings"] == [f"{rows} result rows; using the last one"]


def test_the_two_twins_sum_as_nvidia_summed_them():
    total = sum(rdma.parse_ib_write_bw(fixture(f"ib_write_bw-spark-playbook-client{n}-run-infinitely.txt"))
                ["bw_average_gbps"] for n in (1, 2))
    assert round(total, 2) == 189.85  # "Total throughput = 92.57 + 97.28 = 189.85 Gbps"


def test_eugr_four_qps_rdma_cm_run():
    out = rdma.parse_ib_write_bw(fixture("ib_write_bw-eugr-spark-q4-rdma-cm.txt"))
    assert out["ok"] and out["qps"] == 4 and out["rdma_cm"] == "ON" and out["link_type"] == "IB"
    assert out["gid_index"] is None and out["local_gid"] is None  # rdma_cm prints no GID lines
    assert (out["iterations"], out["bw_peak_gbps"], out["bw_average_gbps"], out["msg_rate_mpps"]) == \
        (20000, 111.72, 111.71, 0.21307)
    assert out["rows"] == [{"bytes": 65536, "iterations": 20000, "bw_peak": 111.72, "bw_average": 111.71,
                            "msg_rate_mpps": 0.21307}]


# perftest's formats, built from the macros of src/perftest_parameters.h (@00b55b66) by hand.
HEAD_MIB = (" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
            " 65536      5000             11000.00            10000.00\t\t     0.160000\n")


def test_mib_per_second_table_is_converted_to_gbps():
    out = rdma.parse_ib_write_bw(HEAD_MIB)
    assert out["unit"] == "MiB/sec" and out["rows"][0]["bw_average"] == 10000.0
    assert out["bw_average_gbps"] == 83.89  # 10000 * 2**20 * 8 / 1e9 = 83.886
    assert out["bw_peak_gbps"] == 92.27


def test_pre_2024_mb_per_second_header():
    out = rdma.parse_ib_write_bw(HEAD_MIB.replace("MiB/sec", "MB/sec"))
    assert out["unit"] == "MB/sec" and out["bw_average_gbps"] == 83.89


def test_report_fmt_ext_six_decimals_below_a_tenth_of_a_gbit():
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            " 2       5000           0.052000            0.048000            3.000000\n")
    assert rdma.parse_ib_write_bw(text)["bw_average_gbps"] == 0.05


def test_cpu_util_column_is_accepted():
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]    CPU_Util[%]\n"
            " 65536      5000             95.10              95.00\t\t     0.181198\t    12.50\n")
    assert rdma.parse_ib_write_bw(text)["bw_average_gbps"] == 95.0


@pytest.mark.parametrize("stderr", [
    "Couldn't connect to 192.168.200.12:12000\nUnable to open file descriptor for socket connection\n"
    " Unable to init the socket connection\n",
    "IB device rocep9s0f0 not found\n Unable to find the Infiniband/RoCE device\n",
    "\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n\n",
    " Invalid Command or flag.\n",
])
def test_errors_are_reported_and_not_ok(stderr):
    out = rdma.parse_ib_write_bw(stderr)
    assert out["ok"] is False and out["errors"] and out["rows"] == [] and out["bw_average_gbps"] is None


def test_error_after_a_table_still_fails():
    text = fixture("ib_write_bw-eugr-spark-q4-rdma-cm.txt") + " Failed to exchange data between server and clients\n"
    out = rdma.parse_ib_write_bw(text)
    assert out["ok"] is False and out["bw_average_gbps"] == 111.71
    assert out["errors"] == ["Failed to exchange data between server and clients"]


def test_waiting_server_has_no_result_and_says_so():
    out = rdma.parse_ib_write_bw("\n************************************\n* Waiting for client to connect... *\n"
                                 "************************************\n")
    assert out["ok"] is False and out["errors"] == [] and "no result row" in out["warnings"][0]


@pytest.mark.parametrize("text", ["", "garbage\n\x00\x01", " #bytes     #iterations    BW peak[Gb/sec]    BW aver"])
def test_garbage_never_raises(text):
    assert rdma.parse_ib_write_bw(text)["ok"] is False
    assert rdma.parse_ib_write_lat(text)["ok"] is False
    assert rdma.parse_ibdev2netdev(text) == [] and rdma.parse_ibv_devinfo(text) == []


@pytest.mark.parametrize("gid, ipv4", [
    ("00:00:00:00:00:00:00:00:00:00:255:255:192:168:200:13", "192.168.200.13"),
    ("0000:0000:0000:0000:0000:ffff:c0a8:c80c", "192.168.200.12"),
    ("fe80:0000:0000:0000:4ebb:47ff:fe2d:1a16", None),
    ("00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00", None),
    ("", None), ("1:2:3", None), ("zz:00", None),
])
def test_gid_ipv4(gid, ipv4):
    assert rdma.gid_ipv4(gid) == ipv4


# --------------------------------------------------------------------------- ib_write_lat


def test_eugr_latency_run():
    out = rdma.parse_ib_write_lat(fixture("ib_write_lat-eugr-spark-rdma-cm.txt"))
    assert out["ok"] and out["test"] == "RDMA_Write Latency Test" and out["device"] == "rocep1s0f1"
    assert (out["bytes"], out["iterations"]) == (2, 1000)
    assert (out["t_min_us"], out["t_max_us"], out["t_typical_us"], out["t_avg_us"], out["t_stdev_us"],
            out["p99_us"], out["p99_9_us"]) == (1.42, 1.93, 1.47, 1.47, 0.0, 1.57, 1.93)
    assert out["duration_mode"] is False and out["tps_average"] is None


def test_latency_duration_table():
    text = (" #bytes        #iterations       t_avg[usec]    tps average\n"
            " 2             3401360            1.47           340136.05\n")
    out = rdma.parse_ib_write_lat(text)
    assert out["ok"] and out["duration_mode"] and out["t_avg_us"] == 1.47 and out["tps_average"] == 340136.05
    assert out["t_typical_us"] is None


# --------------------------------------------------------------------------- ibdev2netdev


def test_ibdev2netdev_nvidia_inner_port_cabled():
    out = rdma.parse_ibdev2netdev(fixture("ibdev2netdev-spark-playbook-port0.txt"))
    assert [(r["hca"], r["port"], r["netdev"], r["state"], r["up"]) for r in out] == [
        ("rocep1s0f0", 1, "enp1s0f0np0", "Up", True), ("rocep1s0f1", 1, "enp1s0f1np1", "Down", False),
        ("roceP2p1s0f0", 1, "enP2p1s0f0np0", "Up", True), ("roceP2p1s0f1", 1, "enP2p1s0f1np1", "Down", False)]


def test_ibdev2netdev_eugr_outer_port_cabled():
    up = [r["hca"] for r in rdma.parse_ibdev2netdev(fixture("ibdev2netdev-eugr-spark-port1.txt")) if r["up"]]
    assert up == ["rocep1s0f1", "roceP2p1s0f1"]


def test_ibdev2netdev_padded_verbose_and_old_styles():
    padded = "rocep1s0f0   port 1 ==> enp1s0f0np0   (Up)\nroceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)\n"
    assert [(r["hca"], r["netdev"], r["up"]) for r in rdma.parse_ibdev2netdev(padded)] == [
        ("rocep1s0f0", "enp1s0f0np0", True), ("roceP2p1s0f1", "enP2p1s0f1np1", False)]
    verbose = ("0000:01:00.0 mlx5_0 (MT4129 - NVD0000000087) NVIDIA DGX Spark fw 28.45.4028 port 1 (ACTIVE) ==> "
               "enp1s0f0np0 (Up)\n")
    (row,) = rdma.parse_ibdev2netdev(verbose)
    assert (row["pci"], row["hca"], row["fw"], row["port_state"], row["netdev"], row["up"]) == \
        ("0000:01:00.0", "mlx5_0", "28.45.4028", "ACTIVE", "enp1s0f0np0", True)
    (old,) = rdma.parse_ibdev2netdev("mlx4_0 port 1 <===> ib0\n")
    assert (old["hca"], old["netdev"], old["state"], old["up"]) == ("mlx4_0", "ib0", None, False)


# --------------------------------------------------------------------------- ibv_devinfo


def test_ibv_devinfo_spark_one_cable():
    out = rdma.parse_ibv_devinfo(fixture("ibv_devinfo-spark-one-cable.txt"))
    assert [h["hca"] for h in out] == ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]
    assert {h["fw_ver"] for h in out} == {"28.45.4028"} and out[0]["vendor_part_id"] == "4129"
    assert out[0]["board_id"] == "NVD0000000087" and out[0]["phys_port_cnt"] == 1
    ports = [(h["hca"], p["state"], p["state_code"], p["active"], p["active_mtu"], p["link_layer"])
             for h in out for p in h["ports"]]
    assert ports == [("rocep1s0f0", "PORT_DOWN", 1, False, 1024, "Ethernet"),
                     ("rocep1s0f1", "PORT_ACTIVE", 4, True, 4096, "Ethernet"),
                     ("roceP2p1s0f0", "PORT_DOWN", 1, False, 1024, "Ethernet"),
                     ("roceP2p1s0f1", "PORT_ACTIVE", 4, True, 4096, "Ethernet")]


def test_ibv_devinfo_ofed_device_ports_line_and_two_ports():
    out = rdma.parse_ibv_devinfo(fixture("ibv_devinfo-mlx4-ofed-two-hcas.txt"))
    assert [(h["hca"], [(p["port"], p["active"], p["port_lid"]) for p in h["ports"]]) for h in out] == [
        ("mlx4_1", [(1, True, 22), (2, False, 0)]), ("mlx4_0", [(1, True, 32), (2, False, 0)])]
    assert out[0]["transport"] == "InfiniBand (0)" and out[0]["ports"][0]["link_layer"] == "InfiniBand"


def test_ibv_devinfo_verbose_keeps_port_keys_and_gids():
    (hca,) = rdma.parse_ibv_devinfo(fixture("ibv_devinfo-mlx4-ofed-verbose-port2.txt"))
    (port,) = hca["ports"]
    assert (port["port"], port["state"], port["max_mtu"]) == (2, "PORT_DOWN", 4096)
    assert port["gids"] == {0: "fe80:0000:0000:0000:7cfe:9003:00a5:95c2"}
    assert hca["fw_ver"] == "2.42.5000" and hca["phys_port_cnt"] == 2
