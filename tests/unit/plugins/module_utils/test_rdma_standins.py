"""The RDMA stand-ins (tests/fleet/standins/ib_write_bw, ib_write_lat, ibdev2netdev, ibv_devinfo) print what the
product's parsers (parsers/rdma.py) read, and the figures their environment sets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from _ansible_modules import STANDINS, host_util

rdma = host_util("rdma")
fabric = host_util("fabric")
BW_FLAGS = ["-d", "rocep1s0f0", "-i", "1", "-F", "--report_gbits", "-x", "3"]


def run(tool: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
    return subprocess.run([sys.executable, str(STANDINS / tool), *args], capture_output=True, text=True,
                          timeout=30, env={**clean, **env})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_peerless_client_bandwidth_per_twin():
    for hca, gbps in (("rocep1s0f0", "92.57"), ("roceP2p1s0f0", "97.28")):
        proc = run("ib_write_bw", "-d", hca, "-i", "1", "-p", "12000", "-F", "--report_gbits", "-q", "1",
                   SPARKFLEET_FAKE_RDMA_PEERLESS="1",
                   SPARKFLEET_FAKE_RDMA_GBPS="rocep1s0f0=92.57,roceP2p1s0f0=97.28")
        out = rdma.parse_ib_write_bw(proc.stdout)
        assert proc.returncode == 0 and out["ok"], proc.stderr
        assert (out["device"], out["bw_average_gbps"], out["unit"]) == (hca, float(gbps), "Gb/sec")
        assert (out["link_type"], out["gid_index"], out["mtu_bytes"], out["qps"]) == ("Ethernet", 3, 4096, 1)
        assert out["peak_measured"] and out["bw_peak_gbps"] is not None


def test_mib_table_and_mtu_1500():
    proc = run("ib_write_bw", "-d", "rocep1s0f0", "-F", SPARKFLEET_FAKE_RDMA_PEERLESS="1",
               SPARKFLEET_FAKE_RDMA_MIBPS="11000.5", SPARKFLEET_FAKE_RDMA_MTU="1500")
    out = rdma.parse_ib_write_bw(proc.stdout)
    assert out["unit"] == "MiB/sec" and out["rows"][-1]["bw_average"] == 11000.5 and out["mtu_bytes"] == 1024


def test_server_and_client_over_tcp():
    port = str(free_port())
    server = subprocess.Popen([sys.executable, str(STANDINS / "ib_write_bw"), *BW_FLAGS, "-p", port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "SPARKFLEET_FAKE_RDMA_IP": "192.168.200.12",
                                   "SPARKFLEET_FAKE_RDMA_WAIT_S": "20"})
    try:
        for _ in range(100):
            client = run("ib_write_bw", *BW_FLAGS, "-p", port, "127.0.0.1", SPARKFLEET_FAKE_RDMA_GBPS="88.8")
            if client.returncode == 0:
                break
            time.sleep(0.1)
        served, _ = server.communicate(timeout=20)
    finally:
        server.kill()
    mine, theirs = rdma.parse_ib_write_bw(client.stdout), rdma.parse_ib_write_bw(served)
    assert mine["ok"] and theirs["ok"] and server.returncode == 0
    assert (mine["local_ipv4"], mine["remote_ipv4"]) == ("192.168.200.13", "192.168.200.12")
    assert (theirs["local_ipv4"], theirs["remote_ipv4"]) == ("192.168.200.12", "192.168.200.13")
    assert mine["bw_average_gbps"] == theirs["bw_average_gbps"] == 88.8  # the server prints the client's result
    assert "Waiting for client to connect" in served


def test_client_without_a_server_fails_like_perftest():
    port = free_port()
    proc = run("ib_write_bw", *BW_FLAGS, "-p", str(port), "127.0.0.1")
    out = rdma.parse_ib_write_bw(proc.stdout + proc.stderr)
    assert proc.returncode == 1 and not out["ok"]
    assert out["errors"][0] == f"Couldn't connect to 127.0.0.1:{port}"


def test_server_gives_up_after_the_wait():
    proc = run("ib_write_bw", *BW_FLAGS, "-p", str(free_port()), SPARKFLEET_FAKE_RDMA_WAIT_S="0.2")
    assert proc.returncode == 1 and "Unable to init the socket connection" in proc.stderr


@pytest.mark.parametrize("args, error", [
    (["-d", "mlx5_9"], "IB device mlx5_9 not found"), (["--bogus"], "Invalid Command or flag."),
])
def test_bad_device_or_flag(args, error):
    proc = run("ib_write_bw", *args, SPARKFLEET_FAKE_RDMA_PEERLESS="1")
    assert proc.returncode == 1 and rdma.parse_ib_write_bw(proc.stderr)["errors"][0] == error


def test_run_infinitely_rows():
    proc = run("ib_write_bw", *BW_FLAGS, "--run_infinitely", SPARKFLEET_FAKE_RDMA_PEERLESS="1",
               SPARKFLEET_FAKE_RDMA_PERIOD_S="0", SPARKFLEET_FAKE_RDMA_ROWS="3", SPARKFLEET_FAKE_RDMA_GBPS="93.1")
    out = rdma.parse_ib_write_bw(proc.stdout)
    assert len(out["rows"]) == 3 and out["bw_average_gbps"] == 93.1 and out["bw_peak_gbps"] is None


def test_latency_peerless_and_duration():
    out = rdma.parse_ib_write_lat(run("ib_write_lat", "-d", "roceP2p1s0f0", "-F", SPARKFLEET_FAKE_RDMA_PEERLESS="1",
                                      SPARKFLEET_FAKE_RDMA_LAT_US="2.75").stdout)
    assert out["ok"] and out["t_typical_us"] == 2.75 and out["device"] == "roceP2p1s0f0"
    assert fabric.check_latency(out["t_typical_us"])[0] is True
    out = rdma.parse_ib_write_lat(run("ib_write_lat", "-D", "2", SPARKFLEET_FAKE_RDMA_PEERLESS="1").stdout)
    assert out["ok"] and out["duration_mode"] and out["t_avg_us"] == 1.47


def test_ibdev2netdev_states_follow_the_environment():
    rows = rdma.parse_ibdev2netdev(run("ibdev2netdev").stdout)
    assert [(r["hca"], r["netdev"], r["up"]) for r in rows] == [
        ("rocep1s0f0", "enp1s0f0np0", True), ("rocep1s0f1", "enp1s0f1np1", False),
        ("roceP2p1s0f0", "enP2p1s0f0np0", True), ("roceP2p1s0f1", "enP2p1s0f1np1", False)]
    rows = rdma.parse_ibdev2netdev(run("ibdev2netdev", "-v", SPARKFLEET_FAKE_RDMA_STATE="DOWN").stdout)
    assert [r["up"] for r in rows] == [False] * 4 and rows[0]["port_state"] == "DOWN"
    assert run("ibdev2netdev", "-x").returncode != 0


def test_ibv_devinfo_states_mtu_and_errors():
    hcas = rdma.parse_ibv_devinfo(run("ibv_devinfo", SPARKFLEET_FAKE_RDMA_STATE="rocep1s0f0=DOWN,rocep1s0f1=ACTIVE",
                                      SPARKFLEET_FAKE_RDMA_MTU="1500").stdout)
    assert [(h["hca"], h["ports"][0]["state"], h["ports"][0]["active_mtu"]) for h in hcas] == [
        ("rocep1s0f0", "PORT_DOWN", 1024), ("rocep1s0f1", "PORT_ACTIVE", 1024),
        ("roceP2p1s0f0", "PORT_ACTIVE", 1024), ("roceP2p1s0f1", "PORT_DOWN", 1024)]  # unnamed: the default
    (one,) = rdma.parse_ibv_devinfo(run("ibv_devinfo", "-d", "roceP2p1s0f0", "-v",
                                        SPARKFLEET_FAKE_RDMA_FW="28.1").stdout)
    assert one["fw_ver"] == "28.1" and one["ports"][0]["active_mtu"] == 4096
    assert rdma.gid_ipv4(one["ports"][0]["gids"][3]) == "192.168.201.13"
    missing = run("ibv_devinfo", "-d", "nope")
    assert missing.returncode == 255 and missing.stderr == "IB device 'nope' wasn't found\n"
    assert run("ibv_devinfo", SPARKFLEET_FAKE_RDMA_HCAS="").stderr == "No IB devices found\n"
