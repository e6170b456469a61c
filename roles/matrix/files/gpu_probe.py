#!/usr/bin/env python3
"""The readiness probe's fixed GPU load, and the preflight's device-copy bandwidth (issue 24).

STANDALONE on purpose: run with the host's python3 (stdlib; torch or cupy when importable), nothing of
sparkfleet. Two modes, each printing ONE JSON object on stdout (the last line), which
``sparkfleet_host.health.host_state`` reads (the load mode first prints a line saying the load has started):

    python3 gpu_probe.py load --seconds 3 [--size 4096] [--backend auto|torch|cupy]
        bf16 (torch) / fp16 (cupy) N x N matrix products back to back for SECONDS, so the GPU runs at its
        load clock while the caller reads the SM clock, power and clock-event reasons; prints what it did:
        backend, dtype (bf16 | fp16), device, products, size, seconds, TFLOP/s (the delivered figure the
        readiness verdict compares with its GPU class's reference and with the fleet's peers).
    python3 gpu_probe.py bandwidth [--mib 1024] [--iterations 20] [--backend auto|torch|cupy]
        a device-to-device copy of MIB MiB, ITERATIONS times, timed after a warm-up; bandwidth counts the
        bytes read AND written (2 x bytes copied per copy: the convention of CUDA's bandwidthTest; decode reads
        weights only, so this traffic figure is the one to divide weight bytes by).

Without torch-with-CUDA or cupy the object says ``"backend": null`` with the ``error`` naming what was
missing and the exit code is 3 (the documented fallback: the probe's state is "unknown", the bandwidth is
recorded as null with that reason). Nothing runs on the CPU instead: a CPU figure would be mistaken for the
GPU's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

RC_NO_BACKEND = 3
#: Printed (flushed) when the load loop begins: torch's import and CUDA's start take seconds at idle clocks.
LOAD_STARTED = "sparkfleet-gpu-probe: load started"
#: Printed (flushed) when it ends, before the library and the process tear down at idle clocks.
LOAD_ENDED = "sparkfleet-gpu-probe: load ended"
BACKENDS = ("auto", "torch", "cupy")


class Backend:
    """One array library on CUDA device 0: allocate, multiply, copy, wait."""

    def __init__(self, name, version, device, matrix, matmul, buffer, copy, sync, dtype):
        self.name, self.version, self.device, self.dtype = name, version, device, dtype
        self.matrix, self.matmul, self.buffer, self.copy, self.sync = matrix, matmul, buffer, copy, sync


def torch_backend():
    try:
        import torch
    except Exception as exc:  # any import failure (missing CUDA libraries too): not usable here
        return None, f"torch: {exc}"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__}: CUDA not available"
    dev = torch.device("cuda:0")
    return Backend(
        "torch", torch.__version__, f"cuda:0 {torch.cuda.get_device_name(0)}",
        lambda n: torch.randn((n, n), device=dev, dtype=torch.bfloat16),
        torch.matmul,
        lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, device=dev),
        lambda dst, src: dst.copy_(src),
        torch.cuda.synchronize,
        "bf16",
    ), None


def cupy_backend():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "cupy: no CUDA device"
    except Exception as exc:
        return None, f"cupy: {exc}"
    name = cupy.cuda.runtime.getDeviceProperties(0).get("name", b"?")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return Backend(
        "cupy", cupy.__version__, f"cuda:0 {name}",
        lambda n: cupy.random.default_rng(0).standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16),
        cupy.matmul,
        lambda nbytes: cupy.empty(nbytes, dtype=cupy.uint8),
        lambda dst, src: cupy.copyto(dst, src),
        cupy.cuda.Device(0).synchronize,
        "fp16",
    ), None


def choose_backend(wanted):
    """(backend, None) or (None, why none is usable)."""
    order = {"auto": (torch_backend, cupy_backend), "torch": (torch_backend,), "cupy": (cupy_backend,)}[wanted]
    why = []
    for make in order:
        backend, error = make()
        if backend is not None:
            return backend, None
        why.append(error)
    return None, "no GPU array library: " + "; ".join(why)


def run_load(backend, seconds, size):
    """Products back to back until ``seconds`` have passed (synchronising every few products so the loop
    stops on time without starving the GPU)."""
    a, b = backend.matrix(size), backend.matrix(size)
    backend.matmul(a, b)  # warm-up: the first product pays for the library's setup
    backend.sync()
    print(LOAD_STARTED, flush=True)  # the caller samples the clock from here on, not during the imports
    products, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(8):
            backend.matmul(a, b)
        backend.sync()
        products += 8
    elapsed = time.perf_counter() - started
    print(LOAD_ENDED, flush=True)  # the caller keeps no reading taken after this
    return {"products": products, "seconds": round(elapsed, 4), "size": size, "dtype": backend.dtype,
            "tflops": round(2.0 * size ** 3 * products / elapsed / 1e12, 3)}


def run_bandwidth(backend, mib, iterations):
    nbytes = int(mib) << 20
    src, dst = backend.buffer(nbytes), backend.buffer(nbytes)
    for _ in range(3):  # warm-up
        backend.copy(dst, src)
    backend.sync()
    started = time.perf_counter()
    for _ in range(iterations):
        backend.copy(dst, src)
    backend.sync()
    elapsed = time.perf_counter() - started
    return {"bytes_copied": nbytes * iterations, "copy_bytes": nbytes, "iterations": iterations,
            "seconds": round(elapsed, 6), "bandwidth_bytes_s": 2.0 * nbytes * iterations / elapsed,
            "method": "device-to-device copy, read + write counted"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    load = sub.add_parser("load", help="a fixed matmul load for --seconds")
    load.add_argument("--seconds", type=float, default=3.0)
    load.add_argument("--size", type=int, default=4096)
    bw = sub.add_parser("bandwidth", help="device-to-device copy bandwidth")
    bw.add_argument("--mib", type=int, default=1024)
    bw.add_argument("--iterations", type=int, default=20)
    for p in (load, bw):
        p.add_argument("--backend", choices=BACKENDS, default="auto")
    args = parser.parse_args(argv)
    if args.mode == "load" and not args.seconds > 0:
        parser.error(f"--seconds must be > 0, got {args.seconds!r}")
    backend, error = choose_backend(args.backend)
    out = {"mode": args.mode, "backend": None, "backend_version": None, "device": None, "error": error}
    if backend is None:
        print(json.dumps(out, sort_keys=True))
        return RC_NO_BACKEND
    out.update(backend=backend.name, backend_version=backend.version, device=backend.device)
    if args.mode == "load":
        out.update(run_load(backend, args.seconds, args.size))
    else:
        out.update(run_bandwidth(backend, args.mib, args.iterations))
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
