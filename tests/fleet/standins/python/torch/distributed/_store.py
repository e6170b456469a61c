"""The rendezvous of ``init_process_group`` with env:// and the wire the stand-in's collectives cross: a real TCP
store on MASTER_ADDR:MASTER_PORT, every rank connected to rank 0, which gathers each collective's contributions
and hands every rank the whole list (a star; NCCL's ring is only modelled, in _fabric.py).

As PyTorch 2.9's c10d TCPStore (torch/distributed/rendezvous.py ``_create_c10d_store``: rank 0 is the master;
torch/csrc/distributed/c10d/TCPStore.cpp and socket.cpp): the master listens on every local address (IPv6 dual
stack where there is one) and waits until every rank has joined, else ``DistStoreError: Timed out after N seconds
waiting for clients. k/n clients joined.`` (TCPStore::waitForWorkers, the master counting itself); a client retries
its connection with a growing back-off until the timeout, else ``DistNetworkError: The client socket has timed out
after Nms while trying to connect to (host, port).`` (SocketConnectOp::throwTimeoutError). A collective whose peers
do not answer within the process group's timeout fails as ProcessGroupNCCL's watchdog says it; a peer gone fails as
NCCL's ncclRemoteError. Every wait is bounded by the timeout.

Messages are JSON, each preceded by its length (4 bytes, network order).
"""

from __future__ import annotations

import errno
import json
import socket
import struct
import time

from .. import _fabric

_LENGTH = struct.Struct("!I")
_MAX_MESSAGE = 1 << 20


class DistError(RuntimeError):
    """torch.distributed's error classes (torch/distributed/__init__.py), RuntimeErrors as c10d raises them."""


class DistBackendError(DistError):
    pass


class DistNetworkError(DistError):
    pass


class DistStoreError(DistError):
    pass


def backend_error(what: str, kind: str, last: str) -> DistBackendError:
    """ProcessGroupNCCL's text for a failed NCCL call (torch/csrc/distributed/c10d/NCCLUtils.hpp C10D_NCCL_CHECK)."""
    nccl_version = _fabric.version().split("+")[0]
    return DistBackendError(f"NCCL error in: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, {what}, NCCL version "
                            f"{nccl_version}\n{kind}\nLast error:\n{last}")


def _remote_gone(peer: int, why: str) -> DistBackendError:
    return backend_error("remote process exited or there was a network error", "ncclRemoteError: A call failed "
                         "possibly due to a network error or a remote process exiting prematurely.",
                         f"rank {peer}: {why}")


def _send(sock: socket.socket, message, peer: int) -> None:
    data = json.dumps(message).encode()
    try:
        sock.settimeout(None)
        sock.sendall(_LENGTH.pack(len(data)) + data)
    except OSError as exc:
        raise _remote_gone(peer, str(exc)) from exc


def _recv_exactly(sock: socket.socket, size: int, deadline: float, peer: int, on_timeout) -> bytes:
    data = b""
    while len(data) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise on_timeout()
        sock.settimeout(min(remaining, 1.0))
        try:
            chunk = sock.recv(size - len(data))
        except socket.timeout:  # noqa: UP041 - Python 3.8/3.9's socket.timeout is no TimeoutError
            continue
        except OSError as exc:
            raise _remote_gone(peer, str(exc)) from exc
        if not chunk:
            raise _remote_gone(peer, "connection closed")
        data += chunk
    return data


def _recv(sock: socket.socket, deadline: float, peer: int, on_timeout):
    (size,) = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size, deadline, peer, on_timeout))
    if size > _MAX_MESSAGE:
        raise _remote_gone(peer, f"a message of {size} bytes is not this stand-in's")
    return json.loads(_recv_exactly(sock, size, deadline, peer, on_timeout).decode())


