"""NCCL for a pair of hosts: the nccl-tests result table, what ``NCCL_DEBUG=INFO`` says of the transport, bus bandwidth.

**nccl-tests** (``all_reduce_perf``, ``all_gather_perf``, ...) prints, after its ``#`` preamble, one row per size::

    # nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807          (2.17.x+; older ones print neither)
    # Collective test starting: all_reduce_perf                                (2.17+)
    # nThread 1 nGpus 1 minBytes 8388608 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0 unalign: 0
    #  Rank  0 Group  0 Pid   1234 on    spark-a device  0 [000f:01:00] NVIDIA GB10
    #                                                              out-of-place          in-place ...
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us) ...
         8388608       2097152     float     sum      -1   722.31   11.61   11.61       0   715.05 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 21.4637
    # Collective test concluded: all_reduce_perf

Formats: NVIDIA/nccl-tests ``src/util.cu`` (``writeBenchmarkLinePreamble`` ``"%12li  %12li  %8s  %6s  %6s"``,
``writeBenchmarkLineBody`` ``"  %7s  %6s  %6s  %6g"`` or ``"    N/A"`` without validation, ``getFloatStr`` widening
to ``%.1f``/``%.0f``/``%.1e``, ``writeResultHeader``, ``writeResultFooter``, ``writeDeviceReport``) at commit
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 (v2.19.6), and ``src/common.cu`` at v2.13.9
(c6afef0b6f76ffc55d4172d971be6cf5a08a73a4) for the older header. Variants read here: ``cputime`` for ``time``
(``-C 1``), the per-iteration columns ``i_min i_max i_p99 i_cv%`` after each half (``-I 1``, 2.19+), a trailing
``%Y-%m-%d %H:%M:%S`` timestamp (``-S 1``, 2.18+), a row with the in-place half only (trace replay), extra trailing
columns (RCCL's ``algo proto nchannels``), and ``NCCL INFO``/``NCCL WARN`` lines interleaved with the table, even
cutting a row in two (NCCL connects lazily, during the first collective, and logs to the same stdout).

**NCCL_DEBUG=INFO** lines are ``host:pid:tid [cudaDev] NCCL INFO <text>`` (NVIDIA/nccl ``src/debug.cc``); the ones read
here, with their source at commit 5067397c2676d5aed50042fc39e5c8ee96eb0027:

* ``NCCL version 2.27.7+cuda13.0`` (``src/init.cc`` ``VERSION_STRING``);
* ``Using network IB`` / ``Using network Socket`` (``src/init.cc``): the network the communicator uses;
* ``NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enp1s0f0np0:192.168.100.10<0>``
  (``src/transport/net_ib/init.cc``: `` [%d]%s:%d`` per device, an optional ``:rail`` or ``::plane``, ``/%s`` the
  link layer from ``NCCL_IB_LLSTR``: ``IB``, ``RoCE`` or ``UNSPECIFIED``), and ``NET/IB : No device found.``;
* ``NET/Socket : Using [0]eth0:10.0.0.2<0>`` (``src/transport/net_socket.cc``);
* channel connections ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (``src/transport/p2p.cc``),
  ``Channel 02/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA`` and ``[receive] via NET/Socket/0``
  (``src/transport/net.cc``), ``Channel 00 : 0[0] -> 1[1] via SHM/direct/direct`` (``src/transport/shm.cc``).

**Bus bandwidth** is nccl-tests' (``src/*.cu`` ``*GetBw`` at a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 and
doc/PERFORMANCE.md): algbw = size / time with size the table's ``size`` column in bytes and GB = 1e9 bytes;
busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and alltoall, 1 for broadcast,
reduce and sendrecv.

Nothing here raises on a bad log: what could not be read goes to ``warnings``; ``bus_bandwidth`` raises ValueError
on an unknown collective or impossible arguments (that is a caller's bug, not a host's output).
"""

from __future__ import annotations

import re
from typing import Any

GIB = 1 << 30

#: nccl-tests' bus-bandwidth factor per collective, as a function of the number of ranks.
BUS_FACTORS = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / float(n),
    "reducescatter": lambda n: (n - 1) / float(n),
    "alltoall": lambda n: (n - 1) / float(n),
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

# ---- NCCL_DEBUG lines

