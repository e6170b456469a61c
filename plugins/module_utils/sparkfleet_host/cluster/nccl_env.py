# Copyright: sparkfleet contributors
# Apache-2.0
"""NCCL's all-reduce inside the environment a multi-node run uses (issue 36): the test, its reading, its verdict.

The host's ``all_reduce_perf`` (the pair preflight's ``sparkfleet_pair_nccl_command``) measures the fabric with the
host's NCCL. An engine runs another NCCL: the one its image's PyTorch loads, inside its container with its docker
flags. That one can fall back to TCP sockets when the host's does not, or be another version on one node. So each
node runs :data:`SCRIPT` in the environment, through the very command a run uses (runexec.placed_command), all
nodes at once: one process per node (a Spark has one GPU), ``torch.distributed`` over NCCL, a TCP rendezvous on
rank 0's cluster address (``MASTER_ADDR``/``MASTER_PORT``, no MPI), ``NCCL_DEBUG=INFO`` with the fabric's and the
workload's variables. Every engine that goes over NCCL here (vLLM, SGLang, TensorRT-LLM) ships PyTorch in its image.

Per size (float32, sum), as nccl-tests' ``all_reduce_perf`` does (src/common.cu at
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432: ``-w`` warm-ups, then one timed loop of ``-n`` iterations, the result
checked): one checked all-reduce (rank r gives r+1, every element must be n(n+1)/2), :data:`WARMUP` warm-ups, then
:data:`ITERS` all-reduces between two CUDA events. Each rank prints its own seconds per operation; :func:`judge`
averages the ranks' times of a size (nccl-tests' ``Allreduce(&deltaSec, avg)``) and takes busbw = size / time x
2(n-1)/n (parsers/nccl.py ``bus_bandwidth``). The transport is read from each node's own ``NCCL_DEBUG=INFO`` lines
(parsers/nccl.py ``nccl_transport`` and ``transport_verdict``: sockets refused, NET/IB RoCE on each ACTIVE rail).

:func:`parse`, :func:`plan` and :func:`judge` are pure; :func:`run` never raises for a test that fails.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..parsers import nccl
from .probe_container import ProbeContainer, tail

MARK = "==sparkfleet-nccl:"
#: nccl-tests' sizes as the pair preflight's all_reduce_perf runs them (-b 8M -e 2G -f 2).
SIZES = tuple((8 << 20) << k for k in range(9))
#: nccl-tests' defaults (-w 5 -n 20).
WARMUP, ITERS = 5, 20
#: A container's start, the rendezvous (the other nodes start at about the same time) and the sweep.
TIMEOUT_S = 300.0
#: How long rank 0 waits for every rank at the rendezvous (torch.distributed's timeout), within TIMEOUT_S.
RENDEZVOUS_S = 120

#: Runs in the environment's python3 with the image's torch; configured by the environment variables set by
#: :func:`process_env`. Prints ``==sparkfleet-nccl:result== {json}`` at its end, or ``...:error== <why>``.
SCRIPT = r'''
import datetime, json, os, sys
MARK = "==sparkfleet-nccl:"
try:
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    sizes = [int(s) for s in os.environ["SPARKFLEET_NCCL_SIZES"].split(",")]
    warmup, iters = int(os.environ["SPARKFLEET_NCCL_WARMUP"]), int(os.environ["SPARKFLEET_NCCL_ITERS"])
    if not torch.cuda.is_available():
        raise RuntimeError("torch %s sees no CUDA device" % torch.__version__)
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=int(os.environ["SPARKFLEET_NCCL_RENDEZVOUS_S"])))
    rows = []
    for size in sizes:
        count = size // 4
        check = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(check)
        correct = bool(torch.all(check == world * (world + 1) / 2).item())
        del check
        buf = torch.zeros(count, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        rows.append({"size_bytes": size, "seconds": start.elapsed_time(end) / 1000.0 / iters, "correct": correct})
        del buf
        torch.cuda.empty_cache()
    version = torch.cuda.nccl.version()
    version = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    print(MARK + "result== " + json.dumps({"rank": rank, "world": world, "torch": torch.__version__,
          "cuda": torch.version.cuda, "nccl": version, "device": torch.cuda.get_device_name(device), "rows": rows}),
          flush=True)
    dist.destroy_process_group()
except BaseException as exc:
    print(MARK + "error== %s: %s" % (type(exc).__name__, " ".join(str(exc).split())[:500]), flush=True)
    sys.exit(1)
'''


def argv() -> List[str]:
    """The test as an argv for the environment's wrapper (its python3 runs :data:`SCRIPT`)."""
    return ["python3", "-c", SCRIPT]