def _listen(port: int) -> socket.socket:
    attempts = [(socket.AF_INET6, "[::]")] if socket.has_dualstack_ipv6() else []
    attempts.append((socket.AF_INET, "0.0.0.0"))
    failures = []
    for family, shown in attempts:
        try:
            return socket.create_server(("", port), family=family, backlog=128,
                                        dualstack_ipv6=family == socket.AF_INET6)
        except OSError as exc:
            failures.append(f"The server socket has failed to bind to {shown}:{port} (errno: {exc.errno} - "
                            f"{exc.strerror}).")
            if exc.errno == errno.EADDRINUSE:
                break
    raise DistNetworkError("The server socket has failed to listen on any local network address. " + " ".join(failures))


class TCPStore:
    """Rank 0 serves, the other ranks connect; ``exchange`` is an all-gather of one small message per rank."""

    def __init__(self, host: str, port: int, rank: int, world: int, timeout_s: float) -> None:
        self.host, self.rank, self.world = host, rank, world
        self._server, self._peers, self._master = None, {}, None
        deadline = time.monotonic() + timeout_s
        if rank == 0:
            self._serve(port, deadline)
        else:
            self._connect(host, port, deadline, timeout_s)

    def _serve(self, port: int, deadline: float) -> None:
        self._server, started = _listen(port), time.monotonic()
        while len(self._peers) < self.world - 1:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise DistStoreError(f"Timed out after {int(time.monotonic() - started)} seconds waiting for "
                                     f"clients. {1 + len(self._peers)}/{self.world} clients joined.")
            self._server.settimeout(min(remaining, 1.0))
            try:
                conn, _ = self._server.accept()
            except socket.timeout:  # noqa: UP041 - Python 3.8/3.9's socket.timeout is no TimeoutError
                continue
            self._admit(conn, min(deadline, time.monotonic() + 5.0))

    def _admit(self, conn: socket.socket, deadline: float) -> None:
        """Keep a connection that says which rank it is (a rank of this world, not yet joined); drop others."""
        try:
            hello = _recv(conn, deadline, -1, lambda: DistStoreError("no hello"))
            rank = int(hello["rank"])
            if hello.get("world") == self.world and 0 < rank < self.world and rank not in self._peers:
                self._peers[rank] = conn
                return
        except (DistError, ValueError, KeyError, TypeError):
            pass
        conn.close()

    def _connect(self, host: str, port: int, deadline: float, timeout_s: float) -> None:
        delay = 0.05
        while self._master is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DistNetworkError(f"The client socket has timed out after {int(timeout_s * 1000)}ms while "
                                       f"trying to connect to ({host}, {port}).")
            try:
                self._master = socket.create_connection((host, port), timeout=min(remaining, 5.0))
            except OSError:
                time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                delay = min(delay * 2, 1.0)
        _send(self._master, {"rank": self.rank, "world": self.world}, 0)

    def local_addr(self) -> str:
        """The address this rank reaches the others from (what NCCL's bootstrap would show)."""
        sock = self._master or next(iter(self._peers.values()), None)
        if sock is None:
            return self.host
        addr = sock.getsockname()[0]
        return addr[len("::ffff:"):] if addr.startswith("::ffff:") else addr

    def exchange(self, message, timeout_s: float, work: str) -> list:
        """Every rank's ``message``, by rank, once every rank has sent its own (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s

        def timed_out() -> DistBackendError:
            return DistBackendError(f"[Rank {self.rank}] Watchdog caught collective operation timeout: {work} ran "
                                    f"for {int(timeout_s * 1000)} milliseconds before timing out.")

        if self.rank != 0:
            _send(self._master, message, 0)
            return _recv(self._master, deadline, 0, timed_out)
        gathered = [message] + [_recv(self._peers[r], deadline, r, timed_out) for r in range(1, self.world)]
        for r in range(1, self.world):
            _send(self._peers[r], gathered, r)
        return gathered

    def close(self) -> None:
        for sock in [self._master, self._server, *self._peers.values()]:
            if sock is not None:
                sock.close()
        self._server, self._peers, self._master = None, {}, None
