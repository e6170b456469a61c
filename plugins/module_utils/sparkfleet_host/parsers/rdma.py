"""RDMA tools' output: perftest's ``ib_write_bw`` / ``ib_write_lat``, ``ibdev2netdev``, ``ibv_devinfo`` (issue 36).

None of these parsers raises on truncated or garbled input: what is not found is None (or an empty list), what
looked wrong goes to ``errors`` / ``warnings``.

Formats, from the tools' sources:

perftest      linux-rdma/perftest @00b55b6660d0170dabe2c1b49193e8fbe265086e (26.04.17-19):
              src/perftest_parameters.h
                RESULT_LINE      87 dashes
                RESULT_FMT_G     " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
                RESULT_FMT       the same in ``[MiB/sec]`` (``[MB/sec]`` before commit 1d202bb, perftest 24.07)
                REPORT_FMT       " %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t     %-7.6lf"
                REPORT_FMT_EXT   the same with %-7.6lf figures (a Gb/s average under 0.1)
                RESULT_FMT_LAT   " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]
                                 t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
                REPORT_FMT_LAT   " %-7lu %" PRIu64 "          %-7.2f" x 7 (tabs between some columns)
                RESULT_FMT_LAT_DUR " #bytes        #iterations       t_avg[usec]    tps average"  (``-D`` runs)
              src/perftest_parameters.c ctx_print_test_info(): the preamble, two ``Name : value`` pairs on some lines
                (" Dual-port       : OFF\t\tDevice         : rocep1s0f0", " Number of qps   : 1\t\tTransport type :
                IB", " Mtu             : 4096[B]", " Link type       : Ethernet", " GID index       : 3" ...);
                " WARNING: BW peak won't be measured in this run." with --run_infinitely (peak printed as 0.00)
              src/perftest_communication.h BASIC_ADDR_FMT " %s address: LID %#04x QPN %#06x PSN %#06x" and
                PERF_GID_FMT " %s: %02d:...:%02d" (the GID's 16 bytes in *decimal*: an IPv4-mapped RoCE v2 GID
                reads ``00:...:00:255:255:192:168:200:13``)
              errors (stderr): "Couldn't connect to %s:%d", "Unable to open file descriptor for socket connection",
                " Unable to init the socket connection", " Failed to exchange data between server and clients",
                "IB device %s not found", " Unable to find the Infiniband/RoCE device", " Couldn't get context for
                the device", " Found Incompatibility issue with GID types.", " Unable to Connect the HCA's through
                the link", " Invalid Command or flag." (src/write_bw.c, perftest_communication.c,
                perftest_resources.c)
              Published runs: NVIDIA/dgx-spark-playbooks @0db7c141da60870ca6ed5c99436320f4e35cd531
                nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md (two Sparks, --run_infinitely,
                92.57 + 97.28 Gb/s); eugr/spark-vllm-docker @3e84d9d05399cd52ce9e237df12fd5fb056498e2
                docs/NETWORKING.md (111.71 Gb/s with -q 4; ib_write_lat typical 1.47 us). Copies in
                tests/fixtures/rdma/.
ibdev2netdev  Mellanox OFED's script (Mellanox/docker-sriov-plugin @b0619966428c722a1389594809da50d49fae8c80
              ibdev2netdev): ``echo "$d port $port ==> $eth ($link_state)"`` with link_state Up / Down / NA (from
              /sys/class/net/$eth/carrier); ``-v``: ``"$x $d ($devid - $partid) $devdesc fw $fwver port $port
              ($ibstate) ==> $eth ($link_state)"``; the old style ``"$1 port $2 <===> $3"``. Some builds pad the
              names into columns (``rocep1s0f0   port 1 ==> enp1s0f0np0   (Up)``, NVIDIA's Spark docs).
ibv_devinfo   linux-rdma/rdma-core @00b335ca30c62282efda76304630a06397642d0f libibverbs/examples/devinfo.c
              print_hca_cap(): ``hca_id:\\t%s``, ``\\ttransport:\\t\\t\\t%s (%d)``, ``\\tfw_ver:\\t\\t\\t\\t%s`` ...
              then per port ``\\t\\tport:\\t%d``, ``\\t\\t\\tstate:\\t\\t\\t%s (%d)`` (PORT_DOWN, PORT_INIT,
              PORT_ARMED, PORT_ACTIVE), ``max_mtu`` / ``active_mtu`` ``%s (%d)`` (256..4096 and the enum),
              ``link_layer`` (InfiniBand / Ethernet / Unknown), with ``-v`` ``GID[%3d]:\\t\\t<8 groups of 4 hex>``;
              "No IB devices found", "IB device '%s' wasn't found" on stderr. MLNX_OFED builds also print a
              ``\\tDevice ports:`` line before the ports.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

#: MiB/sec (perftest's unit without --report_gbits: 2^20 bytes) to Gb/sec (10^9 bits), per perftest's own note
#: in README ("MiB=2^20 byte, while Gb=10^9 bits").
MIB_PER_S_TO_GBPS = 2 ** 20 * 8 / 1e9

_NUM = r"(\d+(?:\.\d+)?)"
_BW_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb/sec|MiB/sec|MB/sec)\]\s+BW average\[[^\]]+\]"
                        r"\s+MsgRate\[Mpps\]")
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+" + _NUM + r"\s+" + _NUM + r"\s+" + _NUM + r"(?:\s+" + _NUM + r")?\s*$")
_LAT_HEADER = re.compile(r"#bytes\s+#iterations\s+t_min\[usec\]")
_LAT_DUR_HEADER = re.compile(r"#bytes\s+#iterations\s+t_avg\[usec\]\s+tps average")
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)" + (r"\s+" + _NUM) * 7 + r"(?:\s+" + _NUM + r")?\s*$")
_LAT_DUR_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+" + _NUM + r"\s+" + _NUM + r"\s*$")
_TITLE = re.compile(r"^\s*(\S+ (?:\S+ )*?(?:BW|Latency) (?:\S+ )*?Test)\s*$")
_KEY = re.compile(r"(?:^\s*|\s{2,}|\t+)([A-Za-z][\w*./-]*(?: [\w*./-]+)*)\s*:")
_GID_LINE = re.compile(r"^\s*(GID|MGID)\s*:\s*((?:\d{1,3}:){15}\d{1,3})\s*$")
_ADDRESS = re.compile(r"^\s*(local|remote) address\s*:")
_ERROR = re.compile(
    r"(Couldn't connect to \S+|Unable to open file descriptor|Unable to init the socket connection|"
    r"Failed to exchange data|IB device \S+ not found|No IB devices found|Unable to find the Infiniband/RoCE device|"
    r"Couldn't get context for the device|Found Incompatibility issue with GID types|"
    r"Unable to Connect the HCA's through the link|Invalid Command|Couldn't create IB resources|"
    r"Unable to set up socket connection|Failed to modify QP|Couldn't allocate|Unable to perform rdma_)",
)
_PEAK_WARNING = "BW peak won't be measured"


def _preamble(lines: List[str]) -> Dict[str, Any]:
    """The ``Name : value`` pairs of ctx_print_test_info() (keys as printed, stripped), the test's title,
    and the GIDs of the address lines (decimal bytes)."""
    info: Dict[str, str] = {}
    title = None
    gids: List[str] = []
    side = None
    for line in lines:
        if _BW_HEADER.search(line) or _LAT_HEADER.search(line) or _LAT_DUR_HEADER.search(line):
            break
        match = _TITLE.match(line)
        if match and title is None:
            title = match.group(1)
            continue
        address = _ADDRESS.match(line)
        if address:
            side = address.group(1)
            continue
        gid = _GID_LINE.match(line)
        if gid:
            gids.append("%s:%s" % (side or "", gid.group(2)))
            continue
        if ":" in line and not line.lstrip().startswith(("WARNING", "*", "-")):
            keys = list(_KEY.finditer(line))
            for i, key in enumerate(keys):
                end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
                info.setdefault(key.group(1), line[key.end():end].strip())
    return {"info": info, "title": title, "gids": gids}


def _int(value: Optional[str]) -> Optional[int]:
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


def gid_ipv4(gid: Optional[str]) -> Optional[str]:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), given as perftest prints it (16 decimal
    bytes) or as sysfs / ibv_devinfo print it (8 groups of 4 hex digits); None otherwise."""
    if not gid:
        return None
    parts = gid.split(":")
    try:
        if len(parts) == 16:
            raw = [int(p) for p in parts]
        elif len(parts) == 8:
            raw = []
            for group in parts:
                word = int(group, 16)
                raw += [word >> 8, word & 0xFF]
        else:
            return None
    except ValueError:
        return None
    if raw[:10] != [0] * 10 or raw[10:12] != [255, 255] or any(b > 255 for b in raw):
        return None
    return ".".join(str(b) for b in raw[12:])


