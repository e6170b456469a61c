#!/usr/bin/env python3
"""Do llama-benchy and AIPerf agree against the same server and points (issue 37 item 1)?

One real CPU llama.cpp server (tests/fleet/llamacpp.py's llama-server, the tiny random-weight model of
tests/fleet/tinymodel.py) on 127.0.0.1, driven by both clients through sparkfleet's own drivers
(plugins/module_utils/sparkfleet_host/engines/serving_client.py DRIVERS["llama-benchy"] and DRIVERS["aiperf"]):
each command is the driver's ``point_argv`` called as run/run_launch.py's run_points calls it (workload runs 3, the
product's default; prefix_caching false; the corpus served by CorpusServer; skip_coherence for the random model;
the seed of the round as the run's point-order seed), run under ``/usr/bin/env -C <run dir>`` with
``client_env(run_dir, driver)``; each output is read with the driver's ``parse_point`` onto the record's metrics.

K rounds; in each, every point is measured with both clients, the clients' order alternating by round (ABBA: round
0 llama-benchy first, round 1 AIPerf first, ...). Per client and point: the mean over the rounds of each metric, its
t-based 95% CI half-width, and the CV of the rounds (the client's A/A floor). Compared metrics (the record's names):

    TTFT                   llama-benchy e2e_ttft_ms   vs AIPerf e2e_ttft_ms  (time_to_first_token)
    aggregate output tok/s llama-benchy tg_tok_s      vs AIPerf out_tok_s    (output_token_throughput)
    per-user output tok/s  llama-benchy tg_req_tok_s  vs AIPerf out_req_tok_s (output_token_throughput_per_user)

and, to separate a definition from a disagreement, llama-benchy's figures put on AIPerf's definition of aggregate
output throughput (as_aiperf) against AIPerf's out_tok_s.

"Within floors": |difference of the means| <= the larger of the two clients' 95% CI half-widths, each relative to
its own mean (the difference is relative to llama-benchy's mean).

Usage:
    .venv/bin/python benchmarks/client_agreement.py [-k 5] [--concurrency 1 2] [--pp 64] [--tg 32] [--threads 2]
        [--shape '{"n_embd": 512}'] [--aiperf /work/wt/aiperf-venv/bin/aiperf]
        [--llama-benchy .venv/bin/llama-benchy] [--json OUT] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO.parents[2]))
sys.path.insert(0, str(REPO / "tests" / "fleet"))

from llamacpp import ensure_llama_server, free_port, start_server, stop, wait_ready  # noqa: E402
from tinymodel import SHAPE, make_tiny_model  # noqa: E402

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import (  # noqa: E402
    serving,
    serving_client,
)

CORPUS = REPO / "roles" / "serving_client" / "files" / "corpus.txt"
ENV_BIN = "/usr/bin/env"  # run_launch.ENV_BIN
RUNS = 3  # run_points: int(workload.get("runs") or 3)
#: (label, llama-benchy metric, AIPerf metric), the record's names
COMPARED = (("TTFT ms", "e2e_ttft_ms", "e2e_ttft_ms"),
            ("aggregate output tok/s", "tg_tok_s", "out_tok_s"),
            ("per-user output tok/s", "tg_req_tok_s", "out_req_tok_s"),
            ("aggregate output tok/s, llama-benchy on AIPerf's definition", "as_aiperf_out_tok_s", "out_tok_s"))
#: two-sided 95% t quantiles, by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 24: 2.064, 29: 2.045}


def t95(df: int) -> float:
    return T95.get(df) or T95[max(k for k in T95 if k <= df)]


def as_aiperf(metrics: dict, point: dict) -> float:
    """llama-benchy's figures on AIPerf's definition of aggregate output throughput (all output tokens over the
    first request's start to the last response, prefill included): concurrency x tg tokens over one request's
    latency, TTFT + (tg - 1) / per-request decode rate. Gaps between a request's end and the next one's start
    (the client's own time) are not in it."""
    latency_s = metrics["e2e_ttft_ms"] / 1000 + (point["tg"] - 1) / metrics["tg_req_tok_s"]
    return point["concurrency"] * point["tg"] / latency_s


def summary(values: list) -> dict:
    n = len(values)
    mean = statistics.fmean(values) if values else float("nan")
    sd = statistics.stdev(values) if n > 1 else float("nan")
    half = t95(n - 1) * sd / math.sqrt(n) if n > 1 else float("nan")
    return {"n": n, "mean": mean, "sd": sd, "half": half, "cv": sd / mean if mean else float("nan"),
            "rel_half": half / mean if mean else float("nan"), "values": values}


def measure(drv, exe: str, point: dict, base_url: str, model: dict, corpus_url: str, run_dir: Path,
            seed: int, timeout: float) -> dict:
    """One point with one client, as run_points measures it: the parsed metrics and the client's wall time."""
    raw = run_dir / "points" / drv.raw_name(point["point"])
    raw.parent.mkdir(parents=True, exist_ok=True)
    env = serving_client.client_env(str(run_dir), drv)
    os.makedirs(env["HOME"], exist_ok=True)
    argv = drv.point_argv(exe, point, base_url, model["name"], str(model["tokenizer"]), RUNS, False, corpus_url,
                          str(raw), None, skip_coherence=True, seed=seed)
    cmd = [ENV_BIN, "-C", str(run_dir)] + [f"{k}={v}" for k, v in env.items()] + argv
    started = time.monotonic()
    with open(run_dir / "bench.log", "ab") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        tail = (run_dir / "bench.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"{drv.name} exited {proc.returncode} at {point['point']}:\n{tail}")
    parsed = drv.parse_point(raw.read_bytes(), point, source=str(raw))
    return {"metrics": parsed["metrics"], "wall_s": wall, "version": parsed.get("version")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pp", type=int, default=64)
    parser.add_argument("--tg", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="llama-server -t")
    parser.add_argument("--llama-benchy", default=str(REPO / ".venv" / "bin" / "llama-benchy"))
    parser.add_argument("--aiperf", default="/work/wt/aiperf-venv/bin/aiperf")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per client invocation")
    parser.add_argument("--shape", default=None, help="JSON of tinymodel.SHAPE keys to override (a slower model)")
    parser.add_argument("--keep", default=None, help="work here (kept: every client's exports and log)")
    parser.add_argument("--json", default=None, help="write every round's figures here")
    args = parser.parse_args()
    exes = {"llama-benchy": args.llama_benchy, "aiperf": args.aiperf}
    for name, exe in exes.items():
        if not Path(exe).exists():
            sys.exit(f"{name} not found at {exe}")
    points = [{"point": serving.point_name(0, c, args.pp, args.tg), "depth": 0, "concurrency": c, "pp": args.pp,
               "tg": args.tg} for c in args.concurrency]
    binary = ensure_llama_server()
    np_ = max(args.concurrency)
    slot_ctx = args.pp + args.tg + 256
    figures = {(name, p["point"]): {} for name in exes for p in points}  # -> metric -> [per round]
    walls = {name: [] for name in exes}
    versions = {}
    with contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(
            prefix="client-agreement-") as tmp:
        root = Path(tmp)
        model = make_tiny_model(root / "model", shape=dict(SHAPE, **json.loads(args.shape or "{}")))
        port = free_port()
        log = root / "server.log"
        server = start_server(binary, model["gguf"], port, log,
                              ["-c", str(slot_ctx * np_), "-np", str(np_), "-t", str(args.threads)])
        try:
            wait_ready(server, port, log)
            base_url = f"http://127.0.0.1:{port}/v1"
            with serving_client.CorpusServer(str(CORPUS), str(root / ".corpus")) as corpus:
                for k in range(args.k):
                    order = ["llama-benchy", "aiperf"] if k % 2 == 0 else ["aiperf", "llama-benchy"]
                    seed = serving.order_seed(f"client-agreement-round-{k}")
                    for point in points:
                        for name in order:
                            drv = serving_client.DRIVERS[name]
                            run_dir = root / f"round{k}" / name
                            got = measure(drv, exes[name], point, base_url, model, corpus.url, run_dir, seed,
                                          args.timeout)
                            walls[name].append(got["wall_s"])
                            versions[name] = got["version"]
                            if name == "llama-benchy":
                                got["metrics"]["as_aiperf_out_tok_s"] = as_aiperf(got["metrics"], point)
                            for metric, value in got["metrics"].items():
                                figures[(name, point["point"])].setdefault(metric, []).append(value)
                            print(f"round {k} {point['point']} {name}: "
                                  + ", ".join(f"{m} {got['metrics'].get(m, float('nan')):.2f}"
                                              for m in {"llama-benchy": ("e2e_ttft_ms", "tg_tok_s", "tg_req_tok_s"),
                                                        "aiperf": ("e2e_ttft_ms", "out_tok_s", "out_req_tok_s")}[name])
                                  + f" ({got['wall_s']:.1f} s)", flush=True)
                        if server.poll() is not None:
                            sys.exit(f"llama-server exited {server.returncode}:\n{log.read_text()[-3000:]}")
        finally:
            stop(server)

    print(f"\nllama-server {binary.parent.name}, tiny random-weight model {args.shape or 'SHAPE'}, "
          f"-np {np_} -t {args.threads}; "
          f"llama-benchy {versions.get('llama-benchy')}, AIPerf {versions.get('aiperf')}; {args.k} rounds (ABBA), "
          f"runs {RUNS}; CPUs {os.cpu_count()}; client wall s per point: "
          + ", ".join(f"{n} {statistics.fmean(w):.1f}" for n, w in walls.items()) + "\n")
    print("| point | metric | llama-benchy mean ± 95% CI | AIPerf mean ± 95% CI | difference | CV llama-benchy "
          "| CV AIPerf | within floors |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    rows = []
    for point in points:
        for label, lb_metric, ap_metric in COMPARED:
            a = summary(figures[("llama-benchy", point["point"])].get(lb_metric, []))
            b = summary(figures[("aiperf", point["point"])].get(ap_metric, []))
            diff = (b["mean"] - a["mean"]) / a["mean"]
            floor = max(a["rel_half"], b["rel_half"])
            within = abs(diff) <= floor
            rows.append({"point": point["point"], "metric": label, "llama_benchy": a, "aiperf": b, "diff": diff,
                         "floor": floor, "within": within})
            print(f"| {point['point']} | {label} | {a['mean']:.2f} ± {a['half']:.2f} | {b['mean']:.2f} ± "
                  f"{b['half']:.2f} | {diff:+.1%} | {a['cv']:.1%} | {b['cv']:.1%} | "
                  f"{'yes' if within else 'no'} (floor ±{floor:.1%}) |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "walls": walls, "versions": versions}, indent=1))


if __name__ == "__main__":
    main()
