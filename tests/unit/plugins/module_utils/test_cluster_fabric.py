"""cluster/fabric.py: rails read from a fake DGX Spark /sys (tests/fleet/fakesysfs.py), the environment sparkrun's
generate_nccl_env() would derive, and the pair preflight's verdicts."""

from __future__ import annotations

import json

import fakesysfs
import pytest
from _ansible_modules import host_util

fabric = host_util("fabric")


@pytest.fixture
def spark(tmp_path):
    return str(fakesysfs.build(tmp_path / "sys"))


def rails_of(tmp_path, rails, **kw):
    return fabric.read_fabric(str(fakesysfs.build(tmp_path / "sys", rails, **kw)))


def test_host_util_finds_the_nested_cluster_package():
    assert fabric.__name__.endswith("sparkfleet_host.cluster.fabric")
    assert host_util("cluster").__name__.endswith("sparkfleet_host.cluster")


def test_read_fabric_on_a_spark_cabled_on_the_inner_port(spark):
    rails = fabric.read_fabric(spark)
    assert [r["hca"] for r in rails] == ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]
    first = rails[0]
    assert set(first) == set(fabric.RAIL_KEYS)
    assert first == {"hca": "rocep1s0f0", "port": 1, "state": "ACTIVE", "state_code": 4, "active": True,
                     "phys_state": "LinkUp", "link_layer": "Ethernet", "rate": "100 Gb/sec (2X HDR)",
                     "netdev": "enp1s0f0np0", "roce_v2_gid_index": 3,
                     "roce_v2_gid": "0000:0000:0000:0000:0000:ffff:c0a8:c80c", "ipv4": "192.168.200.12",
                     "prefixlen": None, "ipv4_source": "gid", "mtu": 9000, "operstate": "up"}
    down = rails[1]
    assert (down["state"], down["active"], down["netdev"], down["roce_v2_gid_index"], down["ipv4"]) == \
        ("DOWN", False, "enp1s0f1np1", 1, None)  # no IPv4: the link-local RoCE v2 GID at 1


def test_ip_addr_gives_the_prefix(tmp_path):
    sysfs = str(fakesysfs.build(tmp_path / "sys"))
    for given in (fakesysfs.ip_addr_json(), json.loads(fakesysfs.ip_addr_json())):
        rails = fabric.read_fabric(sysfs, ip_addr=given)
        assert [(r["ipv4"], r["prefixlen"], r["ipv4_source"]) for r in rails if r["active"]] == [
            ("192.168.200.12", 24, "ip-addr"), ("192.168.201.12", 24, "ip-addr")]
    assert fabric.read_fabric(sysfs, ip_addr="not json")[0]["ipv4_source"] == "gid"


def test_no_infiniband_class_means_no_rails(tmp_path):
    assert fabric.read_fabric(str(tmp_path)) == []


def test_roce_v2_ipv4_gid_elsewhere_and_netdev_from_device_net(tmp_path):
    rails = rails_of(tmp_path, [{"hca": "mlx5_0", "netdev": "eth7", "active": True, "ipv4": "10.0.0.1/24",
                                 "no_ndevs": True}], roce_v2_index=5)
    (rail,) = rails
    assert (rail["roce_v2_gid_index"], rail["ipv4"], rail["netdev"]) == (5, "10.0.0.1", "eth7")


def test_sparkrun_environment_of_a_spark(spark):
    env = fabric.fabric_env(fabric.read_fabric(spark), bootstrap_ifname="enP7s7")
    assert env == {
        "NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_CROSS_NIC": "1",
        "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
        "MN_IF_NAME": "enP7s7", "OMPI_MCA_btl_tcp_if_include": "enP7s7", "GLOO_SOCKET_IFNAME": "enP7s7",
        "TP_SOCKET_IFNAME": "enP7s7", "NCCL_SOCKET_IFNAME": "enP7s7,enp1s0f0np0,enP2p1s0f0np0",
        "UCX_NET_DEVICES": "rocep1s0f0:1,roceP2p1s0f0:1", "NCCL_IB_GID_INDEX": "3"}


