"""The replica proxy (run/replica_proxy.py) in front of two real OpenAI stand-ins (tests/fleet/standins/vllm) on
127.0.0.1: streaming relayed chunk by chunk, strict round-robin of completions, 502 naming a dead replica, no
retry, and no thread left after stop()."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _ansible_modules import STANDINS
from llamacpp import free_port, wait_ready

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.replica_proxy import ReplicaProxy

#: The stand-ins' decode rate: one SSE chunk every 40 ms.
DECODE_TOK_S = 25.0
STEP_S = 1.0 / DECODE_TOK_S
COMPLETION = "POST /v1/chat/completions"


class Replica:
    """One stand-in vLLM server on 127.0.0.1 (its access log on stdout, in a file)."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
        env.update(PYTHONPATH=str(STANDINS), SPARKFLEET_FAKE_STARTUP_S="0.05",
                   SPARKFLEET_FAKE_DECODE_TOK_S=str(DECODE_TOK_S))
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, str(STANDINS / "vllm"), "serve", "tiny", "--host",
                                          "127.0.0.1", "--port", str(self.port)], stdout=out,
                                         stderr=subprocess.STDOUT, env=env)
        try:
            wait_ready(self.proc, self.port, self.log, timeout=30)
        except RuntimeError:
            self.stop()
            raise

    def completions(self) -> int:
        """Chat completions this replica logged (its own view of the split)."""
        return self.log.read_text().count(COMPLETION)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replicas")
    started = []
    try:
        for name in ("a", "b"):
            started.append(Replica(tmp, name))
        yield started
    finally:
        for replica in started:
            replica.stop()


def proxy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("sparkfleet-proxy")]


def payload(max_tokens: int = 8, **extra) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Tell me about the sea."}],
                       "max_tokens": max_tokens, "ignore_eos": True, "stream": True, **extra}).encode()


def stream(base: str, max_tokens: int = 8) -> list[tuple[float, str]]:
    """(arrival time, data) of each SSE event of one streaming completion, read as it arrives (http.client)."""
    host, port = base.rsplit("/", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=payload(max_tokens),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
        events, buffer = [], b""
        for _ in range(10000):
            piece = response.read1(65536)
            if not piece:
                break
            now = time.monotonic()
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                events.append((now, event.decode()[len("data: "):]))
        return events
    finally:
        conn.close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_streaming_chunks_arrive_as_the_replica_sends_them(replicas):
    with ReplicaProxy([r.url for r in replicas]) as proxy:
        assert proxy.url.startswith("http://127.0.0.1:")
        events = stream(proxy.url, max_tokens=10)
        assert proxy_threads()
    assert events[-1][1] == "[DONE]"
    tokens = [(t, json.loads(e)) for t, e in events[:-1]]
    content = [t for t, chunk in tokens if chunk["choices"] and chunk["choices"][0]["delta"].get("content")]
    assert len(content) == 10
    assert not proxy_threads()


def _held_stream_upstream(server: socket.socket, released: threading.Event, seen: dict) -> None:
    """A replica that sends its first SSE event, then holds the rest until ``released`` (at most 30 s): the
    client can only read that event before the end if the proxy relays as it receives."""
    conn, _ = server.accept()
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                     b'data: {"first": true}\n\n')
        seen["released_by_client"] = released.wait(30)
        conn.sendall(b"data: [DONE]\n\n")


