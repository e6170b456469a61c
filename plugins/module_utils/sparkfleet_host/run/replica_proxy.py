# -*- coding: utf-8 -*-
"""A round-robin reverse proxy on the head host's loopback, in front of the replicas of one serving workload.

Issue 36 (topology as a factor): "two TP=1 replicas" is one serving run on a cluster whose hosts each run a full
OpenAI-compatible server (llama.cpp's llama-server, vLLM, ...). The load generator (llama-benchy 0.4.0) takes one
``--base-url``; the client is pointed at this proxy, which hands the requests to the replicas in turn::

    with ReplicaProxy(["http://10.0.0.1:8000", "http://10.0.0.2:8000"]) as proxy:
        run_client(base_url=proxy.url + "/v1")   # proxy.url: "http://127.0.0.1:<ephemeral port>"
        split = proxy.counts                      # {"http://10.0.0.1:8000": 40, "http://10.0.0.2:8000": 40}

API:

* ``ReplicaProxy(upstreams, host="127.0.0.1", port=0, connect_timeout_s=10.0, read_timeout_s=600.0,
  join_s=10.0)``: each upstream an ``http://HOST:PORT`` base, distinct (a trailing slash is dropped; a path is
  refused: the client's path is forwarded as it is). ``start()`` (returns the proxy) / ``stop()``, or use it as a
  context manager. ``url``: the base the client is given. ``upstreams``: the list, in order. ``counts``: a
  snapshot ``{upstream: completions forwarded}``; ``failures``: ``{upstream: requests answered 502/504 by the
  proxy}``; ``reset_counts()`` zeroes both (for instance after the client's warm-up).

Routing:

* **Completions** (every POST: /v1/chat/completions, /v1/completions, llama-server's /completion, embeddings)
  go to the upstreams in strict round-robin order: one counter under a lock, request *i* to upstream
  ``i mod n``, whatever the path, so N completions split N/n each (± 1). Only POSTs advance that counter and
  only POSTs are counted in ``counts``: a status probe interleaved with the load never shifts the split.
* **GET /health and GET /v1/models** (any query string) are answered by the *first* upstream. The replicas serve
  the same model, so its answer is the answer; llama-benchy's ``--latency-mode api`` times ``GET /models`` to
  subtract the network's latency from its TTFT, and a fixed replica keeps that figure one path's (proxy to
  replica 0) rather than a mix. It also means ``GET /health`` through the proxy says nothing about the other
  replicas: the run checks each replica's own /health (``proxy.upstreams``).
* **Any other request** (other GETs, HEAD, PUT, DELETE, ...) goes round-robin on a second counter of its own.

Forwarding: the method, path and query, the body and the headers, less the hop-by-hop ones (RFC 9110 7.6.1:
Connection and the headers it names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade) and Expect
(http.server answers 100-continue itself); Host is the upstream's. A request body comes with Content-Length or
chunked (read whole, then sent with a Content-Length). One fresh upstream connection per request (servers such
as the stand-ins close a stream's connection; a fresh connection is never a stale one), with TCP_NODELAY.

Streaming: the upstream's response is relayed as it arrives, never buffered whole: ``HTTPResponse.read1`` returns
what one receive brings (http.client undoes the upstream's chunked encoding, one upstream chunk at most), and each
piece is written to the client at once, in one send, with TCP_NODELAY on both sockets, so each Server-Sent Event
of a ``"stream": true`` completion reaches the client when the replica sends it. Framing to the client:

* upstream Content-Length: the same Content-Length, the body relayed in pieces;
* no Content-Length (chunked, or delimited by closing the connection as the stand-ins do): the proxy re-chunks,
  ``Transfer-Encoding: chunked`` with one chunk per piece and the closing ``0`` chunk at the end. The client's
  connection stays open for its next request (aiohttp's pool, which llama-benchy uses, keeps it; http.client
  reads it too), and a replica that dies mid-stream is seen as a truncated body (no closing chunk; aiohttp
  raises ClientPayloadError), not as a short but complete answer, which closing the connection would give;
* an HTTP/1.0 client (no chunked encoding): the body ends when the proxy closes the connection.

Errors: no retries on another replica (a retry would hide a dead replica and skew the split). An upstream that
refuses the connection (or any connection/send error) is answered ``502``; one that does not connect or answer
within the timeouts, ``504``; both with an OpenAI-shaped JSON error naming the upstream::

    {"error": {"message": "replica http://10.0.0.2:8000 unreachable: [Errno 111] Connection refused",
               "type": "bad_gateway", "code": 502, "upstream": "http://10.0.0.2:8000"}}

An upstream that fails once the response has begun cannot be given a status any more: the client's connection is
closed without the closing chunk.

Bounded: ``connect_timeout_s`` bounds each upstream connect, ``read_timeout_s`` each wait for upstream bytes (a
long prefill before the first token included) and each wait for a client's next request on a kept-alive
connection. ``stop()`` stops accepting, closes the listening socket, shuts the open client and upstream sockets
(an idle keep-alive connection or a stream in flight ends there) and joins every thread it started (the serving
thread and one per client connection, all named ``sparkfleet-proxy...``) within ``join_s`` (RuntimeError naming
any still alive after it). A second ``stop()`` does nothing.

Overhead: one loopback hop, one upstream connect per request and a copy of each piece. Against one stand-in on
the project's shared 2-core machine (``benchmarks/replica_proxy_overhead.py``, BENCHMARKS.md "Replica proxy
overhead"): about 1-2 ms added to the time to first token, 1-4 ms to a 32-token stream, 2-3 ms of CPU per request.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import socket
import threading
import time
import urllib.parse

#: Headers that describe one connection, not the message (RFC 9110 7.6.1), plus Expect (http.server answers
#: 100-continue to the client itself) and the framing headers the proxy sets anew.
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "expect", "content-length"))
#: GET paths answered by the first upstream (see the module docstring).
PINNED = frozenset(("/health", "/v1/models"))
#: The most bytes relayed per read.
PIECE = 65536
#: The largest request body accepted (a long-context prompt is a few MiB).
MAX_BODY = 64 << 20


class UpstreamError(Exception):
    """The proxy could not get a response from an upstream: ``status`` 502 or 504."""

    def __init__(self, upstream: str, status: int, detail: str) -> None:
        super().__init__("replica %s %s" % (upstream, detail))
        self.upstream = upstream
        self.status = status


def parse_upstream(url: str) -> tuple[str, int]:
    """(host, port) of an ``http://HOST:PORT`` base; ValueError for anything else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path or parts.query or parts.fragment:
        raise ValueError("replica upstream %r is not http://HOST:PORT" % url)
    return parts.hostname, parts.port or 80