#: ``host:pid:tid [dev] NCCL INFO`` (debug.cc); a host name starts with a letter here, so that a table row cut by a
#: log line (``      -1spark-a:12:34 [0] NCCL INFO ...``) keeps its root column.
_LOG_PREFIX = re.compile(r"(?:(?P<host>[A-Za-z_][^\s:\]>]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] )?"
                         r"NCCL (?P<level>INFO|WARN|TRACE) ?")
_VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+\S*)")
_USING_NETWORK = re.compile(r"^Using network (\S+)")
_NET_USING = re.compile(r"^NET/(?P<net>\w+) ?: Using(?P<rest>.*)$")
_IB_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^\s:\[\]]+):(?P<port>\d+)(?::[^\s/]*)?"
                        r"/(?P<link>IB|RoCE|UNSPECIFIED)")
_SOCKET_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^\s:\[\]]+):(?P<address>\S+)")
_OOB = re.compile(r";\s*OOB\s+(\S+)")
_NO_IB = re.compile(r"^NET/IB ?: No device found")
_CHANNEL = re.compile(r"^Channel (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<src_dev>\d+)\] -> "
                      r"(?P<dst>\d+)\[(?P<dst_dev>\d+)\](?: \[(?P<direction>send|receive)\])? via (?P<via>.+?)\s*$")
_NET_DEV = re.compile(r"^NET/[^/]+/(\d+)")

# ---- nccl-tests table

_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+(?P<time>\w+)\s")
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\S+)\s+(?P<redop>\S+)\s+(?P<root>-?\d+)"
                  r"(?P<body>(?:\s.*)?)$")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_RANK = re.compile(r"^#\s+Rank\s+(?P<rank>\d+)\s+Group\s+(?P<group>\d+)\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+"
                   r"device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$")
_CONFIG_INTS = (
    ("nthread", re.compile(r"\bnThread (\d+)")),
    ("ngpus", re.compile(r"\bnGpus (\d+)")),
    ("min_bytes", re.compile(r"\bminBytes (\d+)")),
    ("max_bytes", re.compile(r"\bmaxBytes (\d+)")),
    ("warmup_iters", re.compile(r"\bwarmup iters: (\d+)")),
    ("iters", re.compile(r"(?<!warmup )(?<!agg )\biters: (\d+)")),
    ("agg_iters", re.compile(r"\bagg iters: (\d+)")),
    ("validation", re.compile(r"\bvalidation: (\d+)")),
    ("graph", re.compile(r"\bgraph: (\d+)")),
    ("unalign", re.compile(r"\bunalign: (\d+)")),
)
_STEP = re.compile(r"\bstep: (\d+)\((factor|bytes)\)")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")
_CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")
_HALF_KEYS = ("time_us", "algbw_gbs", "busbw_gbs", "wrong")
_PER_ITER_KEYS = ("i_min_us", "i_max_us", "i_p99_us", "i_cv_pct")


def _collective_key(collective: str) -> str:
    name = collective.strip().lower()
    name = name[:-5] if name.endswith("_perf") else name
    return name.replace("_", "").replace("-", "")


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw for ``collective`` (all_reduce, allreduce, all_reduce_perf, ...) on ``nranks``."""
    factor = BUS_FACTORS.get(_collective_key(collective))
    if factor is None:
        raise ValueError(f"unknown collective {collective!r} (known: {', '.join(sorted(BUS_FACTORS))})")
    if int(nranks) < 1:
        raise ValueError(f"nranks must be at least 1, not {nranks!r}")
    return factor(int(nranks))


def algorithm_bandwidth(size_bytes: float, seconds: float) -> float:
    """algbw in GB/s (1e9 bytes) as nccl-tests computes it: the table's size over the time of one operation."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, not {seconds!r}")
    return float(size_bytes) / 1.0e9 / float(seconds)


def bus_bandwidth(collective: str, size_bytes: float, seconds: float, nranks: int) -> float:
    """busbw in GB/s: algbw times the collective's factor (2(n-1)/n for all_reduce; nccl-tests src/*.cu GetBw)."""
    return algorithm_bandwidth(size_bytes, seconds) * bus_factor(collective, nranks)


# ---- NCCL_DEBUG=INFO


def _log_lines(text: str):
    """(host, level, message) of each NCCL log line; host is '' when the line has no ``host:pid:tid`` prefix."""
    for raw in text.splitlines():
        match = _LOG_PREFIX.search(raw)
        if match:
            yield match.group("host") or "", match.group("level"), raw[match.end():].strip()
        elif _VERSION.match(raw.strip()):  # NCCL_DEBUG=VERSION prints the bare line
            yield "", "VERSION", raw.strip()