def _common(text: str) -> Dict[str, Any]:
    lines = text.splitlines()
    pre = _preamble(lines)
    info = pre["info"]
    local = [g.split(":", 1)[1] for g in pre["gids"] if g.startswith("local:")]
    remote = [g.split(":", 1)[1] for g in pre["gids"] if g.startswith("remote:")]
    errors = []
    for line in lines:
        if _ERROR.search(line):
            errors.append(line.strip())
    return {
        "test": pre["title"],
        "device": info.get("Device") or None,
        "transport": info.get("Transport type") or None,
        "connection": info.get("Connection type") or None,
        "qps": _int(info.get("Number of qps")),
        "link_type": info.get("Link type") or None,
        "gid_index": _int(info.get("GID index")),
        "mtu_bytes": _int(info.get("Mtu")),
        "rdma_cm": (info.get("rdma_cm QPs") or None),
        "local_gid": local[0] if local else None,
        "remote_gid": remote[0] if remote else None,
        "local_ipv4": gid_ipv4(local[0]) if local else None,
        "remote_ipv4": gid_ipv4(remote[0]) if remote else None,
        "errors": errors,
        "warnings": [],
    }


def parse_ib_write_bw(text: str) -> Dict[str, Any]:
    """perftest ``ib_write_bw`` output (client or server, with or without ``--report_gbits``); never raises.

    Returns::

        {"ok": bool,                 # a result row was found and no error line
         "test": "RDMA_Write BW Test"|None, "device": str|None, "transport": "IB"|None, "connection": "RC"|None,
         "qps": int|None, "link_type": "Ethernet"|"IB"|None, "gid_index": int|None, "mtu_bytes": int|None,
         "rdma_cm": "ON"|"OFF"|None,
         "local_gid": str|None, "remote_gid": str|None,      # as printed: 16 decimal bytes
         "local_ipv4": str|None, "remote_ipv4": str|None,    # from IPv4-mapped (RoCE v2) GIDs
         "unit": "Gb/sec"|"MiB/sec"|"MB/sec"|None,           # the table's unit as printed
         "rows": [{"bytes": int, "iterations": int, "bw_peak": float, "bw_average": float,
                   "msg_rate_mpps": float}],                 # in ``unit``; --run_infinitely prints one per period
         "bytes": int|None, "iterations": int|None,          # of the last row
         "bw_average_gbps": float|None,                      # the last row's average in Gb/s (10^9 bit/s)
         "bw_peak_gbps": float|None,                         # None where perftest did not measure it
         "msg_rate_mpps": float|None,
         "peak_measured": bool,                              # False after "BW peak won't be measured"
         "errors": [str], "warnings": [str]}

    MiB/sec and MB/sec figures (both 2^20 bytes: perftest renamed the unit, not the arithmetic) are converted
    with :data:`MIB_PER_S_TO_GBPS`, rounded to 2 decimals.
    """
    out = _common(text)
    out.update({"ok": False, "unit": None, "rows": [], "bytes": None, "iterations": None, "bw_average_gbps": None,
                "bw_peak_gbps": None, "msg_rate_mpps": None, "peak_measured": _PEAK_WARNING not in text})
    in_table = False
    for line in text.splitlines():
        header = _BW_HEADER.search(line)
        if header:
            out["unit"] = header.group(1)
            in_table = True
            continue
        if not in_table:
            continue
        row = _BW_ROW.match(line)
        if row:
            out["rows"].append({"bytes": int(row.group(1)), "iterations": int(row.group(2)),
                                "bw_peak": float(row.group(3)), "bw_average": float(row.group(4)),
                                "msg_rate_mpps": float(row.group(5))})
        elif line.strip() and not line.strip().startswith("-"):
            in_table = False
    if out["rows"]:
        last = out["rows"][-1]
        factor = 1.0 if out["unit"] == "Gb/sec" else MIB_PER_S_TO_GBPS
        out["bytes"], out["iterations"] = last["bytes"], last["iterations"]
        out["bw_average_gbps"] = round(last["bw_average"] * factor, 2)
        out["bw_peak_gbps"] = round(last["bw_peak"] * factor, 2) if out["peak_measured"] else None
        out["msg_rate_mpps"] = last["msg_rate_mpps"]
        if len(out["rows"]) > 1:
            out["warnings"].append("%d result rows; using the last one" % len(out["rows"]))
    elif not out["errors"]:
        out["warnings"].append("no result row (the run did not finish, or a server still waiting)")
    out["ok"] = bool(out["rows"]) and not out["errors"]
    return out


