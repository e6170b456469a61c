"""The RDMA stand-ins' shared code (stdlib only): a DGX Spark's four CX-7 RDMA devices, perftest's
``ib_write_bw`` / ``ib_write_lat`` over a real TCP connection between server and client, ``ibdev2netdev`` and
``ibv_devinfo``. The scripts beside it (ib_write_bw, ib_write_lat, ibdev2netdev, ibv_devinfo) document their flags.

Output formats are the tools' own, from their sources (see plugins/module_utils/sparkfleet_host/parsers/rdma.py):
linux-rdma/perftest @00b55b6660d0170dabe2c1b49193e8fbe265086e src/perftest_parameters.{c,h} and
perftest_communication.{c,h}; linux-rdma/rdma-core @00b335ca30c62282efda76304630a06397642d0f
libibverbs/examples/devinfo.c; Mellanox OFED's ibdev2netdev.

Environment (every ``MAP`` value is either one value for every device or ``dev=value,dev=value``; a device such
a list does not name keeps the default):

  SPARKFLEET_FAKE_RDMA_HCAS      comma list of RDMA devices, each ``hca`` or ``hca=netdev`` (default a DGX Spark's
                                 rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1; netdev ``roceX`` -> ``enX``
                                 + ``np<function>``: enp1s0f0np0 ...)
  SPARKFLEET_FAKE_RDMA_STATE     MAP of port states ACTIVE | DOWN | INIT | ARMED (default: the inner QSFP port's
                                 twins rocep1s0f0 and roceP2p1s0f0 ACTIVE, the others DOWN, as NVIDIA's two-Spark
                                 benchmarking guide shows them)
  SPARKFLEET_FAKE_RDMA_MTU       MAP of netdev MTUs (default 9000); the RoCE MTU printed is the largest IB MTU
                                 (256..4096) that fits it with 96 bytes of RoCE headers: 4096 at 9000, 1024 at 1500
  SPARKFLEET_FAKE_RDMA_GBPS      MAP of ib_write_bw averages in Gb/s (default 92.57, NVIDIA's guide)
  SPARKFLEET_FAKE_RDMA_MIBPS     MAP of the MiB/sec averages printed without --report_gbits (default: GBPS
                                 converted)
  SPARKFLEET_FAKE_RDMA_LAT_US    MAP of ib_write_lat t_typical in microseconds (default 1.47, eugr's Sparks)
  SPARKFLEET_FAKE_RDMA_IP        MAP of the devices' IPv4 addresses shown in the GID lines (default 192.168.200.13
                                 for the p1 twins, 192.168.201.13 for the P2 twins)
  SPARKFLEET_FAKE_RDMA_FW        firmware version (default 28.45.4028, a DGX Spark's)
  SPARKFLEET_FAKE_RDMA_PEERLESS  1: ib_write_bw / ib_write_lat print a client's full result at once, with or
                                 without a server argument, and connect to nothing
  SPARKFLEET_FAKE_RDMA_FAIL      connect: the client cannot connect ("Couldn't connect to HOST:PORT");
                                 gid: "Found Incompatibility issue with GID types."
  SPARKFLEET_FAKE_RDMA_WAIT_S    how long a server waits for its client (default: for ever, as perftest does)
  SPARKFLEET_FAKE_RDMA_PERIOD_S  --run_infinitely: seconds between result rows (default 5)
  SPARKFLEET_FAKE_RDMA_ROWS      --run_infinitely: rows before the client exits (default: until killed)
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from types import SimpleNamespace

DEFAULT_HCAS = "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"
DEFAULT_ACTIVE = ("rocep1s0f0", "roceP2p1s0f0")
RESULT_LINE = "-" * 87
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
RESULT_FMT = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
RESULT_FMT_LAT = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                  "   99% percentile[usec]   99.9% percentile[usec] ")
RESULT_FMT_LAT_DUR = " #bytes        #iterations       t_avg[usec]    tps average"
REPORT_FMT = " %-7lu    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f"
REPORT_FMT_LAT = (" %-7lu %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f"
                  " \t\t%-7.2f")
REPORT_FMT_LAT_DUR = " %-7lu       %d            %-7.2f        %-7.2f"


def _env(name: str, default: str = "") -> str:
    return os.environ.get("SPARKFLEET_FAKE_RDMA_" + name, default)


def devices() -> dict:
    """hca -> netdev, in the listed order."""
    found = {}
    for item in filter(None, (s.strip() for s in _env("HCAS", DEFAULT_HCAS).split(","))):
        hca, _, netdev = item.partition("=")
        if not netdev:
            match = re.match(r"roce(.*f(\d+))$", hca)
            netdev = f"en{match.group(1)}np{match.group(2)}" if match else hca
        found[hca] = netdev
    return found


def per_device(name: str, hca: str, default):
    """A MAP variable's value for one device (see the module's docstring)."""
    raw = _env(name)
    if not raw:
        return default(hca) if callable(default) else default
    if "=" not in raw:
        return raw
    for item in raw.split(","):
        key, _, value = item.partition("=")
        if key.strip() == hca:
            return value.strip()
    return default(hca) if callable(default) else default


def state(hca: str) -> str:
    return per_device("STATE", hca, lambda h: "ACTIVE" if h in DEFAULT_ACTIVE else "DOWN").upper()


def roce_mtu(hca: str) -> int:
    mtu = int(per_device("MTU", hca, "9000"))
    fitting = [m for m in (256, 512, 1024, 2048, 4096) if m <= mtu - 96]
    return fitting[-1] if fitting else 256


def ipv4(hca: str) -> str:
    return per_device("IP", hca, lambda h: "192.168.201.13" if "P2" in h else "192.168.200.13")


def gid_decimal(address: str) -> str:
    """perftest's PERF_GID_FMT: 16 bytes in %02d, IPv4-mapped."""
    return ":".join(["00"] * 10 + ["255", "255"] + [f"{int(b):02d}" for b in address.split(".")])