def _ib_devices(rest: str) -> list[dict[str, Any]]:
    return [{"index": int(m.group("index")), "name": m.group("name"), "port": int(m.group("port")),
             "link_layer": m.group("link")} for m in _IB_DEVICE.finditer(rest.split(";")[0])]


def _socket_devices(rest: str) -> list[dict[str, Any]]:
    return [{"index": int(m.group("index")), "name": m.group("name"), "address": m.group("address")}
            for m in _SOCKET_DEVICE.finditer(rest)]


def _transport_of(via: str) -> str:
    """``P2P/CUMEM/read`` -> P2P, ``NET/IB/0/GDRDMA`` -> NET/IB, ``SHM/direct/direct`` -> SHM."""
    parts = via.split()[0].split("/")
    if parts[0] in ("NET", "COLLNET") and len(parts) > 1:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


def _channel(match: re.Match, host: str) -> dict[str, Any]:
    via = match.group("via")
    return {"host": host, "channel": int(match.group("channel")),
            "conn": None if match.group("conn") is None else int(match.group("conn")),
            "from_rank": int(match.group("src")), "from_dev": int(match.group("src_dev")),
            "to_rank": int(match.group("dst")), "to_dev": int(match.group("dst_dev")),
            "direction": match.group("direction"), "via": via, "transport": _transport_of(via)}


def _add_once(items: list[str], value: str) -> None:
    if value not in items:
        items.append(value)


def _read_net_line(host: str, message: str, out: dict[str, Any]) -> bool:
    """One ``NET/<name> : Using ...`` or ``NET/IB : No device found.`` line into ``out``; False when it is neither."""
    if _NO_IB.match(message):
        out["ib_no_device"] = True
        return True
    net = _NET_USING.match(message)
    if not net:
        return False
    name, rest = net.group("net"), net.group("rest")
    _add_once(out["net_plugins"], name)
    if name == "IB":
        devices = _ib_devices(rest)
        out["ib_devices_by_host"][host] = devices
        if not out["ib_devices"]:
            out["ib_devices"] = devices
        oob = _OOB.search(rest)
        out["ib_oob"] = out["ib_oob"] or (oob.group(1) if oob else None)
        out["relaxed_ordering"] = "[RO]" in rest
    elif name == "Socket":
        devices = _socket_devices(rest)
        out["socket_devices_by_host"][host] = devices
        if not out["socket_devices"]:
            out["socket_devices"] = devices
    return True


def _read_log_line(host: str, level: str, message: str, out: dict[str, Any]) -> None:
    if level == "WARN":
        out["warnings"].append(message)
        return
    version = _VERSION.match(message)
    if version:
        out["version"] = out["version"] or version.group(1)
        _add_once(out["versions"], version.group(1))
        out["versions_by_host"].setdefault(host, version.group(1))
        return
    using = _USING_NETWORK.match(message)
    if using:
        _add_once(out["networks"], using.group(1))
        return
    if _read_net_line(host, message, out):
        return
    channel = _CHANNEL.match(message)
    if channel:
        out["channels"].append(_channel(channel, host))


def _chosen_net(out: dict[str, Any]) -> str | None:
    """The network NCCL uses: Socket when any rank says so ("Using network"), else the one named; without those
    lines, IB when NET/IB listed devices, else Socket when only NET/Socket did."""
    networks = out["networks"]
    if networks:
        return "Socket" if "Socket" in networks else networks[0]
    if out["ib_devices"]:
        return "IB"
    if "Socket" in out["net_plugins"]:
        return "Socket"
    return out["net_plugins"][0] if out["net_plugins"] else None


