"""The NCCL that torch.distributed's "nccl" backend loads, as far as the NCCL test sees it: which network a
communicator takes, the ``NCCL_DEBUG`` lines it prints when it is created, and how long an all-reduce lasts.

Lines in NCCL's own formats, as the nccl-tests stand-in (tests/fleet/standins/all_reduce_perf) writes them, from
NVIDIA/nccl at 5067397c2676d5aed50042fc39e5c8ee96eb0027: the ``host:pid:tid [dev] NCCL INFO|WARN`` prefix of
src/debug.cc (the host name cut at its first dot); ``NCCL version`` of src/init.cc; ``NET/IB : Using
[0]dev:port/RoCE ... [RO]; OOB if:addr<0>`` and ``NET/IB : No device found.`` of src/transport/net_ib/init.cc;
``NET/Socket : Using [0]if:addr<0>`` of src/transport/net_socket.cc; ``Initialized NET plugin`` / ``Failed to
initialize NET plugin`` / ``Assigned NET plugin`` of src/plugin/net.cc; ``Using network X`` of src/init.cc; the
``Channel cc/0 : a[d] -> b[d] [send|receive] via NET/<net>/<dev>[/GDRDMA]`` connections of src/transport/net.cc.
Their order is that of a real capture of PyTorch with NCCL_DEBUG=INFO (tests/fixtures/nccl/
torch-allreduce-h200x2-socket-nccl-debug.log) and of the composed Spark pair log (nccl-info-spark-pair-roce.log).

The network (src/plugin/net.cc's choice): NET/IB where RDMA is usable, else NET/Socket; NCCL_NET names one
(case-insensitive) and NCCL fails with "Error: network <name> not found." (ncclInvalidUsage) when it is not usable,
rather than falling back. RDMA is usable where /dev/infiniband (SPARKFLEET_FAKE_DEV_INFINIBAND) holds a ``uverbs*``
device, NCCL_IB_DISABLE is not 1, and an HCA is left once NCCL_IB_HCA filtered the found ones as net_ib's
ncclIbInit does (src/misc/utils.cc parseStringList/matchIfList): a leading ``^`` excludes, a leading ``=`` matches
names exactly (else by prefix), ``name:port`` keeps that port only (every HCA here has port 1).

Time of one all-reduce of S bytes over n ranks: latency + 2(n-1)/n x S / busbw (a ring's reduce-scatter and
all-gather; nccl-tests doc/PERFORMANCE.md), this file's own arithmetic.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

DEFAULT_VERSION = "2.27.7+cuda13.0"
DEFAULT_HCAS = "rocep1s0f0,roceP2p1s0f0"
DEFAULT_BUSBW_GBS = {"IB": 23.5, "Socket": 2.5}


def version() -> str:
    return os.environ.get("SPARKFLEET_FAKE_NCCL_VERSION", "").strip() or DEFAULT_VERSION


def version_tuple() -> tuple:
    """torch.cuda.nccl.version(): (major, minor, patch) of "2.27.7+cuda13.0" (a release has no NCCL_SUFFIX)."""
    numbers = (version().split("+")[0].split(".") + ["0", "0"])[:3]
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in numbers)


def debug_level() -> str:
    return os.environ.get("NCCL_DEBUG", "").upper()


def _rdma_device_present() -> bool:
    directory = os.environ.get("SPARKFLEET_FAKE_DEV_INFINIBAND") or "/dev/infiniband"
    try:
        return any(entry.startswith("uverbs") for entry in os.listdir(directory))
    except OSError:
        return False


def _hca_filter(text: str):
    """(exclude, exact, [(name, port or None)]) of an NCCL_IB_HCA value."""
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, port = item.partition(":")
        entries.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, entries


def ib_devices(env=os.environ) -> list:
    """The HCAs NET/IB lists (each on port 1): those found, filtered by NCCL_IB_HCA."""
    exclude, exact, entries = _hca_filter(env.get("NCCL_IB_HCA", "").strip())
    found = env.get("SPARKFLEET_FAKE_NCCL_HCAS")
    if found is None:  # the fake machine has what the fabric names (NCCL_IB_HCA came from its RDMA check)
        found = ",".join(name for name, _ in entries) if entries and not exclude else DEFAULT_HCAS
    hcas = [h.strip() for h in found.split(",") if h.strip()]
    if not entries:
        return hcas

    def listed(hca: str) -> bool:
        return any((hca == name if exact else hca.startswith(name)) and port in (None, 1) for name, port in entries)

    return [h for h in hcas if listed(h) != exclude]


def _ipv4_of(ifname: str) -> str | None:
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # SIOCGIFADDR, as NCCL reads it
            raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        return socket.inet_ntoa(raw[20:24])
    except (OSError, ImportError):
        return None


def oob(fallback_addr: str) -> str:
    """``if:addr<0>``: NCCL_SOCKET_IFNAME's first interface (eth0 without it) and its IPv4 address, else the
    address this rank's rendezvous socket uses."""
    names = os.environ.get("NCCL_SOCKET_IFNAME", "").strip()
    first = names.lstrip("^=").split(",")[0].strip() if names and not names.startswith("^") else ""
    ifname = first or "eth0"
    return f"{ifname}:{_ipv4_of(ifname) or fallback_addr or '127.0.0.1'}<0>"