# --------------------------------------------------------------------------- perftest


#: perftest's defaults for the flags the stand-in reads (18515: perftest's DEF_PORT).
ARG_DEFAULTS = {"device": None, "ib_port": 1, "port": 18515, "gbits": False, "gid_index": None, "qps": 1,
                "duration": None, "infinite": False, "size": None, "iters": None, "rdma_cm": False, "server": None}


_WITH_VALUE = {"-d": "device", "--ib-dev": "device", "-i": "ib_port", "--ib-port": "ib_port", "-p": "port",
               "--port": "port", "-x": "gid_index", "--gid-index": "gid_index", "-q": "qps", "--qp": "qps",
               "-D": "duration", "--duration": "duration", "-s": "size", "--size": "size", "-n": "iters",
               "--iters": "iters", "--force-link": None}
_FLAGS = {"-F": None, "--CPU-freq": None, "--report_gbits": "gbits", "--run_infinitely": "infinite",
          "-R": "rdma_cm", "--rdma_cm": "rdma_cm"}


def parse_args(argv: list) -> SimpleNamespace:
    args = SimpleNamespace(**ARG_DEFAULTS)
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, inline = arg.partition("=")
        if key in _WITH_VALUE and key.startswith("--") or arg in _WITH_VALUE:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            if value is None:
                _invalid()
            if not eq:
                i += 1
            attr = _WITH_VALUE[key if eq else arg]
            if attr:
                setattr(args, attr, value if attr == "device" else int(value))
        elif arg in _FLAGS:
            if _FLAGS[arg]:
                setattr(args, _FLAGS[arg], True)
        elif arg.startswith("-"):
            _invalid()
        elif args.server is None:
            args.server = arg
        else:
            _invalid()
        i += 1
    return args


def _invalid() -> None:
    sys.stderr.write(" Invalid Command or flag.\n Please check command line and run again.\n\n")
    sys.exit(1)