def connection_headers(headers) -> set:
    """Lower-case names of the hop-by-hop headers of a message: the fixed ones and those its Connection names."""
    named = set(HOP_BY_HOP)
    for value in headers.get_all("connection") or []:
        named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    """One client connection; ``server.proxy`` is the ReplicaProxy."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "sparkfleet-replica-proxy"

    def setup(self) -> None:
        self.timeout = self.server.proxy.read_timeout_s  # idle keep-alive connections end
        super().setup()

    def log_message(self, *args) -> None:  # the client's requests are not the run's output
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self.forward()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET  # noqa: N815

    # ---------------------------------------------------------------- request

    def request_body(self) -> bytes | None:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            return self.chunked_body()
        length = self.headers.get("content-length")
        if length is None:
            return None
        size = int(length)
        if size < 0 or size > MAX_BODY:
            raise ValueError("request body of %d bytes" % size)
        return self.rfile.read(size)

    def chunked_body(self) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            size = int(line.split(b";", 1)[0].strip() or b"x", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise ValueError("request body over %d bytes" % MAX_BODY)
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def forward(self) -> None:
        proxy = self.server.proxy
        try:
            body = self.request_body()
        except ValueError as exc:
            self.close_connection = True
            self.send_json(400, {"error": {"message": "bad request body: %s" % exc, "type": "bad_request",
                                           "code": 400}})
            return
        except OSError:  # the client went away or stalled past the timeout mid-body
            self.close_connection = True
            return
        upstream = proxy.route(self.command, self.path)
        try:
            conn, response = proxy.open(upstream, self.command, self.path, self.upstream_headers(upstream, body),
                                        body)
        except UpstreamError as exc:
            proxy.count_failure(upstream)
            self.send_json(exc.status, {"error": {"message": str(exc), "type": "bad_gateway" if exc.status == 502
                                                  else "gateway_timeout", "code": exc.status,
                                                  "upstream": upstream}})
            return
        if self.command == "POST":
            proxy.count_completion(upstream)
        try:
            self.relay(response)
        except (OSError, http.client.HTTPException):
            self.close_connection = True  # the client or the upstream went away mid-response
        finally:
            proxy.release(conn)

    def upstream_headers(self, upstream: str, body: bytes | None) -> list:
        skip = connection_headers(self.headers) | {"host"}
        headers = [(name, value) for name, value in self.headers.items() if name.lower() not in skip]
        headers.append(("Host", urllib.parse.urlsplit(upstream).netloc))
        if body is not None or self.command in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body or b""))))
        return headers

    # ---------------------------------------------------------------- response

    def relay(self, response: http.client.HTTPResponse) -> None:
        skip = connection_headers(response.msg)
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in skip:
                self.send_header(name, value)
        length = response.getheader("content-length")
        bodiless = self.command == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        chunked = False
        if bodiless or (length is not None and not response.chunked):
            if length is not None:
                self.send_header("Content-Length", length)
        elif self.request_version == "HTTP/1.0":
            self.close_connection = True
        else:
            chunked = True
            self.send_header("Transfer-Encoding", "chunked")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if bodiless:
            return
        while True:
            piece = response.read1(PIECE)
            if not piece:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            self.wfile.flush()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        if length is not None and not response.chunked and response.length:  # the upstream's body fell short
            self.close_connection = True

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
            self.wfile.flush()


class ProxyServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer whose connection threads and sockets the proxy tracks, to end and join them."""

    daemon_threads = True
    allow_reuse_address = True

    def process_request(self, request, client_address) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  name="sparkfleet-proxy-conn", daemon=True)
        with self.proxy.lock:
            if self.proxy.stopping:
                self.shutdown_request(request)
                return
            self.proxy.threads.add(thread)
            self.proxy.sockets.add(request)
        thread.start()

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.proxy.lock:
                self.proxy.threads.discard(threading.current_thread())
                self.proxy.sockets.discard(request)


