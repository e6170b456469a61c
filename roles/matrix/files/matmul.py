#!/usr/bin/env python3
"""The study's sanity workload: N x N FP32 matrix products, timed, warm-up excluded.

STANDALONE on purpose: it runs inside a chroot or a container that has python3 and maybe numpy, torch
or cupy, and nothing of sparkfleet. Array library, in order: torch on CUDA, cupy, numpy on the CPU.
Prints a stable block that ``sparkfleet_host.parsers.matmul`` reads, plus ``[sparkfleet-probe]`` lines that
say where it ran (hostname, /.dockerenv, device and inode of /) so tests can prove native vs container.

    python3 matmul.py --model NAME [--size N] [--iterations 10] [--warmup 1] [--backend auto]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

GPU_DEFAULT_SIZE = 10000
# 10 products of 2048^2 on 2 CPU cores with an ordinary BLAS take a few seconds at most.
CPU_DEFAULT_SIZE = 2048
BACKENDS = ("auto", "torch", "cupy", "numpy")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling module, copied with the scripts
from sparkfleet_probe import probe_lines  # noqa: E402

NL = "\n"


class Backend:
    """One array library: make a matrix, multiply, wait for the device."""

    def __init__(
        self,
        name: str,
        version: str,
        device: str,
        make: Callable[[int], object],
        matmul: Callable[[object, object], object],
        sync: Callable[[], None],
        on_gpu: bool,
    ) -> None:
        self.name, self.version, self.device = name, version, device
        self.make, self.matmul, self.sync, self.on_gpu = make, matmul, sync, on_gpu


def torch_backend() -> Backend | None:
    try:
        import torch
    except Exception:  # any import failure (missing CUDA libs too) means: not usable here
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda:0")
    gen = torch.Generator(device=dev).manual_seed(0)
    return Backend(
        "torch",
        torch.__version__,
        f"cuda:0 {torch.cuda.get_device_name(0)}",
        lambda n: torch.rand((n, n), generator=gen, device=dev, dtype=torch.float32),
        torch.matmul,
        torch.cuda.synchronize,
        True,
    )


def cupy_backend() -> Backend | None:
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return None
    if count < 1:
        return None
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props.get("name", b"?")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    rng = cupy.random.default_rng(0)
    return Backend(
        "cupy",
        cupy.__version__,
        f"cuda:0 {name}",
        lambda n: rng.random((n, n), dtype=cupy.float32),
        cupy.matmul,
        cupy.cuda.Device(0).synchronize,
        True,
    )


def numpy_backend() -> Backend | None:
    try:
        import numpy
    except Exception:
        return None
    rng = numpy.random.default_rng(0)
    return Backend(
        "numpy",
        numpy.__version__,
        f"cpu ({os.cpu_count() or '?'} cores)",
        lambda n: rng.random((n, n), dtype=numpy.float32),
        numpy.matmul,
        lambda: None,
        False,
    )


def choose_backend(wanted: str) -> Backend | None:
    order = {
        "auto": (torch_backend, cupy_backend, numpy_backend),
        "torch": (torch_backend,),
        "cupy": (cupy_backend,),
        "numpy": (numpy_backend,),
    }[wanted]
    for make in order:
        backend = make()
        if backend is not None:
            return backend
    return None


def time_products(backend: Backend, size: int, warmup: int, iterations: int) -> list[float]:
    a, b = backend.make(size), backend.make(size)
    backend.sync()
    for _ in range(warmup):
        backend.matmul(a, b)
    backend.sync()
    timings = []
    for _ in range(iterations):
        start = time.perf_counter()
        backend.matmul(a, b)
        backend.sync()
        timings.append(time.perf_counter() - start)
    return timings


def report(args: argparse.Namespace, backend: Backend, size: int, timings: list[float]) -> list[str]:
    mean = sum(timings) / len(timings)
    gflops = 2.0 * size**3 / mean / 1e9
    lines = [
        "=== sparkfleet matmul ===",
        f"model: {args.model}",
        f"backend: {backend.name}",
        f"backend_version: {backend.version}",
        f"device: {backend.device}",
        "dtype: float32",
        f"size: {size}",
        f"warmup: {args.warmup}",
        f"iterations: {len(timings)}",
    ]
    lines += [f"iteration {i}/{len(timings)}: {t:.9f} s" for i, t in enumerate(timings, 1)]
    lines += [f"mean_s: {mean:.9f}", f"gflops: {gflops:.3f}", "status: ok", "=== end sparkfleet matmul ==="]
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        type=int,
        default=None,
        help=f"matrix side N (default {GPU_DEFAULT_SIZE} on a GPU, {CPU_DEFAULT_SIZE} on the CPU)",
    )
    parser.add_argument("--iterations", type=int, default=10, help="measured products (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured products first (default 1)")
    parser.add_argument("--model", default="", help="model name, echoed so provenance can be checked")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="array library (default: best found)")
    args = parser.parse_args(argv)
    if args.size is not None and args.size < 1:
        parser.error("--size must be at least 1")
    if args.iterations < 1 or args.warmup < 0:
        parser.error("--iterations must be at least 1 and --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for line in probe_lines():
        print(line, flush=True)
    backend = choose_backend(args.backend)
    if backend is None:
        print(
            f"matmul: error: no usable array library for --backend {args.backend} "
            "(need torch with CUDA, cupy, or numpy)",
            file=sys.stderr,
        )
        return 3
    size = args.size or (GPU_DEFAULT_SIZE if backend.on_gpu else CPU_DEFAULT_SIZE)
    timings = time_products(backend, size, args.warmup, args.iterations)
    print("\n".join(report(args, backend, size, timings)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
