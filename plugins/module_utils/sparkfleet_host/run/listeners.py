# -*- coding: utf-8 -*-
"""Who listens on a TCP port of this host: the LISTEN sockets of /proc/net/tcp{,6} and the processes holding them.

A serving run measures only the server it started (issue 33). Before the launch, :func:`port_taken` says why the
server could not listen on 127.0.0.1:PORT (a bind test like the server's own), naming the process that holds the
port where /proc shows it; once the server answers, :func:`owner` says whether every socket listening there, that
a connection to 127.0.0.1:PORT can reach, belongs to it: ``verified``, ``foreign`` (the run fails, naming the
holder) or ``unverified`` (the socket is not in this network namespace, or its holder cannot be read: recorded
as such, the run goes on). Process names come from procstat (the one /proc/PID/stat reader).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
from typing import NamedTuple, Optional

from ..sensors import procstat

#: /proc/net/tcp's state of a listening socket (include/net/tcp_states.h TCP_LISTEN).
LISTEN = "0A"
#: Local addresses whose listener a connection to 127.0.0.1 can reach (:: also takes IPv4 unless IPV6_V6ONLY,
#: which Linux leaves off by default).
REACHES_LOOPBACK = frozenset(("127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"))
#: How much of a holder's command line a reason quotes.
CMDLINE_CHARS = 160


class Listener(NamedTuple):
    address: str
    port: int
    inode: int


def _address(hex_text: str) -> str:
    """A /proc/net/tcp{,6} address: 32-bit words, each in the host's byte order."""
    raw = bytes.fromhex(hex_text)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def parse(text: str) -> list:
    """The LISTEN entries of a /proc/net/tcp or tcp6 text: [Listener, ...] (malformed lines left out)."""
    out = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN or ":" not in fields[1]:
            continue
        addr, _, port = fields[1].rpartition(":")
        try:
            out.append(Listener(_address(addr), int(port, 16), int(fields[9])))
        except ValueError:
            continue
    return out


def listening(port: int, proc: str = "/proc") -> list:
    """This network namespace's sockets listening on ``port`` that a connection to 127.0.0.1 can reach."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name), encoding="ascii", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        found += [entry for entry in parse(text) if entry.port == port and entry.address in REACHES_LOOPBACK]
    return found


def sockets_of(pid: int, proc: str = "/proc") -> Optional[set]:
    """The socket inodes among the process's open files; None when its fd directory cannot be read (gone, or
    another user's and this job is not root)."""
    base = os.path.join(proc, str(pid), "fd")
    try:
        names = os.listdir(base)
    except OSError:
        return None
    inodes = set()
    for name in names:
        try:
            target = os.readlink(os.path.join(base, name))
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[8:-1]))
    return inodes


def holders(inodes, proc: str = "/proc", pids=None):
    """({inode: [pid, ...]} of the processes (``pids``, else all) holding those sockets, whether every process
    looked at could be read)."""
    inodes, found, complete = set(inodes), {}, True
    for pid in procstat.pids(proc) if pids is None else pids:
        held = sockets_of(pid, proc)
        if held is None:
            complete = complete and not os.path.isdir(os.path.join(proc, str(pid)))  # gone meanwhile: fine
            continue
        for inode in held & inodes:
            found.setdefault(inode, []).append(pid)
    return found, complete


def cmdline(pid: int, proc: str = "/proc") -> list:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def describe(pid: int, proc: str = "/proc") -> dict:
    """{pid, comm, cmdline} of a process, as a reason names it."""
    stat = procstat.read(pid, proc)
    return {"pid": pid, "comm": stat.comm if stat else None, "cmdline": " ".join(cmdline(pid, proc))[:CMDLINE_CHARS]}


def text(holder: dict) -> str:
    what = holder.get("cmdline") or holder.get("comm") or "?"
    return "pid %d (%s)" % (holder["pid"], what)