class ReplicaProxy:
    """The round-robin reverse proxy; see the module docstring. A context manager."""

    def __init__(self, upstreams: list[str], host: str = "127.0.0.1", port: int = 0,
                 connect_timeout_s: float = 10.0, read_timeout_s: float = 600.0, join_s: float = 10.0) -> None:
        if not upstreams:
            raise ValueError("a replica proxy needs at least one upstream")
        self.upstreams = [url.rstrip("/") for url in upstreams]
        if len(set(self.upstreams)) != len(self.upstreams):
            raise ValueError("replica upstreams repeat: %s" % self.upstreams)
        self.addresses = [parse_upstream(url) for url in self.upstreams]
        self.host, self.port = host, port
        self.connect_timeout_s, self.read_timeout_s, self.join_s = connect_timeout_s, read_timeout_s, join_s
        self.lock = threading.Lock()
        self.next_completion = 0
        self.next_other = 0
        self.completions = dict.fromkeys(self.upstreams, 0)
        self.errors = dict.fromkeys(self.upstreams, 0)
        self.threads: set = set()
        self.sockets: set = set()
        self.connections: set = set()
        self.stopping = False
        self.httpd: ProxyServer | None = None
        self.serve_thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        if self.httpd is None:
            raise RuntimeError("the replica proxy is not started")
        host, port = self.httpd.server_address[:2]
        return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)

    def start(self) -> ReplicaProxy:
        if self.httpd is not None:
            raise RuntimeError("the replica proxy is already started")
        self.stopping = False
        httpd = ProxyServer((self.host, self.port), ProxyHandler)
        httpd.proxy = self
        self.httpd = httpd
        self.serve_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                             name="sparkfleet-proxy", daemon=True)
        self.serve_thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close the listening socket, end open connections and join every thread."""
        httpd, self.httpd = self.httpd, None
        if httpd is None:
            return
        with self.lock:
            self.stopping = True
        httpd.shutdown()
        httpd.server_close()
        self.serve_thread.join(self.join_s)
        with self.lock:
            open_sockets = list(self.sockets) + [conn.sock for conn in self.connections if conn.sock is not None]
            threads = list(self.threads)
        for sock in open_sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + self.join_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in threads + [self.serve_thread] if t.is_alive()]
        if left:
            raise RuntimeError("replica proxy threads still running after %.0f s: %s" % (self.join_s, left))

    def __enter__(self) -> ReplicaProxy:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    # ---------------------------------------------------------------- routing and counts

    def route(self, method: str, path: str) -> str:
        """The upstream that serves this request (see the module docstring)."""
        with self.lock:
            if method == "POST":
                index = self.next_completion
                self.next_completion += 1
            elif method == "GET" and urllib.parse.urlsplit(path).path.rstrip("/") in PINNED:
                index = 0
            else:
                index = self.next_other
                self.next_other += 1
        return self.upstreams[index % len(self.upstreams)]

    @property
    def counts(self) -> dict[str, int]:
        """Completions forwarded to each upstream so far: ``{upstream: n}`` in the upstreams' order."""
        with self.lock:
            return dict(self.completions)

    @property
    def failures(self) -> dict[str, int]:
        """Requests the proxy answered 502/504 for each upstream so far."""
        with self.lock:
            return dict(self.errors)

    def reset_counts(self) -> None:
        with self.lock:
            self.completions = dict.fromkeys(self.upstreams, 0)
            self.errors = dict.fromkeys(self.upstreams, 0)

    def count_completion(self, upstream: str) -> None:
        with self.lock:
            self.completions[upstream] += 1

    def count_failure(self, upstream: str) -> None:
        with self.lock:
            self.errors[upstream] += 1

    # ---------------------------------------------------------------- upstream connections

    def open(self, upstream: str, method: str, path: str, headers: list, body: bytes | None):
        """(connection, response) of one request sent to the upstream; UpstreamError when none comes."""
        host, port = self.addresses[self.upstreams.index(upstream)]
        conn = http.client.HTTPConnection(host, port, timeout=self.connect_timeout_s)
        with self.lock:
            if self.stopping:
                raise UpstreamError(upstream, 502, "not tried: the proxy is stopping")
            self.connections.add(conn)
        try:
            conn.connect()
            conn.sock.settimeout(self.read_timeout_s)
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(body)
            return conn, conn.getresponse()
        except socket.timeout as exc:
            self.release(conn)
            raise UpstreamError(upstream, 504, "did not answer within the timeout: %s" % (exc or "timed out")) from exc
        except (OSError, http.client.HTTPException) as exc:
            self.release(conn)
            raise UpstreamError(upstream, 502, "unreachable: %s" % (exc or type(exc).__name__)) from exc

    def release(self, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            self.connections.discard(conn)
        conn.close()