def test_environment_without_a_bootstrap_interface_uses_the_rails_netdevs(spark):
    env = fabric.fabric_env(fabric.read_fabric(spark), node_ip="10.0.0.10")
    for key in ("MN_IF_NAME", "OMPI_MCA_btl_tcp_if_include", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
                "NCCL_SOCKET_IFNAME"):
        assert env[key] == "enp1s0f0np0,enP2p1s0f0np0"
    assert env["NODE_IP"] == "10.0.0.10"


def test_ring_topology_overrides_and_no_gid_index(spark):
    env = fabric.fabric_env(fabric.read_fabric(spark), topology="ring")
    assert (env["NCCL_NET_PLUGIN"], env["NCCL_IB_SUBNET_AWARE_ROUTING"], env["NCCL_IB_MERGE_NICS"]) == \
        ("none", "1", "0")
    assert "NCCL_IB_GID_INDEX" not in env


def test_no_active_rail_no_environment_and_missing_gid_defaults_to_3(tmp_path):
    assert fabric.fabric_env([]) == {}
    assert fabric.fabric_env(fabric.given_rails([{"hca": "x", "active": False}])) == {}
    env = fabric.fabric_env(fabric.given_rails([{"hca": "rocep1s0f1", "netdev": "enp1s0f1np1"}]))
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["UCX_NET_DEVICES"] == "rocep1s0f1:1"


def test_given_rails_take_an_address_with_prefix():
    (rail,) = fabric.given_rails([{"hca": "rocep1s0f1", "netdev": "enp1s0f1np1", "ipv4": "192.168.177.11/24",
                                   "mtu": 9000, "roce_v2_gid_index": 3}])
    assert (rail["ipv4"], rail["prefixlen"], rail["ipv4_source"], rail["state"], rail["port"]) == \
        ("192.168.177.11", 24, "given", "ACTIVE", 1)


def test_ray_non_carry_over_lists_per_host_keys():
    head = {"NCCL_IB_HCA": "a,b", "GLOO_SOCKET_IFNAME": "enP7s7", "ONLY_HEAD": "1"}
    worker = {"NCCL_IB_HCA": "a,b", "GLOO_SOCKET_IFNAME": "wlP9s9"}
    assert fabric.ray_non_carry_over({"head": head, "worker": worker}) == ["GLOO_SOCKET_IFNAME", "ONLY_HEAD"]
    assert fabric.ray_non_carry_over({"head": head, "worker": dict(head)}) == []
    assert fabric.ray_non_carry_over({"head": head}) == []


# --------------------------------------------------------------------------- verdicts


def test_floors_have_value_unit_and_source():
    assert {k: v[:2] for k, v in fabric.FLOORS.items()} == {
        "active_twins": (2, "rails"), "mtu": (9000, "bytes"), "ib_write_bw_per_twin_gbps": (85.0, "Gb/s"),
        "ib_write_bw_sum_gbps": (170.0, "Gb/s"), "ib_write_lat_typical_us": (3.0, "us")}
    assert all(len(v[2]) > 40 for v in fabric.FLOORS.values())


def test_both_twins_active(spark):
    rails = fabric.read_fabric(spark)
    assert fabric.check_active(rails) == (True, "ACTIVE: rocep1s0f0, roceP2p1s0f0")
    ok, reason = fabric.check_active(rails, hcas=["rocep1s0f1", "roceP2p1s0f1"])
    assert not ok and reason == "not ACTIVE: rocep1s0f1 (DOWN), roceP2p1s0f1 (DOWN)"
    ok, reason = fabric.check_active(rails[:1])
    assert not ok and reason == "1 ACTIVE rail(s) (rocep1s0f0), need 2"


def test_mtu_floor(tmp_path):
    rails = [dict(r, mtu=1500) if r["hca"] == "roceP2p1s0f0" else r for r in fakesysfs.SPARK_RAILS]
    ok, reason = fabric.check_mtu(rails_of(tmp_path, rails))
    assert not ok and reason == "MTU below 9000: enP2p1s0f0np0 1500"
    assert fabric.check_mtu(fabric.read_fabric(str(tmp_path / "sys")), floor=1500)[0] is True
    assert fabric.check_mtu([]) == (False, "no ACTIVE rail")