def nccl_transport(text: str) -> dict[str, Any]:
    """What the ``NCCL_DEBUG=INFO`` lines of ``text`` say of NCCL's network and channels.

    Returns ``{"version", "versions", "versions_by_host", "net", "networks", "net_plugins", "ib_devices",
    "ib_devices_by_host", "ib_oob", "relaxed_ordering", "ib_no_device", "socket_devices", "socket_devices_by_host",
    "channels", "transports", "net_devices_used", "hosts", "info_lines", "warnings"}``:

    * ``version``: the first ``NCCL version`` (``2.27.7+cuda13.0``), ``versions`` every distinct one,
      ``versions_by_host`` the first each host printed (``''`` without a host prefix): each rank's process prints
      its own library's, so two nodes' libraries are told apart here;
    * ``net``: the network in use (``IB``, ``Socket``, or a plugin's name; None when the log says nothing), see
      :func:`_chosen_net`; ``networks``: every ``Using network`` name; ``net_plugins``: every ``NET/<name> : Using``;
    * ``ib_devices``: ``[{"index", "name", "port", "link_layer"}]`` of the first ``NET/IB : Using`` line, and
      ``ib_devices_by_host`` the same per host (``''`` without a host prefix); ``ib_oob``: the OOB interface and
      address; ``relaxed_ordering``: ``[RO]`` shown; ``ib_no_device``: ``NET/IB : No device found.`` seen;
    * ``socket_devices`` / ``socket_devices_by_host``: ``[{"index", "name", "address"}]`` of ``NET/Socket : Using``;
    * ``channels``: ``[{"host", "channel", "conn", "from_rank", "from_dev", "to_rank", "to_dev", "direction",
      "via", "transport"}]``; ``transports``: the sorted distinct transports (``P2P``, ``SHM``, ``NET/IB``,
      ``NET/Socket``, ``COLLNET/...``); ``net_devices_used``: sorted distinct ``NET/<name>/<dev>`` device indices;
    * ``hosts``: hosts seen in the log prefixes, in order; ``info_lines``: how many NCCL log lines were read;
      ``warnings``: the text of every ``NCCL WARN`` line.
    """
    out: dict[str, Any] = {
        "version": None, "versions": [], "versions_by_host": {}, "net": None, "networks": [], "net_plugins": [],
        "ib_devices": [], "ib_devices_by_host": {}, "ib_oob": None, "relaxed_ordering": None, "ib_no_device": False,
        "socket_devices": [], "socket_devices_by_host": {}, "channels": [], "transports": [],
        "net_devices_used": [], "hosts": [], "info_lines": 0, "warnings": [],
    }
    for host, level, message in _log_lines(text if isinstance(text, str) else str(text)):
        out["info_lines"] += 1
        if host:
            _add_once(out["hosts"], host)
        _read_log_line(host, level, message, out)
    out["net"] = _chosen_net(out)
    out["transports"] = sorted({c["transport"] for c in out["channels"]})
    out["net_devices_used"] = sorted({int(m.group(1)) for m in (_NET_DEV.match(c["via"]) for c in out["channels"])
                                      if m})
    return out


def _reason_socket(transport: dict[str, Any]) -> str | None:
    socket_channels = [c for c in transport["channels"] if c["transport"] == "NET/Socket"]
    if socket_channels:
        return (f"NCCL fell back to sockets: {len(socket_channels)} channel connection(s) via NET/Socket "
                f"(first: {socket_channels[0]['via']})")
    if transport["net"] == "Socket":
        cause = "NET/IB : No device found" if transport["ib_no_device"] else "no NET/IB device listed"
        names = ", ".join(d["name"] for d in transport["socket_devices"]) or "?"
        return (f"NCCL uses the Socket network (NET/Socket on {names}; {cause}): RDMA is not visible to NCCL "
                "(/dev/infiniband not passed to the container, or NCCL_IB_DISABLE/NCCL_NET set?)")
    return None


def _reason_hcas(transport: dict[str, Any], expected: list[str], link_layer: str | None) -> str | None:
    by_host = transport["ib_devices_by_host"] or {"": transport["ib_devices"]}
    for host, devices in by_host.items():
        where = f" on {host}" if host else ""
        listed = {d["name"]: d for d in devices}
        for name in expected:
            device = listed.get(name)
            if device is None:
                return (f"HCA {name} is not in NCCL's NET/IB device list{where} "
                        f"({', '.join(listed) or 'none'}): check NCCL_IB_HCA and the port state")
            if link_layer and device["link_layer"] != link_layer:
                return f"HCA {name}{where} has link layer {device['link_layer']}, not {link_layer}"
    return None


