#!/usr/bin/env python3
"""What the replica proxy (plugins/module_utils/sparkfleet_host/run/replica_proxy.py) adds to a streaming request.

One OpenAI stand-in (tests/fleet/standins/vllm, decoding at --decode-tok-s) on 127.0.0.1 and one ReplicaProxy in
front of it. K streaming chat completions (--tokens output tokens each, ignore_eos) go alternately straight to the
stand-in and through the proxy, one at a time, each on a fresh client connection (the stand-in closes a stream's
connection, so the direct path cannot keep one), read with http.client's read1 as the events arrive. Per request:
time to first token (the request sent to the first ``delta.content`` event) and total time (to the end of the
body). Printed: the medians of each path, the difference of the medians and the median of the pairwise differences
(request i through the proxy against request i direct), in ms; and the process CPU time per request of each path
(client and proxy share this process, the stand-in is another), whose difference is the proxy's CPU per request.

Usage:
    .venv/bin/python benchmarks/replica_proxy_overhead.py [-k 200] [--tokens 32] [--decode-tok-s 1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "fleet" / "standins"
sys.path.insert(0, str(REPO.parents[2]))
sys.path.insert(0, str(REPO / "tests" / "fleet"))

from llamacpp import free_port, wait_ready  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run.replica_proxy import (  # noqa: E402
    ReplicaProxy,
)


def start_standin(port: int, decode_tok_s: float, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_FAKE")}
    env.update(PYTHONPATH=str(STANDINS), SPARKFLEET_FAKE_STARTUP_S="0", SPARKFLEET_FAKE_DECODE_TOK_S=str(decode_tok_s),
               SPARKFLEET_FAKE_PREFILL_TOK_S="1000000")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(STANDINS / "vllm"), "serve", "tiny", "--host", "127.0.0.1",
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(proc, port, log, timeout=30)
    except RuntimeError:
        proc.kill()
        proc.wait(timeout=5)
        raise
    return proc


def one(port: int, body: bytes) -> tuple[float, float]:
    """(TTFT s, total s) of one streaming completion on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        started = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        first, buffer = None, b""
        for _ in range(100000):
            piece = response.read1(65536)
            if not piece:
                break
            if first is None:
                buffer += piece
                if b'"content": " ' in buffer:  # the first token's delta (the role chunk's content is "")
                    first = time.perf_counter() - started
        total = time.perf_counter() - started
        if response.status != 200 or first is None:
            raise SystemExit(f"request failed: HTTP {response.status}")
        return first, total
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, default=200, help="requests per path")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--decode-tok-s", type=float, default=1000.0, help="the stand-in's decode rate")
    args = parser.parse_args(argv)
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "Tell me about the sea."}],
                       "max_tokens": args.tokens, "ignore_eos": True, "stream": True}).encode()
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        proc = start_standin(port, args.decode_tok_s, Path(scratch) / "standin.log")
        try:
            with ReplicaProxy([f"http://127.0.0.1:{port}"]) as proxy:
                proxy_port = int(proxy.url.rsplit(":", 1)[1])
                for _ in range(5):  # warm both paths
                    one(port, body)
                    one(proxy_port, body)
                times: dict[str, list] = {"direct": [], "proxy": []}
                cpu = {"direct": 0.0, "proxy": 0.0}
                for i in range(2 * args.k):
                    path = ("direct", "proxy")[i % 2]
                    cpu_before = time.process_time()
                    times[path].append(one(port if path == "direct" else proxy_port, body))
                    cpu[path] += time.process_time() - cpu_before
                forwarded = proxy.counts[f"http://127.0.0.1:{port}"]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
    print(f"{args.k} streaming requests per path, {args.tokens} tokens at {args.decode_tok_s:g} tok/s, "
          f"{forwarded} forwarded by the proxy, {os.cpu_count()} CPUs")
    print(f"{'':8} {'TTFT ms (median)':>17} {'total ms (median)':>18} {'CPU ms/request':>15}")
    for path in ("direct", "proxy"):
        ttft = statistics.median(t for t, _ in times[path]) * 1e3
        total = statistics.median(t for _, t in times[path]) * 1e3
        print(f"{path:8} {ttft:17.2f} {total:18.2f} {cpu[path] / args.k * 1e3:15.2f}")
    for label, which in (("difference of the medians", None), ("median of pairwise differences", "pairs")):
        figures = []
        for index in (0, 1):
            if which:
                pairs = zip(times["proxy"], times["direct"], strict=True)
                added = statistics.median(p[index] - d[index] for p, d in pairs)
            else:
                added = statistics.median(p[index] for p in times["proxy"]) - \
                    statistics.median(d[index] for d in times["direct"])
            figures.append(added * 1e3)
        print(f"added by the proxy ({label}): TTFT {figures[0]:+.2f} ms, total {figures[1]:+.2f} ms")
    print(f"proxy CPU per request: {(cpu['proxy'] - cpu['direct']) / args.k * 1e3:+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
