#!/usr/bin/env python3
"""The load generator's own cost: CPU time of llama-benchy per request it sends, against the CPU time the engine
spends on the same requests, on a real llama.cpp server with the tiny random-weight model (tests/fleet/).

For each concurrency, llama-benchy runs twice against one server, with --runs R1 and --runs R2 (same profile
otherwise). Client CPU = user + system time of the llama-benchy process and its children (getrusage of reaped
children); server CPU = the change of utime + stime in /proc/<pid>/stat of llama-server over the client's run.
Requests sent per client run = 2 warm-up requests (llama-benchy's user-only and system+probe calls; the coherence
check is skipped: a random model cannot say "Paris") + for every (depth, pp, tg) point, (runs + 1 warm-up run) x
concurrency generation requests. The marginal cost per request = (CPU at R2 - CPU at R1) / (requests at R2 - at
R1) leaves out what a client run pays once: interpreter start, imports, reading and tokenizing the book.

Usage:
    .venv/bin/python benchmarks/serving_client_cost.py [--client PATH] [--concurrency 1 4] [--runs 1 10]
        [--depth 0 4096] [--pp 512] [--tg 64] [--threads 1]

On a shared machine pass --threads 1: ggml's worker threads spin at their barriers, so a multi-threaded server
preempted by other work burns CPU time waiting and its per-request figure swells with the machine's load.

--client defaults to llama-benchy on PATH (python3 -m venv /tmp/benchy && /tmp/benchy/bin/pip install
llama-benchy==0.4.0). llama-server comes from tests/fleet/llamacpp.py (built and cached on first use).
All traffic stays on 127.0.0.1: the book is served by a local http.server.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fleet"))

from llamacpp import ensure_llama_server, free_port, start_server, stop, wait_ready  # noqa: E402
from tinymodel import CORPUS, make_tiny_model  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a live process, seconds (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def requests_sent(points: int, runs: int, concurrency: int) -> int:
    """Chat requests one llama-benchy 0.4.0 invocation sends (see the module docstring; runner.py, client.py)."""
    return 2 + points * (runs + 1) * concurrency


def run_client(client: str, base_url: str, book_url: str, tokenizer: Path, args, concurrency: int, runs: int,
               server_pid: int, home: Path, out: Path) -> dict:
    argv = [client, "--base-url", base_url, "--model", "tiny", "--tokenizer", str(tokenizer),
            "--pp", *map(str, args.pp), "--tg", *map(str, args.tg), "--depth", *map(str, args.depth),
            "--concurrency", str(concurrency), "--runs", str(runs), "--exact-tg", "--no-cache",
            "--skip-coherence", "--format", "json", "--save-result", str(out), "--book-url", book_url]
    env = dict(os.environ, HOME=str(home), HF_HUB_OFFLINE="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    client_before, server_before, wall = children_cpu_s(), proc_cpu_s(server_pid), time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.monotonic() - wall
    client_cpu, server_cpu = children_cpu_s() - client_before, proc_cpu_s(server_pid) - server_before
    if proc.returncode != 0:
        sys.exit(f"llama-benchy failed ({proc.returncode}): {' '.join(argv)}\n{proc.stdout[-3000:]}{proc.stderr}")
    points = len(args.depth) * len(args.pp) * len(args.tg)
    return {"requests": requests_sent(points, runs, concurrency), "client_s": client_cpu, "server_s": server_cpu,
            "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", default=shutil.which("llama-benchy"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--runs", type=int, nargs=2, default=[1, 10], metavar=("R1", "R2"))
    parser.add_argument("--depth", type=int, nargs="+", default=[0, 4096])
    parser.add_argument("--pp", type=int, nargs="+", default=[512])
    parser.add_argument("--tg", type=int, nargs="+", default=[64])
    parser.add_argument("--threads", type=int, default=None, help="llama-server -t (default: its own choice)")
    args = parser.parse_args()
    if not args.client or not Path(args.client).exists():
        sys.exit("llama-benchy not found: pass --client PATH (pip install llama-benchy==0.4.0 into a venv)")
    binary = ensure_llama_server()
    slot_ctx = max(args.depth) + max(args.pp) + max(args.tg) + 256
    with tempfile.TemporaryDirectory(prefix="serving-cost-") as tmp:
        root = Path(tmp)
        model = make_tiny_model(root / "model")
        (root / "www").mkdir()
        shutil.copy(CORPUS, root / "www" / "book.txt")
        book_port, port = free_port(), free_port()
        book = subprocess.Popen([sys.executable, "-m", "http.server", str(book_port), "--bind", "127.0.0.1",
                                 "--directory", str(root / "www")], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        np_ = max(args.concurrency)
        server_args = ["-c", str(slot_ctx * np_), "-np", str(np_)]
        if args.threads:
            server_args += ["-t", str(args.threads)]
        log = root / "server.log"
        server = start_server(binary, model["gguf"], port, log, server_args)
        rows = []
        try:
            wait_ready(server, port, log)
            for c in args.concurrency:
                low, high = (run_client(args.client, f"http://127.0.0.1:{port}/v1",
                                        f"http://127.0.0.1:{book_port}/book.txt", model["tokenizer"], args, c, r,
                                        server.pid, root, root / f"c{c}.r{r}.json") for r in args.runs)
                rows.append((c, low, high))
        finally:
            stop(server)
            stop(book)
    print(f"llama-benchy against llama-server ({binary.parent.name}), tiny model; depth {args.depth}, "
          f"pp {args.pp}, tg {args.tg}, --runs {args.runs[0]} and {args.runs[1]}, CPUs {os.cpu_count()}\n")
    print("| concurrency | runs | requests | client CPU s | server CPU s | client ms/request (all) "
          "| client ms/request (marginal) | server ms/request (marginal) | client/server (marginal) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, low, high in rows:
        dreq = high["requests"] - low["requests"]
        dclient, dserver = high["client_s"] - low["client_s"], high["server_s"] - low["server_s"]
        for r, run in zip(args.runs, (low, high), strict=True):
            print(f"| {c} | {r} | {run['requests']} | {run['client_s']:.2f} | {run['server_s']:.2f} "
                  f"| {1000 * run['client_s'] / run['requests']:.1f} | | | |")
        print(f"| {c} | {args.runs[0]}→{args.runs[1]} | +{dreq} | +{dclient:.2f} | +{dserver:.2f} | "
              f"| {1000 * dclient / dreq:.1f} | {1000 * dserver / dreq:.1f} | {dclient / dserver:.1%} |")


if __name__ == "__main__":
    main()