def parse_ib_write_lat(text: str) -> Dict[str, Any]:
    """perftest ``ib_write_lat`` output; never raises.

    Returns the preamble keys of :func:`parse_ib_write_bw` ("test" ... "remote_ipv4", "errors", "warnings") and::

        {"ok": bool, "duration_mode": bool,                  # -D: only t_avg and tps are printed
         "bytes": int|None, "iterations": int|None,
         "t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us": float|None,
         "tps_average": float|None}                          # -D runs only

    ``t_typical_us`` is perftest's median; the last result row wins.
    """
    out = _common(text)
    keys = ("t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us", "p99_9_us")
    out.update({"ok": False, "duration_mode": False, "bytes": None, "iterations": None, "tps_average": None})
    out.update({k: None for k in keys})
    mode = None
    found = False
    for line in text.splitlines():
        if _LAT_HEADER.search(line):
            mode = "iterations"
            continue
        if _LAT_DUR_HEADER.search(line):
            mode = "duration"
            continue
        row = _LAT_ROW.match(line) if mode == "iterations" else _LAT_DUR_ROW.match(line) if mode else None
        if not row:
            continue
        found = True
        out["bytes"], out["iterations"] = int(row.group(1)), int(row.group(2))
        if mode == "iterations":
            out.update({k: float(row.group(3 + i)) for i, k in enumerate(keys)})
        else:
            out["duration_mode"] = True
            out["t_avg_us"], out["tps_average"] = float(row.group(3)), float(row.group(4))
    if not found and not out["errors"]:
        out["warnings"].append("no result row (the run did not finish, or a server still waiting)")
    out["ok"] = found and not out["errors"]
    return out