def _test_info(kind: str, args: SimpleNamespace, server: bool) -> list:
    lat = kind == "lat"
    link = "Ethernet"
    lines = [RESULT_LINE, "                    RDMA_Write %s Test" % ("Latency" if lat else "BW"),
             f" Dual-port       : OFF\t\tDevice         : {args.device}",
             f" Number of qps   : {args.qps}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             " PCIe relax order: %s\t\tLock-free      : OFF" % ("OFF" if lat else "ON"),
             " ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF"]
    if not server or lat:
        lines.append(f" TX depth        : {1 if lat else 128}")
    if not lat:
        lines += [" CQ Moderation   : 1", " CQE Poll Batch  : Dynamic"]
    lines += [f" Mtu             : {roce_mtu(args.device)}[B]", f" Link type       : {link}",
              f" GID index       : {3 if args.gid_index is None else args.gid_index}",
              f" Max inline data : {220 if lat else 0}[B]",
              " rdma_cm QPs\t : %s" % ("ON" if args.rdma_cm else "OFF"),
              " Data ex. method : %s" % ("rdma_cm" if args.rdma_cm else "Ethernet"), RESULT_LINE]
    return lines


def _addresses(local_ip: str, remote_ip: str) -> list:
    return [" local address: LID 0000 QPN 0x0129 PSN 0x57279d RKey 0x184300 VAddr 0x00ec99bedad000",
            f" GID: {gid_decimal(local_ip)}",
            " remote address: LID 0000 QPN 0x0129 PSN 0x0531b7 RKey 0x184300 VAddr 0x00ffeec955d000",
            f" GID: {gid_decimal(remote_ip)}", RESULT_LINE]


def _figures(hca: str) -> dict:
    gbps = float(per_device("GBPS", hca, "92.57"))
    mibps = per_device("MIBPS", hca, "")
    return {"gbps": gbps, "mibps": float(mibps) if mibps else gbps * 1e9 / 8 / 2 ** 20,
            "lat": float(per_device("LAT_US", hca, "1.47")), "ip": ipv4(hca)}


def _bw_row(args: SimpleNamespace, figures: dict, peak: bool) -> str:
    size = args.size or 65536
    average = figures["gbps"] if args.gbits else figures["mibps"]
    iters = (args.iters or 5000) * args.qps
    if args.duration:
        iters = int(figures["gbps"] * 1e9 / 8 / size * args.duration)
    rate = figures["gbps"] * 1e9 / 8 / size / 1e6
    return REPORT_FMT % (size, iters, average * 1.0004 if peak else 0.0, average, rate)


def _lat_rows(args: SimpleNamespace, figures: dict) -> list:
    typical = figures["lat"]
    size = args.size or 2
    if args.duration:
        return [RESULT_FMT_LAT_DUR,
                REPORT_FMT_LAT_DUR % (size, int(args.duration * 1e6 / typical), typical, 1e6 / typical / 2)]
    return [RESULT_FMT_LAT,
            REPORT_FMT_LAT % (size, args.iters or 1000, typical - 0.05, typical + 0.46, typical, typical, 0.0,
                              typical + 0.10, typical + 0.46)]


def _emit(lines) -> None:
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _results(kind: str, args: SimpleNamespace, figures: dict) -> None:
    """The table after the addresses: the BW rows (one, or one per period with --run_infinitely) or the latency."""
    if kind == "lat":
        _emit(_lat_rows(args, figures) + [RESULT_LINE])
        return
    _emit([RESULT_FMT_G if args.gbits else RESULT_FMT])
    if not args.infinite:
        _emit([_bw_row(args, figures, True), RESULT_LINE])
        return
    rows, period = _env("ROWS"), float(_env("PERIOD_S", "5"))
    count = 0
    while not rows or count < int(rows):
        time.sleep(period)
        _emit([_bw_row(args, figures, False)])
        count += 1