def transport_verdict(transport: dict[str, Any], expect_ib_devices: list[str] | tuple[str, ...] | str | None,
                      link_layer: str | None = "RoCE", require_net_channels: bool = True) -> tuple[bool, str]:
    """(ok, reason) for a pair's NCCL transport, from :func:`nccl_transport`'s result.

    Refuses: no NCCL log at all (NCCL_DEBUG=INFO not set?), any channel via NET/Socket or the Socket network,
    a network other than IB, an expected HCA (``expect_ib_devices``: names, or one comma-separated string) missing
    from any host's ``NET/IB : Using`` line or with another link layer than ``link_layer`` (None: any), and, with
    ``require_net_channels``, no channel via NET/IB at all (the ranks never crossed the link). The reason names
    the cause; when ok, it says what was seen.
    """
    if isinstance(expect_ib_devices, str):
        expected = [name.strip() for name in expect_ib_devices.split(",") if name.strip()]
    else:
        expected = [str(name) for name in (expect_ib_devices or ())]
    if not transport or not transport.get("info_lines"):
        return False, "no NCCL_DEBUG=INFO lines in the output: run with NCCL_DEBUG=INFO to see the transport"
    socket = _reason_socket(transport)
    if socket:
        return False, socket
    if transport["net"] != "IB":
        return False, f"NCCL network is {transport['net'] or 'not shown'}, not IB"
    hcas = _reason_hcas(transport, expected, link_layer)
    if hcas:
        return False, hcas
    net_channels = [c for c in transport["channels"] if c["transport"] == "NET/IB"]
    if require_net_channels and not net_channels:
        seen = ", ".join(transport["transports"]) or "no channel lines"
        return False, f"no channel connection via NET/IB ({seen}): the ranks did not cross the network"
    shown = ", ".join(f"{d['name']}/{d['link_layer']}" for d in transport["ib_devices"]) or "IB"
    return True, f"NET/IB on {shown}; {len(net_channels)} channel connection(s) via NET/IB, none via NET/Socket"


# ---- nccl-tests table


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _half(tokens: list[str], per_iter: bool) -> dict[str, Any]:
    half: dict[str, Any] = {}
    for key, token in zip(_HALF_KEYS, tokens):
        if key == "wrong":
            value = _number(token)
            half[key] = None if value is None else int(value)
        else:
            half[key] = _number(token)
    if per_iter:
        for key, token in zip(_PER_ITER_KEYS, tokens[4:8]):
            half[key] = _number(token)
    return half


def _row(match: re.Match, per_iter: bool, warnings: list[str]) -> dict[str, Any]:
    tokens = match.group("body").split()
    row: dict[str, Any] = {"size_bytes": int(match.group("size")), "count": int(match.group("count")),
                           "type": match.group("type"), "redop": match.group("redop"), "root": int(match.group("root")),
                           "out_of_place": None, "in_place": None, "timestamp": None, "extra": []}
    if len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]) and _CLOCK.match(tokens[-1]):
        row["timestamp"] = f"{tokens[-2]} {tokens[-1]}"
        tokens = tokens[:-2]
    width = 8 if per_iter else 4
    if len(tokens) >= 2 * width:
        row["out_of_place"] = _half(tokens[:width], per_iter)
        row["in_place"] = _half(tokens[width:2 * width], per_iter)
        row["extra"] = tokens[2 * width:]
    elif len(tokens) == width:
        row["in_place"] = _half(tokens, per_iter)
    else:
        warnings.append(f"row of {row['size_bytes']} bytes has {len(tokens)} figures, expected {2 * width}")
    return row


def _table_lines(text: str):
    """The lines of the table with NCCL log lines taken out; a row cut by a log line is put back together."""
    pending = ""
    for raw in text.splitlines():
        match = _LOG_PREFIX.search(raw)
        if match:
            pending += raw[:match.start()]
            continue
        line, pending = pending + raw, ""
        yield line
    if pending:
        yield pending


def _read_comment(line: str, table: dict[str, Any]) -> None:
    for pattern, handler in _COMMENT_READERS:
        match = pattern.match(line)
        if match:
            handler(match, table)
            return


def _read_version(match: re.Match, table: dict[str, Any]) -> None:
    table["nccl_tests_version"] = match.group(1)
    table["nccl_headers"] = int(match.group(2)) if match.group(2) else None
    table["nccl_library"] = int(match.group(3)) if match.group(3) else None


def _read_config(match: re.Match, table: dict[str, Any]) -> None:
    line = match.string
    for key, pattern in _CONFIG_INTS:
        found = pattern.search(line)
        if found:
            table["config"][key] = int(found.group(1))
    step = _STEP.search(line)
    if step:
        table["config"]["step"] = int(step.group(1))
        table["config"]["step_kind"] = step.group(2)


def _read_header(match: re.Match, table: dict[str, Any]) -> None:
    table["time_column"] = match.group("time")
    table["per_iteration"] = "i_min" in match.string


def _read_rank(match: re.Match, table: dict[str, Any]) -> None:
    table["devices"].append({"rank": int(match.group("rank")), "group": int(match.group("group")),
                             "pid": int(match.group("pid")), "host": match.group("host"),
                             "device": int(match.group("device")), "bus": match.group("bus"),
                             "name": match.group("name")})