def process_env(rank: int, world: int, master_addr: str, master_port: int, fabric_env: Optional[Mapping] = None,
                workload_env: Optional[Mapping] = None, sizes: Sequence[int] = SIZES, warmup: int = WARMUP,
                iters: int = ITERS) -> Dict[str, str]:
    """The test's variables on one node: the workload's, the node's fabric settings over them (as a run gets
    them), NCCL_DEBUG=INFO, the rendezvous (rank 0's cluster address) and the sweep."""
    env = {str(k): str(v) for k, v in dict(workload_env or {}).items()}
    env.update({str(k): str(v) for k, v in dict(fabric_env or {}).items()})
    env.update({"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1", "MASTER_ADDR": str(master_addr),
                "MASTER_PORT": str(int(master_port)), "RANK": str(int(rank)), "WORLD_SIZE": str(int(world)),
                "LOCAL_RANK": "0", "SPARKFLEET_NCCL_SIZES": ",".join(str(int(s)) for s in sizes),
                "SPARKFLEET_NCCL_WARMUP": str(int(warmup)), "SPARKFLEET_NCCL_ITERS": str(int(iters)),
                "SPARKFLEET_NCCL_RENDEZVOUS_S": str(RENDEZVOUS_S)})
    return env


def _marked(text: str, name: str) -> Optional[str]:
    prefix = "%s%s== " % (MARK, name)
    return next((line[len(prefix):].strip() for line in text.splitlines() if line.startswith(prefix)), None)


def parse(text: str) -> Dict[str, Any]:
    """One node's output read: {result (its rank's figures, or None), error (the script's own, or None),
    transport (nccl_transport of its NCCL_DEBUG lines)}."""
    raw, result = _marked(text, "result"), None
    if raw is not None:
        try:
            result = json.loads(raw)
        except ValueError:
            result = None
    return {"result": result if isinstance(result, dict) else None, "error": _marked(text, "error"),
            "transport": nccl.nccl_transport(text)}


def plan(environments: Sequence[Mapping[str, Any]], rdma_by_node: Sequence[Any]) -> List[Dict[str, Any]]:
    """Which environments the test runs in: each {name, kind, docker_flags, run, reason}. It runs in a container
    environment whose RDMA check ran and passed on every node (``rdma_by_node``: each node's cluster_rdma_env
    result, rank 0 first); when that check was left out (sparkfleet_pair_rdma_env_check false), in every container
    environment (each node then tells whether it has the image). Not in a native one (its rootfs is made by the
    matrix stage), nor where a node's RDMA check failed or could not judge (NCCL could only fall back to sockets
    there, and that is already refused)."""
    checked = [r for r in rdma_by_node if isinstance(r, Mapping) and not r.get("skipped")]
    out = []
    for env in environments:
        entry = dict(env, run=False)
        if env.get("kind") != "container":
            entry["reason"] = "the native rootfs is made by the matrix stage"
        elif not checked:
            entry.update(run=True, reason="")
        else:
            found = [next((e for e in r.get("environments") or [] if e.get("environment") == env.get("name")), None)
                     for r in checked]
            if len(checked) < len(rdma_by_node) or any(f is None for f in found):
                entry["reason"] = "RDMA inside was not checked on every node"
            elif not all(f.get("judged") for f in found):
                entry["reason"] = "the image is not on every node yet"
            elif not all(f.get("pass") for f in found):
                entry["reason"] = "RDMA is not visible inside on every node (rdma_in_environment)"
            else:
                entry.update(run=True, reason="")
        out.append(entry)
    return out


#: Why an environment is not judged at the pair preflight (named in its check, which passes).
NOT_JUDGED = "not judged here: %s; each multi-node run checks RDMA at its start"