def test_distinct_subnets(tmp_path):
    sysfs = str(fakesysfs.build(tmp_path / "sys"))
    assert fabric.check_subnets(fabric.read_fabric(sysfs)) == \
        (False, "enp1s0f0np0: no IPv4 address with a prefix known")
    ok, reason = fabric.check_subnets(fabric.read_fabric(sysfs, fakesysfs.ip_addr_json()))
    assert ok and reason == "distinct subnets: enp1s0f0np0 192.168.200.0/24, enP2p1s0f0np0 192.168.201.0/24"
    same = fabric.given_rails([{"hca": "a", "netdev": "enp1s0f1np1", "ipv4": "192.168.100.10/24"},
                               {"hca": "b", "netdev": "enP2p1s0f1np1", "ipv4": "192.168.100.11/16"}])
    ok, reason = fabric.check_subnets(same)
    assert not ok and "share a subnet" in reason and "enP2p1s0f1np1 (192.168.0.0/16)" in reason


@pytest.mark.parametrize("figures, ok, reason", [
    ({"rocep1s0f0": 92.57, "roceP2p1s0f0": 97.28}, True,
     "ib_write_bw rocep1s0f0 92.57, roceP2p1s0f0 97.28; sum 189.85 Gb/s"),
    ({"rocep1s0f0": 80.0, "roceP2p1s0f0": 97.28}, False, "ib_write_bw below 85.00 Gb/s per twin: rocep1s0f0 80.00"),
    ({"rocep1s0f0": 86.0, "roceP2p1s0f0": 86.0}, False,
     "ib_write_bw sum 172.00 Gb/s below 180.00 (rocep1s0f0 86.00, roceP2p1s0f0 86.00)"),
    ({"rocep1s0f0": None, "roceP2p1s0f0": 97.0}, False, "ib_write_bw not measured on rocep1s0f0"),
    ({}, False, "no ib_write_bw result"),
])
def test_bandwidth_floors(figures, ok, reason):
    sum_floor = 180.0 if reason.startswith("ib_write_bw sum") else None
    assert fabric.check_bandwidth(figures, sum_floor=sum_floor) == (ok, reason)


def test_latency_ceiling():
    assert fabric.check_latency(1.47) == (True, "ib_write_lat typical 1.47 us")
    assert fabric.check_latency(3.5) == (False, "ib_write_lat typical 3.50 us above 3.00")
    assert fabric.check_latency(3.5, ceiling=4) == (True, "ib_write_lat typical 3.50 us")
    assert fabric.check_latency(None) == (False, "ib_write_lat not measured")


def test_parity_names_the_key_and_both_values():
    a = {"driver": "580.95.05", "kernel": "6.11.0-1016-nvidia", "nccl": "2.28.3", "image": "sha256:aa",
         "env": {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "GLOO_SOCKET_IFNAME": "enP7s7"}}
    b = dict(a, driver="580.82.09", env={"NCCL_IB_HCA": "rocep1s0f0", "GLOO_SOCKET_IFNAME": "wlP9s9"})
    ok, reason = fabric.check_parity({"spark1": a, "spark2": b}, ignore=["env.GLOO_SOCKET_IFNAME"])
    assert not ok
    assert reason == ("differ: driver: spark1='580.95.05', spark2='580.82.09'; "
                      "env.NCCL_IB_HCA: spark1='rocep1s0f0,roceP2p1s0f0', spark2='rocep1s0f0'")
    assert fabric.check_parity({"spark1": a, "spark2": dict(a)}) == (True, "6 fact(s) equal on spark1, spark2")
    ok, reason = fabric.check_parity({"spark1": a, "spark2": {k: v for k, v in a.items() if k != "nccl"}})
    # a fact a node could not read is named unread with what the others read, and refuses unless it may be unread
    assert not ok and reason == "unread: nccl on spark2 (spark1='2.28.3')"
    ok, reason = fabric.check_parity({"spark1": a, "spark2": dict(a, nccl=None)}, may_be_unread=["nccl"])
    assert ok and reason == "5 fact(s) equal on spark1, spark2; not read (not judged): nccl on spark2 (spark1='2.28.3')"
    assert fabric.check_parity({"spark1": a})[0] is False