def _server_socket(args: SimpleNamespace) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", args.port))
    listener.listen(1)
    wait = _env("WAIT_S")
    listener.settimeout(float(wait) if wait else None)
    try:
        conn, _ = listener.accept()
    except TimeoutError:
        sys.stderr.write(" Unable to open file descriptor for socket connection\n"
                         " Unable to init the socket connection\n")
        sys.exit(1)
    finally:
        listener.close()
    conn.settimeout(None)
    return conn


def _exchange(conn: socket.socket, mine: dict) -> dict:
    conn.sendall((json.dumps(mine) + "\n").encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return json.loads(data.decode() or "{}")


def perftest(kind: str, argv: list) -> int:
    """``ib_write_bw`` (kind "bw") or ``ib_write_lat`` (kind "lat")."""
    args = parse_args(argv)
    hcas = devices()
    if args.device is None:
        args.device = next(iter(hcas), None)
    if args.device not in hcas:
        sys.stderr.write(f"IB device {args.device} not found\n Unable to find the Infiniband/RoCE device\n")
        return 1
    if args.infinite:
        sys.stdout.write(" WARNING: BW peak won't be measured in this run.\n")
    mine = _figures(args.device)
    if _env("PEERLESS") == "1":
        _emit(_test_info(kind, args, False) + _addresses(mine["ip"], _peer_ip(mine["ip"])))
        _results(kind, args, mine)
        return 0
    if args.server is None:
        _emit(["", "************************************", "* Waiting for client to connect... *",
               "************************************"])
        conn = _server_socket(args)
        theirs = _exchange(conn, mine)
        _emit(_test_info(kind, args, True) + _addresses(mine["ip"], theirs.get("ip", "0.0.0.0")))
        if kind == "lat":
            _results(kind, args, theirs)
        elif args.infinite:
            _emit([RESULT_FMT_G if args.gbits else RESULT_FMT])
            conn.recv(1)  # until the client goes
            _emit([" Client closed connection", RESULT_LINE])
        else:
            _emit([RESULT_FMT_G if args.gbits else RESULT_FMT, _bw_row(args, theirs, True), RESULT_LINE])
        conn.close()
        return 0
    if _env("FAIL") == "connect":
        return _cannot_connect(args)
    try:
        conn = socket.create_connection((args.server, args.port), timeout=10)
    except OSError:
        return _cannot_connect(args)
    theirs = _exchange(conn, mine)
    _emit(_test_info(kind, args, False))
    if _env("FAIL") == "gid":
        sys.stderr.write("\n Found Incompatibility issue with GID types.\n"
                         " Please Try to use a different IP version.\n\n")
        return 1
    _emit(_addresses(mine["ip"], theirs.get("ip", "0.0.0.0")))
    try:
        _results(kind, args, mine)
    finally:
        conn.close()
    return 0


def _peer_ip(address: str) -> str:
    head, _, last = address.rpartition(".")
    return f"{head}.{12 if last != '12' else 13}"


def _cannot_connect(args: SimpleNamespace) -> int:
    sys.stderr.write(f"Couldn't connect to {args.server}:{args.port}\n"
                     "Unable to open file descriptor for socket connection\n Unable to init the socket connection\n")
    return 1


# --------------------------------------------------------------------------- ibdev2netdev / ibv_devinfo


def ibdev2netdev(argv: list) -> int:
    """Mellanox OFED's ``ibdev2netdev [-v]``: ``hca port 1 ==> netdev (Up|Down)``."""
    if argv not in ([], ["-v"]):
        sys.stdout.write("ibdev2netdev <options>\n-h, --help                print help message\n"
                         "-v, --verbose             print more info\n")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 255
    for i, (hca, netdev) in enumerate(devices().items()):
        up = "Up" if state(hca) == "ACTIVE" else "Down"
        if argv == ["-v"]:
            pci = f"0000:{1 + 2 * (i // 2):02x}:00.{i % 2}"
            sys.stdout.write(f"{pci} {hca} (MT4129 - NVD0000000087) NVIDIA DGX Spark fw {_env('FW', '28.45.4028')} "
                             f"port 1 ({state(hca):<6}) ==> {netdev} ({up})\n")
        else:
            sys.stdout.write(f"{hca} port 1 ==> {netdev} ({up})\n")
    return 0


_STATE_CODES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
_MTU_CODES = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


def ibv_devinfo(argv: list) -> int:
    """rdma-core's ``ibv_devinfo [-d DEV] [-i PORT] [-l] [-v]`` (libibverbs/examples/devinfo.c)."""
    wanted, verbose, port = None, False, 0
    hcas = devices()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-d", "--ib-dev") and i + 1 < len(argv):
            wanted, i = argv[i + 1], i + 1
        elif arg.startswith("--ib-dev="):
            wanted = arg.split("=", 1)[1]
        elif arg in ("-i", "--ib-port") and i + 1 < len(argv):
            port, i = int(argv[i + 1]), i + 1
        elif arg in ("-v", "--verbose"):
            verbose = True
        elif arg in ("-l", "--list"):
            sys.stdout.write(f"{len(hcas)} HCA{'s' if len(hcas) != 1 else ''} found:\n")
            sys.stdout.write("".join(f"\t{h}\n" for h in hcas) + "\n")
            return 0
        else:
            sys.stdout.write("Usage: ibv_devinfo             print the ca attributes\n")
            return 255
        i += 1
    if not hcas:
        sys.stderr.write("No IB devices found\n")
        return 255
    if wanted is not None and wanted not in hcas:
        sys.stderr.write(f"IB device '{wanted}' wasn't found\n")
        return 255
    if port > 1:
        sys.stderr.write("Invalid port requested for device\n")
        return 4
    for n, hca in enumerate(h for h in hcas if wanted in (None, h)):
        words = "%04x" % (0x1a16 + n)
        st, mtu = state(hca), roce_mtu(hca) if state(hca) == "ACTIVE" else 1024
        out = [f"hca_id:\t{hca}", "\ttransport:\t\t\tInfiniBand (0)", "\tfw_ver:\t\t\t\t" + _env("FW", "28.45.4028"),
               f"\tnode_guid:\t\t\t4cbb:4703:002d:{words}", "\tsys_image_guid:\t\t\t4cbb:4703:002d:1a16",
               "\tvendor_id:\t\t\t0x02c9", "\tvendor_part_id:\t\t\t4129", "\thw_ver:\t\t\t\t0x0",
               "\tboard_id:\t\t\tNVD0000000087", "\tphys_port_cnt:\t\t\t1", "\t\tport:\t1",
               f"\t\t\tstate:\t\t\tPORT_{st} ({_STATE_CODES.get(st, 0)})", "\t\t\tmax_mtu:\t\t4096 (5)",
               f"\t\t\tactive_mtu:\t\t{mtu} ({_MTU_CODES[mtu]})", "\t\t\tsm_lid:\t\t\t0",
               "\t\t\tport_lid:\t\t0", "\t\t\tport_lmc:\t\t0x00", "\t\t\tlink_layer:\t\tEthernet"]
        if verbose:
            address = ipv4(hca)
            octets = [int(b) for b in address.split(".")]
            mapped = "0000:0000:0000:0000:0000:ffff:" + "{:02x}{:02x}:{:02x}{:02x}".format(*octets)
            out += ["\t\t\tgid_tbl_len:\t\t255", f"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:4ebb:47ff:fe2d:{words}",
                    f"\t\t\tGID[  1]:\t\tfe80:0000:0000:0000:4ebb:47ff:fe2d:{words}",
                    f"\t\t\tGID[  2]:\t\t{mapped}", f"\t\t\tGID[  3]:\t\t{mapped}"]
        sys.stdout.write("\n".join(out) + "\n\n")
    return 0