def run(wrap: Callable[[List[str]], List[str]], timeout_s: float = TIMEOUT_S) -> Dict[str, Any]:
    """Run the test through ``wrap`` (argv -> the environment's command, its variables included) within ``timeout_s``:
    {ran, rc, output, reading, error}. Never raises: a command that cannot be built, cannot start or times out is an
    ``error`` naming why."""
    try:
        command = [str(a) for a in wrap(argv())]
    except Exception as exc:  # noqa: BLE001 (any wrapper's refusal: named, not raised)
        return {"ran": False, "rc": None, "output": "", "reading": None, "command": None,
                "error": "the environment's command could not be built: %s" % exc}
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        text = (exc.output or b"").decode("utf-8", "replace")
        return {"ran": True, "rc": None, "output": text, "reading": parse(text), "command": command,
                "error": "the test did not end within %.0f s: %s" % (timeout_s, tail(text))}
    except OSError as exc:
        return {"ran": False, "rc": None, "output": "", "reading": None, "command": command,
                "error": "the test could not start: %s" % exc}
    text = done.stdout.decode("utf-8", "replace")
    reading = parse(text)
    error = None
    if reading["result"] is None:
        error = "exit %s: %s" % (done.returncode, reading["error"] or tail(text))
    return {"ran": True, "rc": done.returncode, "output": text, "reading": reading, "command": command,
            "error": error}


def preflight_work(params: Dict[str, Any], _task: Any) -> Dict[str, Any]:
    """The cluster_nccl_env module's work: the test in each planned environment (:func:`plan`'s, ``run`` true),
    through ``docker run`` of the node's image with the environment's flags, placed as a run's process is
    (probe_container.ProbeContainer), removed after. Each: {environment, kind, judged, reason, rank, world, error,
    reading, command, log}; the raw output goes to ``<log_dir>/pair_nccl.<environment>.log`` when log_dir is given."""
    container = ProbeContainer(params["docker"], params["image"], "sparkfleet-nccl-test", "nccl")
    out = []
    for index, planned in enumerate(params["environments"]):
        # a port per environment: a rank that starts the next one early never joins the last one's rendezvous
        env = process_env(params["rank"], params["world"], params["master_addr"], params["master_port"] + index,
                          params["fabric_env"], params["workload_env"], params["sizes"] or SIZES, params["warmup"],
                          params["iters"])
        entry = {"environment": planned.get("name"), "kind": planned.get("kind"), "judged": False,
                 "rank": params["rank"], "world": params["world"], "error": None, "reading": None, "command": None,
                 "log": None}
        if not planned.get("run"):
            entry["reason"] = NOT_JUDGED % planned.get("reason")
        elif not container.has_image():
            entry["reason"] = NOT_JUDGED % "the image is not on the node yet"
        else:
            try:
                done = run(container.wrap(planned, env), float(params["timeout_s"]))
            finally:
                container.remove()
            entry.update(judged=True, reason="", error=done["error"], reading=done["reading"],
                         command=done["command"])
            if params.get("log_dir") and done["output"]:
                entry["log"] = os.path.join(params["log_dir"], "pair_nccl.%s.log" % planned.get("name"))
                os.makedirs(params["log_dir"], exist_ok=True)
                with open(entry["log"], "w") as fh:
                    fh.write(done["output"])
        out.append(entry)
    return {"changed": False, "environments": out}


# ---------------------------------------------------------------------------------------------------- verdict

Check = Tuple[str, str, Tuple[bool, str]]


def _rank_seconds(entries: Sequence[Mapping[str, Any]]) -> Dict[int, List[float]]:
    """size -> each rank's seconds per operation (ranks with a result only)."""
    by_size: Dict[int, List[float]] = {}
    for entry in entries:
        result = (entry.get("reading") or {}).get("result") or {}
        for row in result.get("rows") or []:
            by_size.setdefault(int(row["size_bytes"]), []).append(float(row["seconds"]))
    return by_size


