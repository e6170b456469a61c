#!/usr/bin/env python3
"""All-reduce over NCCL with torch.distributed, one process per GPU, timed as nccl-tests times it.

    python3 examples/nccl-two-gpu/allreduce.py --out DIR [--min-bytes 8M] [--max-bytes 2G] [--warmup 5]
        [--iters 20] [--repeats 3] [--gpus N] [--force-socket] [--expect-hcas a,b]

The parent starts one worker process per GPU (``subprocess``, each with its own explicit environment), rendezvous
on loopback (``MASTER_ADDR=127.0.0.1``, a free port), ``NCCL_DEBUG=INFO``, and NVLink multicast off in NCCL,
PyTorch and NVSHMEM (``NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1``: on a
shared machine a program using it can put the host's GPUs out of service). ``--force-socket`` adds
``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``, so NCCL must go through its network transport: with no RDMA device,
NET/Socket, the fallback a pair preflight has to refuse.

Each worker, for sizes doubling from --min-bytes to --max-bytes (float32, sum): checks one all-reduce's result
(rank r contributes r+1), runs --warmup all-reduces, then --repeats times a loop of --iters all-reduces between
two CUDA events (the stream synchronised before and after), as nccl-tests' BenchTime times ``iters`` operations
and divides. As nccl-tests averages deltaSec over ranks, the parent averages the ranks' times of each repeat;
algbw and busbw come from sparkfleet's own ``bus_bandwidth`` (plugins/module_utils/sparkfleet_host/parsers/nccl.py,
loaded by file path: nccl-tests' all_reduce factor 2(n-1)/n). The transport is read from the workers' own
NCCL_DEBUG=INFO output with ``nccl_transport`` and judged with ``transport_verdict``.

Writes DIR/results.json and DIR/nccl-debug.log (every worker's stdout and stderr, rank by rank).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NCCL_PY = HERE.parents[1] / "plugins" / "module_utils" / "sparkfleet_host" / "parsers" / "nccl.py"
#: Set in every worker's environment, whatever the parent's says.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def load_nccl_parser(path: Path = NCCL_PY):
    spec = importlib.util.spec_from_file_location("sparkfleet_nccl_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def size_arg(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def sizes(low: int, high: int) -> list[int]:
    out, size = [], low
    while size <= high:
        out.append(size)
        size *= 2
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- worker (one per GPU)


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for key, value in NO_MULTICAST.items():  # refuse to run without them, whoever started this process
        assert os.environ.get(key) == value, f"{key} must be {value}"
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    rows = []
    for size in sizes(args.min_bytes, args.max_bytes):
        count = size // 4
        check = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(check)
        expected = world * (world + 1) / 2
        correct = bool(torch.all(check == expected).item())
        del check
        buf = torch.zeros(count, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        seconds = []
        for _ in range(args.repeats):
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1000.0 / args.iters)
        del buf
        torch.cuda.empty_cache()
        rows.append({"size_bytes": size, "count": count, "seconds": seconds, "correct": correct})
        if rank == 0:
            print(f"[sparkfleet] size {size} done: {[round(s * 1e6, 1) for s in seconds]} us", flush=True)
    info = {"rank": rank, "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "torch_nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": rows}
    Path(args.work, f"rank{rank}.json").write_text(json.dumps(info))
    dist.destroy_process_group()
    return 0


# ---- parent


def child_env(args: argparse.Namespace, rank: int, world: int, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank), "NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1", **NO_MULTICAST})
    if args.force_socket:
        env.update({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    return env


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def run_workers(args: argparse.Namespace, world: int) -> tuple[int, str]:
    port = free_port()
    logs, procs = [], []
    for rank in range(world):
        log = open(Path(args.work, f"rank{rank}.log"), "w")  # noqa: SIM115 - closed below
        logs.append(log)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--work", args.work,
               "--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--warmup", str(args.warmup),
               "--iters", str(args.iters), "--repeats", str(args.repeats)]
        procs.append(subprocess.Popen(cmd, env=child_env(args, rank, world, port), stdout=log,
                                      stderr=subprocess.STDOUT))
    deadline, rc = time.monotonic() + args.timeout, 0
    for proc in procs:
        try:
            rc = rc or proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            rc = 124
    for log in logs:
        log.close()
    text = "".join(f"==== rank {r} ====\n" + Path(args.work, f"rank{r}.log").read_text(errors="replace")
                   for r in range(world))
    return rc, text


def summarise(args: argparse.Namespace, world: int, nccl, log_text: str, rc: int) -> dict:
    infos = []
    for rank in range(world):
        path = Path(args.work, f"rank{rank}.json")
        if path.exists():
            infos.append(json.loads(path.read_text()))
    rows = []
    if len(infos) == world:
        for index, row in enumerate(infos[0]["rows"]):
            per_rank = [info["rows"][index]["seconds"] for info in infos]
            # nccl-tests: Allreduce(&deltaSec, average) over ranks, for each timed loop
            repeat_seconds = [sum(r[k] for r in per_rank) / world for k in range(args.repeats)]
            busbw = [nccl.bus_bandwidth("all_reduce", row["size_bytes"], s, world) for s in repeat_seconds]
            median_s = statistics.median(repeat_seconds)
            rows.append({"size_bytes": row["size_bytes"], "count": row["count"], "type": "float", "redop": "sum",
                         "time_us": round(median_s * 1e6, 2),
                         "algbw_gbs": round(nccl.algorithm_bandwidth(row["size_bytes"], median_s), 2),
                         "busbw_gbs": round(nccl.bus_bandwidth("all_reduce", row["size_bytes"], median_s, world), 2),
                         "busbw_gbs_repeats": [round(b, 2) for b in busbw],
                         "time_us_per_rank": [[round(s * 1e6, 2) for s in r] for r in per_rank],
                         "correct": all(info["rows"][index]["correct"] for info in infos)})
    transport = nccl.nccl_transport(log_text)
    ok, reason = nccl.transport_verdict(transport, args.expect_hcas)
    channels = transport.pop("channels")
    transport["channel_count"] = len(channels)
    transport["channel_examples"] = sorted({c["via"] for c in channels})
    large = [r["busbw_gbs"] for r in rows if r["size_bytes"] >= nccl.GIB]
    return {
        "what": "torch.distributed all_reduce (NCCL), one process per GPU, loopback rendezvous",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(), "world_size": world, "rc": rc,
        "devices": [info["device"] for info in infos],
        "torch": infos[0]["torch"] if infos else None, "cuda": infos[0]["cuda"] if infos else None,
        "torch_nccl": infos[0]["torch_nccl"] if infos else None,
        "settings": {"min_bytes": args.min_bytes, "max_bytes": args.max_bytes, "warmup": args.warmup,
                     "iters": args.iters, "repeats": args.repeats, "force_socket": args.force_socket,
                     "env": {k: child_env(args, 0, world, 0)[k] for k in sorted(child_env(args, 0, world, 0))
                             if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM_", "MASTER_ADDR"))}},
        "busbw_formula": "nccl-tests AllReduceGetBw: algbw = size/time/1e9, busbw = algbw * 2(n-1)/n",
        "rows": rows,
        "busbw_gbs_min_at_1gib_or_more": min(large) if large else None,
        "transport": transport,
        "transport_verdict": {"ok": ok, "reason": reason, "expect_ib_devices": args.expect_hcas},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out")
    parser.add_argument("--work", default=None, help="temporary files (default: a new temporary directory)")
    parser.add_argument("--min-bytes", type=size_arg, default=8 << 20)
    parser.add_argument("--max-bytes", type=size_arg, default=2 << 30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=0, help="processes, one per GPU (default: every GPU)")
    parser.add_argument("--force-socket", action="store_true")
    parser.add_argument("--expect-hcas", default="", help="HCAs the verdict requires (comma-separated)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    nccl = load_nccl_parser()
    world = args.gpus or gpu_count()
    if world < 2:
        print(f"needs 2 or more GPUs, found {world}", file=sys.stderr)
        return 2
    args.work = args.work or tempfile.mkdtemp(prefix="sparkfleet-nccl-")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    for stale in Path(args.work).glob("rank*.*"):  # an earlier run's figures must not pass for this one's
        stale.unlink()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rc, log_text = run_workers(args, world)
    (out / "nccl-debug.log").write_text(log_text)
    result = summarise(args, world, nccl, log_text, rc)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    for row in result["rows"]:
        print(f"{row['size_bytes']:>12}  {row['time_us']:>10.1f} us  algbw {row['algbw_gbs']:>7.2f}  "
              f"busbw {row['busbw_gbs']:>7.2f} GB/s  repeats {row['busbw_gbs_repeats']}  correct {row['correct']}")
    print(f"transport: net={result['transport']['net']} transports={result['transport']['transports']} "
          f"version={result['transport']['version']}; verdict ok={result['transport_verdict']['ok']}: "
          f"{result['transport_verdict']['reason']}")
    return rc or (0 if result["rows"] and all(r["correct"] for r in result["rows"]) else 1)


if __name__ == "__main__":
    sys.exit(main())