def test_a_chunk_reaches_the_client_while_the_replica_still_holds_the_rest():
    # causal, not timed: the replica sends the rest only once the client has read the first event through the
    # proxy, so a proxy that buffered to the end would leave the client waiting until the replica gave up
    released, seen = threading.Event(), {}
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        upstream = threading.Thread(target=_held_stream_upstream, args=(server, released, seen), daemon=True)
        upstream.start()
        with ReplicaProxy([f"http://127.0.0.1:{server.getsockname()[1]}"]) as proxy:
            host, port = proxy.url.rsplit("/", 1)[1].split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                conn.request("POST", "/v1/chat/completions", body=payload(2),
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                first = b""
                for _ in range(1000):  # bounded: each read waits at most the connection's timeout
                    if b"\n\n" in first:
                        break
                    first += response.read1(65536)
                released.set()
                rest = response.read()
            finally:
                conn.close()
        upstream.join(60)
    assert first.startswith(b'data: {"first": true}') and rest.rstrip().endswith(b"data: [DONE]"), (first, rest)
    assert seen["released_by_client"] is True  # the first event arrived while the replica still held the rest
    assert not proxy_threads()


def test_completions_split_evenly_in_strict_round_robin(replicas):
    before = [r.completions() for r in replicas]
    with ReplicaProxy([r.url for r in replicas]) as proxy:
        for i in range(8):
            assert stream(proxy.url, max_tokens=1)[-1][1] == "[DONE]"
            assert list(proxy.counts.values()) == [(i + 2) // 2, (i + 1) // 2]  # a, b, a, b, ...
            # health and model probes go to the first replica and do not move the rotation
            status, body = get(proxy.url + "/health")
            assert status == 200 and body == b""
            status, body = get(proxy.url + "/v1/models")
            assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"
        assert proxy.counts == {replicas[0].url: 4, replicas[1].url: 4}
        assert proxy.failures == {replicas[0].url: 0, replicas[1].url: 0}
        proxy.reset_counts()
        assert proxy.counts == {replicas[0].url: 0, replicas[1].url: 0}
    # each stand-in's own view: the completions in its access log
    assert [r.completions() - b for r, b in zip(replicas, before, strict=True)] == [4, 4]
    assert not proxy_threads()


def test_a_dead_replica_is_a_502_naming_it_and_never_retried(replicas):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    live = replicas[0]
    before = live.completions()
    with ReplicaProxy([live.url, dead], connect_timeout_s=5) as proxy:
        assert stream(proxy.url, max_tokens=1)[-1][1] == "[DONE]"
        request = urllib.request.Request(proxy.url + "/v1/chat/completions", data=payload(1),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(request, timeout=10)
        assert error.value.code == 502
        body = json.loads(error.value.read())
        assert body["error"]["upstream"] == dead and dead in body["error"]["message"]
        assert body["error"]["code"] == 502
        assert proxy.counts == {live.url: 1, dead: 0} and proxy.failures == {live.url: 0, dead: 1}
    assert live.completions() - before == 1  # the failed request did not go to the live replica
    assert not proxy_threads()


def test_stop_ends_idle_and_streaming_connections_and_leaves_no_thread(replicas):
    proxy = ReplicaProxy([r.url for r in replicas], join_s=10).start()
    host, port = proxy.url.rsplit("/", 1)[1].split(":")
    idle = http.client.HTTPConnection(host, int(port), timeout=10)  # a kept-alive connection, waiting
    idle.request("GET", "/health")
    assert idle.getresponse().read() == b""
    busy = http.client.HTTPConnection(host, int(port), timeout=10)  # a long stream, in flight
    busy.request("POST", "/v1/chat/completions", body=payload(2000), headers={"Content-Type": "application/json"})
    response = busy.getresponse()
    assert response.read1(65536).startswith(b"data: ")
    assert len(proxy_threads()) >= 3  # the server's and two connections'
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 5
    assert not proxy_threads()
    with pytest.raises((http.client.HTTPException, OSError)):  # the stream ended without its closing chunk
        for _ in range(10000):
            if not response.read1(65536):
                response.read()
    idle.close()
    busy.close()
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=2).close()  # the listening socket is closed
    proxy.stop()  # twice is harmless


def test_request_bodies_and_headers_are_forwarded(replicas):
    with ReplicaProxy([replicas[0].url]) as proxy:
        host, port = proxy.url.rsplit("/", 1)[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                           "ignore_eos": True}).encode()
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")  # a chunked request body, reassembled
        conn.endheaders()
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("content-length")
        answer = json.loads(response.read())
        assert answer["usage"]["completion_tokens"] == 3
        conn.request("GET", "/nowhere")  # the same kept-alive connection; the replica's 404 relayed
        response = conn.getresponse()
        assert response.status == 404 and json.loads(response.read()) == {"detail": "Not Found"}
        conn.close()
    with pytest.raises(ValueError):
        ReplicaProxy(["http://127.0.0.1:1/v1"])
    with pytest.raises(ValueError):
        ReplicaProxy(["http://127.0.0.1:1", "http://127.0.0.1:1/"])


def test_llama_benchys_client_library_aiohttp_through_the_proxy(replicas):
    aiohttp = pytest.importorskip("aiohttp")
    TOKENS = 30  # noqa: N806 - the stream's length, 1.2 s at the stand-ins' rate

    async def one(session, url):
        started = time.monotonic()
        arrivals = []
        async with session.post(url + "/v1/chat/completions", data=payload(TOKENS),
                                headers={"Content-Type": "application/json"}) as response:
            assert response.status == 200
            data = b""
            async for piece in response.content.iter_any():
                arrivals.append(time.monotonic() - started)
                data += piece
        assert data.rstrip().endswith(b"data: [DONE]")
        return arrivals

    async def main(url):
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(limit=4, force_close=False, keepalive_timeout=600)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            async with session.get(url + "/v1/models") as response:
                assert response.status == 200 and (await response.json())["object"] == "list"
            first = await one(session, url)  # sequential: the kept-alive connection is reused
            second = await one(session, url)
            concurrent = await asyncio.gather(*(one(session, url) for _ in range(4)))
        return [first, second, *concurrent]

    with ReplicaProxy([r.url for r in replicas]) as proxy:
        results = asyncio.run(asyncio.wait_for(main(proxy.url), 60))
        assert proxy.counts == {replicas[0].url: 3, replicas[1].url: 3}
    # streamed, not buffered: a buffering proxy hands the client one piece, however idle the machine. A reader
    # starved on a loaded machine merges pieces: with 6 tokens (240 ms) it once read them all at once under two
    # test suites on 2 cores; 30 tokens span 1.2 s, which no starvation seen here covers
    for arrivals in results:
        assert len(arrivals) >= 2 and arrivals[-1] - arrivals[0] >= STEP_S * 0.8, arrivals
    assert not proxy_threads()