_IBDEV2NETDEV = re.compile(r"^\s*(?:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)\s+)?(?P<hca>\S+)"
                           r"(?P<verbose>\s+\(.*?\)\s+.*?\bfw\s+(?P<fw>\S+))?"
                           r"\s+port\s+(?P<port>\d+)(?:\s+\((?P<port_state>[^)]*)\))?"
                           r"\s+(?:==>|<===>)\s+(?P<netdev>\S+)(?:\s+\((?P<state>[^)]*)\))?\s*$")


def parse_ibdev2netdev(text: str) -> List[Dict[str, Any]]:
    """``ibdev2netdev`` (plain, ``-v`` or the old ``<===>`` style) lines, in order; never raises.

    Each: ``{"hca": str, "port": int, "netdev": str, "state": "Up"|"Down"|"NA"|None, "up": bool,
    "pci": str|None, "fw": str|None, "port_state": str|None}`` (pci, fw, port_state only with ``-v``; port_state
    is the sysfs state word, e.g. ``ACTIVE``).
    """
    found = []
    for line in text.splitlines():
        match = _IBDEV2NETDEV.match(line)
        if not match:
            continue
        state = match.group("state")
        port_state = match.group("port_state")
        found.append({"hca": match.group("hca"), "port": int(match.group("port")), "netdev": match.group("netdev"),
                      "state": state, "up": state == "Up", "pci": match.group("pci"), "fw": match.group("fw"),
                      "port_state": port_state.strip() if port_state else None})
    return found


