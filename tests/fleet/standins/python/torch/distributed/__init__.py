"""torch.distributed: the default process group over the "nccl" backend, as the NCCL test uses it
(PyTorch 2.9's torch/distributed/distributed_c10d.py and torch/distributed/rendezvous.py).

``init_process_group("nccl", rank=, world_size=, timeout=)`` rendezvous through env:// (MASTER_ADDR, MASTER_PORT;
RANK and WORLD_SIZE where not given) on a TCP store (_store.py: rank 0 waits there for every rank), then checks for
a GPU as ProcessGroupNCCL's constructor does. As in PyTorch, NCCL's communicator is created lazily, at the first
collective: that is when NCCL prints its ``NCCL_DEBUG`` lines and picks its network (_fabric.py).

``all_reduce(tensor)`` (sum, in place, blocking from the CPU's side as NCCL's enqueue is): the ranks' values are
really exchanged and summed, then the modelled duration is queued on the CUDA stream (events around it measure it).
``barrier()`` is an exchange and a collective's latency, and waits for the stream (ProcessGroupNCCL's barrier
synchronises its stream with the CPU). ``destroy_process_group()`` closes the sockets. Error texts as PyTorch's.
"""

from __future__ import annotations

import os

from .. import _fabric, _gpu
from ._store import TCPStore, backend_error

#: torch's default_pg_nccl_timeout (torch/distributed/constants.py): ten minutes.
DEFAULT_TIMEOUT_S = 600.0

_group = None


class _DefaultGroup:
    def __init__(self, store: TCPStore, rank: int, world: int, timeout_s: float) -> None:
        self.store, self.rank, self.world, self.timeout_s = store, rank, world, timeout_s
        self.comm, self.seq = None, 0

    def communicator(self) -> _fabric.Communicator:
        if self.comm is None:
            comm = _fabric.Communicator(self.rank, self.world, self.store.local_addr())
            comm.announce()
            if comm.error:
                raise backend_error("invalid usage (run with NCCL_DEBUG=WARN for details)",
                                    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                                    comm.error)
            self.comm = comm
        return self.comm

    def exchange(self, op: str, numel: int, fill) -> list:
        """Every rank's contribution to this collective; ranks that are not at the same one fail, naming both."""
        self.seq += 1
        mine = {"op": op, "seq": self.seq, "numel": numel, "fill": fill}
        work = (f"WorkNCCL(SeqNum={self.seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
                f"Timeout(ms)={int(self.timeout_s * 1000)})")
        values = self.store.exchange(mine, self.timeout_s, work)
        for rank, other in enumerate(values):
            if (other["op"], other["seq"], other["numel"]) != (op, self.seq, numel):
                raise RuntimeError(f"Detected mismatch between collectives on ranks. Rank {self.rank} is running "
                                   f"collective: {mine}, but Rank {rank} is running collective: {other}.")
        return values


def _default() -> _DefaultGroup:
    if _group is None:
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    return _group


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment variable {name} "
                         "expected, but not set")
    return value


def init_process_group(backend=None, init_method=None, timeout=None, world_size: int = -1, rank: int = -1,
                       store=None, group_name: str = "", pg_options=None, device_id=None) -> None:
    global _group
    if _group is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if str(backend).lower() != "nccl" or init_method not in (None, "env://") or store is not None \
            or group_name or pg_options is not None or device_id is not None:
        raise NotImplementedError("torch stand-in: init_process_group('nccl', rank=, world_size=, timeout=) "
                                  "through env:// only")
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else timeout.total_seconds()
    rank = int(rank) if rank >= 0 else int(_env("RANK"))
    world = int(world_size) if world_size >= 0 else int(_env("WORLD_SIZE"))
    tcp_store = TCPStore(_env("MASTER_ADDR"), int(_env("MASTER_PORT")), rank, world, timeout_s)
    if not _gpu.present():
        tcp_store.close()
        raise ValueError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!")
    _group = _DefaultGroup(tcp_store, rank, world, timeout_s)


def all_reduce(tensor, op=None, group=None, async_op: bool = False) -> None:
    if op is not None or group is not None or async_op:
        raise NotImplementedError("torch stand-in: all_reduce(tensor) only (sum, default group, blocking)")
    pg = _default()
    if tensor._device.type != "cuda":
        raise RuntimeError(f"No backend type associated with device type {tensor._device.type}")
    comm = pg.communicator()
    total = 0.0
    for value in pg.exchange("ALLREDUCE", tensor._numel, tensor._fill):
        total = tensor._dtype._cast(total + value["fill"])  # reduced in the tensor's dtype, as NCCL does
    if _fabric.corrupts():
        total += 1.0  # a corruption on the way: the sum is off
    tensor._fill = tensor._dtype._cast(total)
    _gpu.launch(comm.all_reduce_seconds(tensor._nbytes()))


def barrier(group=None, async_op: bool = False, device_ids=None) -> None:
    if group is not None or async_op or device_ids is not None:
        raise NotImplementedError("torch stand-in: barrier() of the default group only")
    pg = _default()
    pg.communicator()
    pg.exchange("BARRIER", 1, 0.0)
    _gpu.launch(_fabric.latency_seconds())
    _gpu.synchronize()


def destroy_process_group(group=None) -> None:
    global _group
    if group is not None:
        raise NotImplementedError("torch stand-in: destroy_process_group() of the default group only")
    if _group is None:
        raise ValueError("Invalid process group specified")
    if _group.comm is not None:
        _group.comm.destroyed()
    _group.store.close()
    _group = None


__all__ = ["all_reduce", "barrier", "destroy_process_group", "init_process_group"]