def _read_bounds(match: re.Match, table: dict[str, Any]) -> None:
    table["out_of_bounds"] = int(match.group(1))
    table["out_of_bounds_ok"] = int(match.group(1)) == 0


def _read_avg(match: re.Match, table: dict[str, Any]) -> None:
    table["avg_busbw_gbs"] = _number(match.group(1))
    table["avg_busbw_check"] = match.group(2)


_COMMENT_READERS = (
    (_TESTS_VERSION, _read_version),
    (_STARTING, lambda m, t: t.__setitem__("program", m.group(1))),
    (_CONCLUDED, lambda m, t: t.__setitem__("concluded", True)),
    (re.compile(r"^#\s*nThread\b"), _read_config),
    (_HEADER, _read_header),
    (_RANK, _read_rank),
    (_OUT_OF_BOUNDS, _read_bounds),
    (_AVG_BUSBW, _read_avg),
)


def looks_like_nccl_tests(text: str) -> bool:
    return "Avg bus bandwidth" in text or bool(re.search(r"(?m)^#\s+size\s+count\s+type\s+redop", text))


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """The nccl-tests result table of ``text`` (stdout of all_reduce_perf and its siblings); never raises.

    Returns ``{"program", "nccl_tests_version", "nccl_headers", "nccl_library", "config", "devices",
    "time_column", "per_iteration", "rows", "out_of_bounds", "out_of_bounds_ok", "avg_busbw_gbs",
    "avg_busbw_check", "concluded", "warnings"}``:

    * ``program``: ``all_reduce_perf`` from ``# Collective test starting:`` (2.17+), else None;
    * ``config``: ints read from the ``# nThread`` line (``nthread ngpus min_bytes max_bytes step step_kind
      warmup_iters iters agg_iters validation graph unalign``, those present); ``devices``: ``[{"rank", "group",
      "pid", "host", "device", "bus", "name"}]`` from the ``#  Rank`` lines;
    * ``time_column``: ``time`` or ``cputime``; ``per_iteration``: the ``-I 1`` columns are there;
    * ``rows``: ``[{"size_bytes", "count", "type", "redop", "root", "out_of_place", "in_place", "timestamp",
      "extra"}]`` where each half is ``{"time_us", "algbw_gbs", "busbw_gbs", "wrong"}`` (``wrong`` None for
      ``N/A``; with ``-I 1`` also ``i_min_us i_max_us i_p99_us i_cv_pct``), or None when absent;
    * ``out_of_bounds`` (int) and ``out_of_bounds_ok``; ``avg_busbw_gbs`` (float) and ``avg_busbw_check``
      (``OK``/``FAILED`` with ``-c``'s check, else None); ``concluded``: the closing line was there;
    * ``warnings``: what looked wrong (no table, a short row, a missing summary line).
    """
    table: dict[str, Any] = {
        "program": None, "nccl_tests_version": None, "nccl_headers": None, "nccl_library": None, "config": {},
        "devices": [], "time_column": None, "per_iteration": False, "rows": [], "out_of_bounds": None,
        "out_of_bounds_ok": None, "avg_busbw_gbs": None, "avg_busbw_check": None, "concluded": False,
        "warnings": [],
    }
    for line in _table_lines(text if isinstance(text, str) else str(text)):
        if line.lstrip().startswith("#"):
            _read_comment(line.strip(), table)
            continue
        row = _ROW.match(line)
        if row and table["time_column"] is not None:
            table["rows"].append(_row(row, table["per_iteration"], table["warnings"]))
    if not table["rows"]:
        table["warnings"].append("no nccl-tests result rows")
    if table["rows"] and table["avg_busbw_gbs"] is None:
        table["warnings"].append("no '# Avg bus bandwidth' line: the test did not finish?")
    return table


def large_message_busbw(table: dict[str, Any], min_size_bytes: int = GIB) -> float | None:
    """The lowest busbw (GB/s, out-of-place and in-place alike) over the rows of at least ``min_size_bytes``: the
    figure a floor "busbw >= X at >= 1 GiB" is held to; None when no such row has a figure."""
    values = [half["busbw_gbs"] for row in table.get("rows", []) if row["size_bytes"] >= min_size_bytes
              for half in (row["out_of_place"], row["in_place"]) if half and half.get("busbw_gbs") is not None]
    return min(values) if values else None