def bind_error(port: int, host: str = "127.0.0.1") -> Optional[OSError]:
    """The error of binding ``host:port`` as a server does (SO_REUSEADDR: a closed connection's TIME_WAIT does
    not count, a listener does), or None when it binds."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def port_taken(port: int, host: str = "127.0.0.1", proc: str = "/proc") -> Optional[str]:
    """Why a server cannot listen on ``host:port`` now (None when it can): the port and, where /proc shows it,
    the process that holds it."""
    error = bind_error(port, host)
    if error is None:
        return None
    if error.errno != errno.EADDRINUSE:
        return "port %d on %s cannot be bound: %s" % (port, host, error.strerror or error)
    sockets = listening(port, proc)
    found, _ = holders([s.inode for s in sockets], proc) if sockets else ({}, True)
    named = [describe(pid, proc) for inode in sorted(found) for pid in found[inode]]
    if named:
        who = ", by " + ", ".join("%s listening on %s" % (text(h), _where(sockets, found, h["pid"])) for h in named)
    elif sockets:
        who = ", by a process this job cannot see (%s: its /proc/PID/fd is not readable)" % ", ".join(
            "%s:%d" % (s.address, s.port) for s in sockets)
    else:
        who = (" (no socket this host's /proc/net/tcp{,6} shows listens there: a server in another network "
               "namespace, or a connection still closing)")
    return ("port %d on %s is already in use%s: sparkfleet measures only the server it starts; stop that "
            "server or give the workload another port" % (port, host, who))


def _where(sockets, found, pid) -> str:
    return ", ".join(sorted({"%s:%d" % (s.address, s.port) for s in sockets if pid in found.get(s.inode, ())}))


def owner(port: int, ours, proc: str = "/proc", accept=None) -> dict:
    """Whether the sockets listening on ``port`` (those a connection to 127.0.0.1 reaches) are held by ``ours``
    (the started server's pids) or by a process ``accept(holder)`` vouches for (the docker-proxy of its
    container): {"status": "verified" | "foreign" | "unverified", "detail", "holders"}."""
    sockets = listening(port, proc)
    if not sockets:
        return {"status": "unverified", "holders": [],
                "detail": "no socket listens on port %d in this host's /proc/net/tcp{,6}: the server's is in "
                          "another network namespace" % port}
    inodes = {s.inode for s in sockets}
    mine, mine_complete = holders(inodes, proc, pids=sorted(set(ours)))
    others = holders(inodes - set(mine), proc)[0] if inodes - set(mine) else {}
    foreign, vouched, unknown = [], [], []
    for sock in sockets:
        if sock.inode in mine:
            continue
        pids = others.get(sock.inode)
        if not pids:
            unknown.append(sock)
            continue
        # a socket is shared by every process holding it (dockerd may keep the one its docker-proxy serves)
        held = [describe(pid, proc) for pid in pids]
        (vouched if accept is not None and any(accept(h) for h in held) else foreign).extend(held)
    listed = [describe(pid, proc) for inode in sorted(mine) for pid in mine[inode]] + vouched + foreign
    if foreign:
        return {"status": "foreign", "holders": listed,
                "detail": "the server answering on 127.0.0.1:%d is not the one sparkfleet started: %s listens "
                          "there" % (port, ", ".join(text(h) for h in foreign))}
    if unknown and mine_complete:  # every process of the server read: the socket is none of theirs
        return {"status": "foreign", "holders": listed,
                "detail": "the server answering on 127.0.0.1:%d is not the one sparkfleet started: a socket on "
                          "%s is held by no process this job can see" % (
                              port, ", ".join("%s:%d" % (s.address, s.port) for s in unknown))}
    if unknown:
        return {"status": "unverified", "holders": listed,
                "detail": "the holder of %s could not be read (a process whose /proc/PID/fd this job cannot "
                          "open)" % ", ".join("%s:%d" % (s.address, s.port) for s in unknown)}
    how = " (through %s)" % ", ".join(text(h) for h in vouched) if vouched else ""
    return {"status": "verified", "holders": listed,
            "detail": "every socket listening on port %d is the started server's%s" % (port, how)}