def busbw_rows(entries: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Each size's bus bandwidth over the ranks whose results are in ``entries``: the ranks' seconds averaged (as
    nccl-tests averages deltaSec over its ranks), algbw and busbw from that (2(n-1)/n, n the ranks)."""
    rows = []
    world = max((int(((e.get("reading") or {}).get("result") or {}).get("world") or 0) for e in entries), default=0)
    for size, seconds in sorted(_rank_seconds(entries).items()):
        mean = sum(seconds) / len(seconds)
        ranks = world or len(seconds)
        rows.append({"size_bytes": size, "ranks": len(seconds), "seconds": mean,
                     "algbw_gbs": round(nccl.algorithm_bandwidth(size, mean), 3) if mean > 0 else None,
                     "busbw_gbs": round(nccl.bus_bandwidth("all_reduce", size, mean, ranks), 3) if mean > 0
                     else None})
    return rows


def _node_verdict(entry: Mapping[str, Any], hcas: Sequence[str]) -> Tuple[bool, str]:
    label = "%s (%s)" % (entry.get("environment"), entry.get("kind"))
    if not entry.get("judged"):
        return True, "%s: %s" % (label, entry.get("reason"))
    reading = entry.get("reading") or {}
    result = reading.get("result")
    if entry.get("error") or not result:
        return False, "%s: NCCL's all-reduce did not complete inside: %s" % (label, entry.get("error"))
    wrong = [int(r["size_bytes"]) for r in result.get("rows") or [] if not r.get("correct")]
    if wrong:
        return False, "%s: the all-reduce's result was wrong at %s bytes" % (label, ", ".join(map(str, wrong)))
    ok, reason = nccl.transport_verdict(reading.get("transport") or {}, list(hcas))
    return ok, "%s: NCCL %s (torch %s): %s" % (label, result.get("nccl"), result.get("torch"), reason)


def judge(names: Sequence[str], results: Sequence[Any], hcas_by_node: Sequence[Sequence[str]],
          floor_gbs: float) -> Tuple[List[Check], Dict[str, Dict[str, Optional[str]]]]:
    """The checks of the test in each environment, from each node's cluster_nccl_env result (``results``, rank 0
    first, in ``names``' order), and each environment's NCCL version per node for parity (environments judged on
    every node only). Per node ``nccl_in_environment``: completed, correct, the transport (sockets refused, NET/IB
    RoCE on the node's ACTIVE rail HCAs ``hcas_by_node``); on rank 0 ``nccl_busbw_in_environment``: busbw at
    >= 1 GiB from the ranks' averaged times, at or above ``floor_gbs``."""
    checks: List[Check] = []
    versions: Dict[str, Dict[str, Optional[str]]] = {}
    per_env: Dict[str, List[Mapping[str, Any]]] = {}
    for name, result, hcas in zip(names, results, hcas_by_node):
        if not isinstance(result, Mapping) or result.get("skipped"):
            continue
        for entry in result.get("environments") or []:
            checks.append(("nccl_in_environment", name, _node_verdict(entry, hcas)))
            per_env.setdefault(str(entry.get("environment")), []).append(dict(entry, node=name))
    for env, entries in per_env.items():
        if len(entries) != len(names) or not all(e.get("judged") for e in entries):
            continue
        done = [e for e in entries if (e.get("reading") or {}).get("result")]
        if len(done) != len(entries):
            continue  # a node that did not complete is refused above; its rank's time and version are unknown
        versions[env] = {e["node"]: e["reading"]["result"].get("nccl") for e in entries}
        large = [r for r in busbw_rows(done) if r["size_bytes"] >= nccl.GIB and r["busbw_gbs"] is not None]
        if not large:
            verdict = (False, "%s: no all-reduce of 1 GiB or more was timed inside" % env)
        else:
            low = min(large, key=lambda r: r["busbw_gbs"])
            verdict = (low["busbw_gbs"] >= floor_gbs, "%s: all-reduce bus bandwidth at >= 1 GiB %.2f GB/s inside "
                       "(at %d bytes, %d ranks; floor %.2f)" % (env, low["busbw_gbs"], low["size_bytes"],
                                                                low["ranks"], floor_gbs))
        checks.append(("nccl_busbw_in_environment", names[0], verdict))
    return checks, versions