class Communicator:
    """One rank's NCCL communicator: its network, what it prints when created or destroyed, its all-reduce time."""

    def __init__(self, rank: int, world: int, local_addr: str) -> None:
        self.rank, self.world = rank, world
        self.hcas = ib_devices() if _rdma_device_present() and os.environ.get("NCCL_IB_DISABLE", "0") != "1" else []
        self.oob = oob(local_addr)
        wanted = os.environ.get("NCCL_NET", "").strip()
        usable = ["IB"] if self.hcas else []
        usable.append("Socket")
        chosen = [n for n in usable if not wanted or n.lower() == wanted.lower()]
        self.net = chosen[0] if chosen else None
        self.error = None if self.net else f"Error: network {wanted} not found."
        self.handle = 0x55D0C8E3F0A0 + 0x1000 * rank

    def _prefix(self, level: str) -> str:
        host = socket.gethostname().split(".")[0]
        return f"{host}:{os.getpid()}:{threading.get_native_id()} [0] NCCL {level} "

    def _say(self, lines) -> None:
        level = debug_level()
        shown = [(lvl, text) for lvl, text in lines
                 if level in ("INFO", "TRACE") or (lvl == "WARN" and level == "WARN")]
        if shown:
            sys.stdout.write("".join(self._prefix(lvl) + text + "\n" for lvl, text in shown))
            sys.stdout.flush()

    def init_lines(self) -> list:
        info = []
        add = lambda text, level="INFO": info.append((level, text))  # noqa: E731
        me = f"comm 0x{self.handle:x} rank {self.rank} nranks {self.world} cudaDev 0 nvmlDev 0 busId 1000"
        add(f"Bootstrap: Using {self.oob}")
        add(f"NCCL version {version()}")
        add("NET/Plugin: Could not find: libnccl-net.so")
        if self.hcas:
            link = os.environ.get("SPARKFLEET_FAKE_NCCL_LINK_LAYER", "RoCE")
            devices = "".join(f" [{i}]{name}:1/{link}" for i, name in enumerate(self.hcas))
            add(f"NET/IB : Using{devices} [RO]; OOB {self.oob}")
            add("Initialized NET plugin IB")
        else:
            if os.environ.get("NCCL_IB_DISABLE", "0") != "1":
                add("NET/IB : No device found.")
                add(f"NET/IB : Using [RO]; OOB {self.oob}")
            add("Failed to initialize NET plugin IB")
        if not self.hcas or self.net == "Socket":
            add(f"NET/Socket : Using [0]{self.oob}")
            add("Initialized NET plugin Socket")
        if self.error:
            add(self.error, "WARN")
            return info
        add(f"Assigned NET plugin {self.net} to comm")
        add(f"Using network {self.net}")
        add(f"ncclCommInitRankConfig {me} - Init START")
        add(f"comm 0x{self.handle:x} rank {self.rank} nRanks {self.world} nNodes {self.world} localRanks 1 "
            "localRank 0 MNNVL 0")
        channels = max(2, len(self.hcas)) if self.net == "IB" else 2
        if self.rank == 0:
            ring = " ".join(str(r) for r in range(self.world))
            info.extend(("INFO", f"Channel {c:02d}/{channels:02d} : {ring}") for c in range(channels))
        add(f"ncclCommInitRankConfig {me} - Init COMPLETE")
        if self.world > 1:
            prev, nxt = (self.rank - 1) % self.world, (self.rank + 1) % self.world
            for direction, src, dst in (("receive", prev, self.rank), ("send", self.rank, nxt)):
                for c in range(channels):
                    via = f"NET/IB/{c % len(self.hcas)}/GDRDMA" if self.net == "IB" else "NET/Socket/0"
                    add(f"Channel {c:02d}/0 : {src}[0] -> {dst}[0] [{direction}] via {via}")
            add(f"Connected all rings, use ring PXN 0 GDR {int(self.net == 'IB')}")
        return info

    def announce(self) -> None:
        """Print the creation's lines (the caller raises when ``error``: NCCL refused the network)."""
        self._say(self.init_lines())

    def destroyed(self) -> None:
        self._say([("INFO", f"comm 0x{self.handle:x} rank {self.rank} nranks {self.world} cudaDev 0 busId 1000 - "
                            "Destroy COMPLETE")])

    def all_reduce_seconds(self, nbytes: int) -> float:
        busbw = float(os.environ.get("SPARKFLEET_FAKE_NCCL_BUSBW_GBS") or DEFAULT_BUSBW_GBS[self.net])
        traffic = 2.0 * (self.world - 1) / self.world * nbytes
        return latency_seconds() + traffic / (busbw * 1e9)


def latency_seconds() -> float:
    """The fixed cost of one collective (a barrier's whole time)."""
    return float(os.environ.get("SPARKFLEET_FAKE_NCCL_LATENCY_US") or 30) * 1e-6


def corrupts() -> bool:
    return os.environ.get("SPARKFLEET_FAKE_NCCL_WRONG", "").strip() not in ("", "0")