_DEVINFO_KV = re.compile(r"^\s*([A-Za-z_][\w ]*?):\s*(.*?)\s*$")
_GID_ROW = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*(\S+)")
_ENUM = re.compile(r"^(.*?)\s*\((-?\d+)\)$")
_HCA_KEYS = ("transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver",
             "board_id")


def parse_ibv_devinfo(text: str) -> List[Dict[str, Any]]:
    """``ibv_devinfo`` (with or without ``-v`` / ``-d`` / ``-i``) HCA blocks, in order; never raises.

    Each::

        {"hca": str, "transport": "InfiniBand (0)"|None, "fw_ver": str|None, "node_guid": str|None,
         "sys_image_guid": str|None, "vendor_id": str|None, "vendor_part_id": str|None, "hw_ver": str|None,
         "board_id": str|None, "phys_port_cnt": int|None,
         "ports": [{"port": int, "state": "PORT_ACTIVE"|..., "state_code": int|None, "active": bool,
                    "max_mtu": int|None, "active_mtu": int|None, "link_layer": "Ethernet"|"InfiniBand"|None,
                    "sm_lid": int|None, "port_lid": int|None, "gids": {index: gid}}]}   # gids: -v only
    """
    hcas: List[Dict[str, Any]] = []
    hca: Optional[Dict[str, Any]] = None
    port: Optional[Dict[str, Any]] = None
    for raw in text.splitlines():
        gid = _GID_ROW.match(raw)
        if gid and port is not None:
            port["gids"][int(gid.group(1))] = gid.group(2)
            continue
        match = _DEVINFO_KV.match(raw)
        if not match:
            continue
        key, value = match.group(1).strip(), match.group(2)
        if key == "hca_id":
            hca = {"hca": value, "phys_port_cnt": None, "ports": []}
            hca.update({k: None for k in _HCA_KEYS})
            hcas.append(hca)
            port = None
        elif hca is None:
            continue
        elif key == "port" and value.isdigit():
            port = {"port": int(value), "state": None, "state_code": None, "active": False, "max_mtu": None,
                    "active_mtu": None, "link_layer": None, "sm_lid": None, "port_lid": None, "gids": {}}
            hca["ports"].append(port)
        elif port is not None and key in ("state", "max_mtu", "active_mtu", "link_layer", "sm_lid", "port_lid"):
            enum = _ENUM.match(value)
            word = enum.group(1) if enum else value
            if key == "state":
                port["state"] = word
                port["state_code"] = int(enum.group(2)) if enum else None
                port["active"] = word == "PORT_ACTIVE"
            elif key in ("max_mtu", "active_mtu", "sm_lid", "port_lid"):
                port[key] = int(word) if word.isdigit() else None
            else:
                port["link_layer"] = word or None
        elif key == "phys_port_cnt":
            hca["phys_port_cnt"] = int(value) if value.isdigit() else None
        elif key in _HCA_KEYS and port is None:
            hca[key] = value
    return hcas
