"""Stand-in for PyTorch (tests only; GPU software that cannot run here): exactly the calls of sparkfleet's NCCL test
inside an engine's environment (``SCRIPT`` of plugins/module_utils/sparkfleet_host/cluster/nccl_env.py), so that
script runs for real between processes or containers of one machine: a real TCP rendezvous, a real exchange of
each rank's contribution (the sum is computed, not assumed), NCCL's ``NCCL_DEBUG=INFO`` lines, and the modelled
duration of each all-reduce really waited for.

    torch.__version__, torch.version.cuda, torch.float32, torch.device("cuda", 0)
    torch.full(shape, value, dtype=, device=), torch.zeros(count, dtype=, device=), tensor == scalar,
    torch.all(tensor).item()
    torch.cuda.is_available(), set_device(0), get_device_name(device), synchronize(), empty_cache(),
    torch.cuda.Event(enable_timing=True) .record() .synchronize() .elapsed_time(end), torch.cuda.nccl.version()
    torch.distributed: init_process_group("nccl", rank=, world_size=, timeout=), all_reduce(tensor), barrier(),
    destroy_process_group()

Signatures and behaviour as PyTorch 2.9 (pytorch/pytorch, tag v2.9.0): the factory functions' reference
(torch.full(size, fill_value, *, dtype=None, device=None), torch.zeros(*size, dtype=None, device=None)),
torch/cuda/__init__.py, torch/cuda/streams.py (Event), torch/cuda/nccl.py, torch/distributed/distributed_c10d.py and
torch/distributed/rendezvous.py; each module of this package names what it follows. Anything else is missing on
purpose: a caller that needs more fails with AttributeError rather than getting made-up behaviour (as the cupy
stand-in next to it).

Tensors are lazy: a shape, a dtype and one fill value (the test asks for up to 2 GiB; nothing of that size is ever
allocated). The CUDA device exists only where SPARKFLEET_FAKE_TORCH_CUDA is set (non-empty): elsewhere, as PyTorch on
a machine without a GPU, ``torch.cuda.is_available()`` is False, so the image's other users (the readiness probe
roles/matrix/files/gpu_probe.py tries torch, then cupy) still fall back to the cupy stand-in.

Environment (besides NCCL's own NCCL_DEBUG, NCCL_NET, NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME and the
rendezvous' MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE):
  SPARKFLEET_FAKE_TORCH_CUDA       non-empty: this process has the one CUDA device (a DGX Spark has one GPU)
  SPARKFLEET_FAKE_GPU_MODEL        gb10 (default: "NVIDIA GB10") | h100 | h200, as the nvidia-smi stand-in
  SPARKFLEET_FAKE_DEV_INFINIBAND   the directory standing for /dev/infiniband (RDMA is usable where it holds a
                                   ``uverbs*`` entry: what a container gets from --device=/dev/infiniband)
  SPARKFLEET_FAKE_NCCL_HCAS        the HCAs NCCL's NET/IB finds (default: those NCCL_IB_HCA names, else
                                   rocep1s0f0,roceP2p1s0f0); NCCL_IB_HCA then filters them as NCCL does
  SPARKFLEET_FAKE_NCCL_LINK_LAYER  their link layer as NET/IB prints it: RoCE (default) | IB | UNSPECIFIED
  SPARKFLEET_FAKE_NCCL_VERSION     NCCL's version string (default 2.27.7+cuda13.0)
  SPARKFLEET_FAKE_NCCL_BUSBW_GBS   the bus bandwidth (GB/s) of large all-reduces (default 23.5 on IB, 2.5 on Socket)
  SPARKFLEET_FAKE_NCCL_LATENCY_US  the fixed cost of one collective, in microseconds (default 30)
  SPARKFLEET_FAKE_NCCL_WRONG       non-empty and not 0: this rank's all-reduce results come out wrong (corruption)
"""

from __future__ import annotations

# distributed too, as real torch's __init__ imports it: ``import torch`` alone gives torch.distributed.
from . import cuda, distributed, version
from ._tensor import all, device, float32, full, zeros

__version__ = "2.9.0+sparkfleet.standin"

__all__ = ["__version__", "all", "cuda", "device", "distributed", "float32", "full", "version", "zeros"]
