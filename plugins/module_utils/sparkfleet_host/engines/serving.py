# -*- coding: utf-8 -*-
"""The built-in engines' table, and serving runs: the engine servers, their profile points, a server's life.

A serving run (docs: the serving contract, issue 25) is one engine server lifetime in the run's environment,
driven by a load generator on the host (serving_client) through every point of the workload's profile. This
file holds the built-in engines: :data:`ENGINES`, every layer's one table (a server's argv, default port,
readiness path, version command; a job's nominal run time; extended by adding a row; a campaign's own engines
travel in the workload as ``engine_spec``, :func:`engine_spec` reads either),
:func:`profile_points` (the profile crossed, named, in the run's seeded shuffled order), and
:class:`ServerProcess`, which starts the server argv (already wrapped for its environment by run_launch's
Launcher) in its own process group, waits until it answers on 127.0.0.1, and always stops it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
import signal
import string
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from ..contract.fields import REQUIRED, Field, field_problem
from ..run import listeners
from ..sensors import fingerprint, procstat
from . import gguf_tokenizer, serving_client, serving_provenance

#: The server listens here only: the client runs on the same host, nothing else reaches it.
LOOPBACK = "127.0.0.1"
#: How long a stopped server gets between SIGTERM and SIGKILL (engines free GPU memory on the way out).
STOP_GRACE_S = 30.0
#: After the group's SIGKILL: how long to wait for its members to have exited (a killed process keeps its memory
#: until the kernel has torn it down; the next run must not start beside it).
GROUP_GONE_S = 10.0
#: Readiness polling: period and the limit of one HTTP probe.
POLL_S = 0.5
PROBE_TIMEOUT_S = 2.0
#: How much of server.log a failure quotes.
LOG_TAIL_BYTES = 2000
#: llama.cpp: context tokens per slot beyond depth + pp + tg (chat template, warmup and probe turns).
LLAMACPP_SLOT_MARGIN = 512


class ServingError(Exception):
    """A serving run cannot go on: the server never became ready, or its settings are wrong."""


# ------------------------------------------------------------------------------------ engines


def _has_flag(args: list, names) -> bool:
    """Whether ``args`` already set one of the flag ``names`` (``--flag value`` or ``--flag=value``)."""
    return any(str(a).split("=", 1)[0] in names for a in args)


# What sparkfleet sets on a server's command line and reads back elsewhere: a workload's server_args naming one of
# these flags is refused at validate (campaign.py reads :func:`overriding_args`) and again on the host. Each engine
# row's ``owns``: ((flags, what sets it instead), ...); ``abbrev``: its parser is argparse's, which takes any
# unambiguous prefix of a long flag (``--po`` for ``--port``) and, in vLLM's, ``_`` for ``-``.
#: What sets each owned value instead, as the refusal says it.
SETS_PORT = "use the workload's port field"
SETS_HOST = "the server listens on %s only, where the client on the host reaches it" % LOOPBACK
SETS_MODEL = "use the campaign's model (its path, or its gguf for llama.cpp)"
SETS_SERVED = "use the workload's served_model_name field"


#: llama.cpp's flags of the context and of the slots (common/arg.cpp): server_args naming one replaces
#: sparkfleet's value.
LLAMACPP_CTX_FLAGS = ("-c", "--ctx-size")
LLAMACPP_SLOT_FLAGS = ("-np", "--parallel")


def flag_value(args: list, names) -> Optional[str]:
    """The value ``args`` give the flag ``names`` (``--flag value`` or ``--flag=value``; the last one wins, as in
    llama.cpp's parser), else None."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = str(arg).partition("=")
        if name in names:
            found = value if eq else (str(args[i + 1]) if i + 1 < len(args) else None)
    return found


def _positive_int(text) -> Optional[int]:
    try:
        value = int(str(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def llamacpp_sizing(workload: dict) -> dict:
    """What llama-server's KV cache holds for this workload and why: ``ctx`` (its -c, in tokens; None when the
    workload's server_args give ``-c 0``, the model's own context, or no number), ``slots`` (its -np),
    ``per_slot`` (the tokens each slot holds: ctx / slots), ``point`` (the point that needs ``per_slot``; None
    when server_args give -c) and ``given`` (which of -c and -np server_args set). ValueError for a malformed
    profile.

    The rule: each request of a point takes a slot of depth + pp + tg + LLAMACPP_SLOT_MARGIN tokens, a point's
    requests run at once, and the points one after another. So -np is the highest concurrency (unless server_args
    give -np) and every slot must hold the deepest point, whichever slot its request lands in: -c = slots x
    (deepest depth + pp + tg + margin). That is also what the points need at once, not a worst case stacked on
    one: the profile crosses its axes, so its deepest point runs at the highest concurrency, every slot full."""
    points = profile_points(workload)
    extra = [str(a) for a in workload.get("server_args") or []]
    given_slots = flag_value(extra, LLAMACPP_SLOT_FLAGS)
    given_ctx = flag_value(extra, LLAMACPP_CTX_FLAGS)
    # -np -1 (llama.cpp's auto) or no number: the highest concurrency decides how many requests run at once
    slots = _positive_int(given_slots) or max(p["concurrency"] for p in points)
    point = max(points, key=lambda p: (p["depth"] + p["pp"] + p["tg"], p["concurrency"]))
    per_slot = point["depth"] + point["pp"] + point["tg"] + LLAMACPP_SLOT_MARGIN
    if given_ctx is None:
        ctx = slots * per_slot
    else:
        ctx, point = _positive_int(given_ctx), None
        per_slot = ctx // slots if ctx else None
    return {"ctx": ctx, "slots": slots, "per_slot": per_slot, "point": point,
            "given": [f for f, v in (("-c", given_ctx), ("-np", given_slots)) if v is not None]}


def _llamacpp_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    # ggml-org/llama.cpp common/arg.cpp (commit 145b628): -m, --host, --port, -c/--ctx-size (the TOTAL context
    # of all slots), -np/--parallel ("number of server slots"), -ngl/--n-gpu-layers, -a/--alias. With -np N each
    # slot gets n_ctx / N tokens (src/llama-context.cpp: n_ctx_seq = n_ctx / n_seq_max): llamacpp_sizing gives
    # -c = the deepest point's slot x N, the most tokens one point needs at once (its requests are concurrent).
    # Why not --kv-unified (one pool shared by the slots, each free to grow to all of -c): llama.cpp allocates
    # the whole -c at start either way, and a profile crosses its axes, so its deepest point runs at the highest
    # concurrency and needs every slot full at once: the pool would be the same size. And one unified buffer
    # makes each sequence's attention span the other sequences' cells, computed and discarded (llama.cpp #14363,
    # which added the split streams llama-server uses with an explicit -np for that reason): it would slow the
    # concurrent points being measured. server_args [-kvu] asks for it all the same. Whether -c fits the host's
    # memory is checked at plan time (plugin_utils/estimate.py kv_problems), from the model's shape.
    sizing = llamacpp_sizing(workload)
    argv = ["llama-server", "-m", str(model["path"]), "--host", LOOPBACK, "--port", str(port)]
    if not _has_flag(extra, LLAMACPP_CTX_FLAGS):
        argv += ["-c", str(sizing["ctx"])]
    if not _has_flag(extra, LLAMACPP_SLOT_FLAGS):
        argv += ["-np", str(sizing["slots"])]
    if not _has_flag(extra, ("-ngl", "--gpu-layers", "--n-gpu-layers")):
        argv += ["-ngl", "999"]  # every layer on the GPU (older builds default to none)
    return argv + ["--alias", served] + extra


#: llama.cpp common/arg.cpp (tools/server/README.md): -m/--model and the other model sources (-mu/--model-url,
#: -hf/-hfr/--hf-repo, -dr/--docker-repo), --host, --port (no short form: -p is --prompt), -a/--alias. Its own
#: parser: exact names only. -c, -np and -ngl are sparkfleet's defaults, which server_args may replace.
LLAMACPP_OWNS = ((("--port",), SETS_PORT), (("--host",), SETS_HOST),
                 (("-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-dr", "--docker-repo"),
                  SETS_MODEL),
                 (("-a", "--alias"), SETS_SERVED))


def _vllm_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    # vllm-project/vllm vllm/entrypoints/openai/cli_args.py (commit 789340f): --host, --port; the model is
    # `vllm serve`'s positional model_tag; --served-model-name from vllm/engine/arg_utils.py.
    return ["vllm", "serve", _model_source(model), "--host", LOOPBACK, "--port", str(port),
            "--served-model-name", served] + extra


#: vLLM: --host, --uds (a Unix socket instead of host:port), --port, --model (moved to the positional model_tag by
#: FlexibleArgumentParser), --served-model-name; argparse (abbreviations, ``_`` for ``-``).
VLLM_OWNS = ((("--port",), SETS_PORT), (("--host", "--uds"), SETS_HOST), (("--model",), SETS_MODEL),
             (("--served-model-name",), SETS_SERVED))


def _sglang_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    # sgl-project/sglang python/sglang/srt/server_args.py (commit 469c63e): --model-path, --host, --port,
    # --served-model-name.
    return ["python3", "-m", "sglang.launch_server", "--model-path", _model_source(model), "--host", LOOPBACK,
            "--port", str(port), "--served-model-name", served] + extra


#: SGLang: --model-path (alias --model), --host, --port, --served-model-name; argparse (abbreviations).
SGLANG_OWNS = ((("--port",), SETS_PORT), (("--host",), SETS_HOST), (("--model-path", "--model"), SETS_MODEL),
               (("--served-model-name",), SETS_SERVED))


def _trtllm_serve_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    # NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py (commit 00209af): `trtllm-serve MODEL --host --port`;
    # no served-name option: the server names the model after the directory (see served_name).
    return ["trtllm-serve", _model_source(model), "--host", LOOPBACK, "--port", str(port)] + extra


#: trtllm-serve (click: exact names): --host, --port; the model is its positional argument.
TRTLLM_SERVE_OWNS = ((("--port",), SETS_PORT), (("--host",), SETS_HOST))


def job_engine(cpu: bool, run_s: float, kv_grows: bool = False) -> dict:
    """A built-in engine that runs one job per run (its output read by its own parser, parsers/detect.py)."""
    return {"serves": False, "cpu": cpu, "run_s": run_s, "kv_grows": kv_grows, "launcher": None}


def serving_engine(argv, port: int, kv_log: str, owns: tuple, abbrev: bool, version: tuple, start_s: float,
                   cpu: bool = False, ready_path: str = "/health", served_default: Optional[str] = None,
                   launcher: Optional[dict] = None) -> dict:
    """A built-in engine that serves: a server measured through a profile of points by a load generator."""
    return {"serves": True, "managed": True, "cpu": cpu, "argv": argv, "port": port, "ready_path": ready_path,
            "kv_log": kv_log, "served_default": served_default, "owns": owns, "abbrev": abbrev, "version": version,
            "start_s": start_s, "kv_grows": False, "launcher": launcher}


def unmanaged_engine() -> dict:
    """The serving row of a server sparkfleet does not start (``managed`` false): the workload's ``endpoint``
    names its URL and model; no command line, port, readiness path, KV log or version command of its own (the
    host runs the client only, which needs no GPU of its own: ``cpu``)."""
    return {"serves": True, "managed": False, "cpu": True, "argv": None, "port": None, "ready_path": None,
            "kv_log": None, "served_default": None, "owns": (), "abbrev": False, "version": None, "start_s": 0.0,
            "kv_grows": False, "launcher": None}


#: A launcher argv element that stands for the engine's own server argv (the workload's server_args included),
#: spliced in where it stands: a worker of vLLM or SGLang runs the engine's server with the multi-node flags added;
#: a head argv holding it wraps the server (mpirun ... trtllm-llmapi-launch {server}) instead of adding flags to it.
SERVER_ARGV = "{server}"
#: A head argv element that stands for ``-x NAME`` for each variable of the run's environment (OpenMPI's mpirun
#: gives its remote ranks none of its own environment unless told, and the run's variables must reach every rank).
FORWARDED_ENV = "{forwarded_env}"
#: The placeholders a launcher's worker and head argv may hold (str.format fields): the node's ``rank`` (0 on the
#: head), ``nnodes`` (the cluster's nodes), ``head_address`` (rank 0's address on the cluster's network),
#: ``address`` (this node's), ``port`` (the launcher's: the workers' port, or rank 0's rendezvous port), the
#: ``model`` (its path, else its Hugging Face id, else its name), the ``served`` model name and, on the head only,
#: ``endpoints`` (address:port of every worker, comma-joined) and ``hosts`` (every node's address:1, rank 0's first:
#: an MPI host list of one slot per node, a Spark having one GPU).
LAUNCHER_PLACEHOLDERS = ("rank", "nnodes", "head_address", "address", "port", "model", "served", "endpoints", "hosts")


def nodes_launcher(worker: Optional[list], worker_port: Optional[int], head: list, owns: tuple,
                   port: Optional[int] = None, transport: str = "nccl") -> dict:
    """How an engine spans several nodes by its own runtime, for one topology: each worker runs ``worker`` (argv,
    :data:`LAUNCHER_PLACEHOLDERS`; :data:`SERVER_ARGV` for the engine's own server argv), or nothing of its own when
    None (rank 0's launcher starts its ranks: mpirun over SSH); rank 0 runs the engine's server with ``head`` added,
    or ``head`` itself when it holds :data:`SERVER_ARGV` (a wrapper around the server). ``worker_port``: the port a
    worker is ready on once it accepts; None, a worker that answers nothing before rank 0 has joined it (a
    torch.distributed rank waits for its peers): then it is only checked to be running after a settle time, and rank
    0's readiness is the whole cluster's. ``port`` fills {port} (default: ``worker_port``). ``owns``: the flags
    sparkfleet sets on these argv, refused in server_args. ``transport``: what the ranks' tensors cross the nodes
    over, ``nccl`` (RDMA when the environment sees it, else NCCL's silent TCP fallback: the run checks RDMA in its
    environment first, cluster/rdma_env.py) or ``tcp`` (plain sockets, nothing to check)."""
    return {"worker": None if worker is None else list(worker), "worker_port": worker_port, "head": list(head),
            "owns": owns, "port": worker_port if port is None else port, "refused": None, "transport": transport}


def unbuilt_launcher(why: str) -> dict:
    """A topology an engine's own runtime has but sparkfleet cannot launch yet: ``refused`` says why (campaign
    validation refuses it, naming that)."""
    return {"worker": None, "worker_port": None, "head": None, "owns": (), "port": None, "refused": why,
            "transport": None}


# Several nodes by the engines' own runtimes. A DGX Spark has one GPU: the tensor- or pipeline-parallel degree is the
# number of nodes. vLLM without Ray (spark-arena/sparkrun src/sparkrun/runtimes/vllm_distributed.py, commit
# 0041b8f: every node `vllm serve M --nnodes N --node-rank r --master-addr <head> --master-port P`, workers add
# --headless). vllm-project/vllm: vllm/config/parallel.py (commit 840e797) ParallelConfig.nnodes, node_rank,
# master_addr, master_port (default 29501) "for multi-node distributed inference when distributed_executor_backend
# is mp", the flags --nnodes/-n, --node-rank/-r, --master-addr, --master-port, --tensor-parallel-size/-tp and
# --pipeline-parallel-size/-pp of vllm/engine/arg_utils.py's ParallelConfig group;
# vllm/entrypoints/openai/cli_args.py (commit 789340f) make_arg_parser: "--headless", action="store_true";
# vllm/entrypoints/cli/serve.py (commit 00a5fdd): --headless runs no API server (api_server_count 0,
# run_headless) and, on node_rank_within_dp > 0, "Run headless workers (for multi-node PP/TP)": a worker opens no
# HTTP port, and waits for rank 0 at master_addr:master_port.
VLLM_NODE_FLAGS = ["--nnodes", "{nnodes}", "--node-rank", "{rank}", "--master-addr", "{head_address}",
                   "--master-port", "{port}"]
VLLM_MASTER_PORT = 29501
VLLM_NODES_OWN = ((("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp"),
                   "the workload's topology on its cluster (one GPU per node: the degree is the number of nodes)"),
                  (("--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port", "--headless"),
                   "the workload's cluster (sparkfleet starts every node)"))


def vllm_nodes(size_flag: str) -> dict:
    """vLLM across the nodes without Ray, ``size_flag`` (tensor or pipeline parallel) the number of nodes."""
    return nodes_launcher([SERVER_ARGV, size_flag, "{nnodes}"] + VLLM_NODE_FLAGS + ["--headless"], None,
                          [size_flag, "{nnodes}"] + VLLM_NODE_FLAGS, VLLM_NODES_OWN, port=VLLM_MASTER_PORT)


# SGLang (sparkrun src/sparkrun/runtimes/sglang.py, commit 0041b8f: `python3 -m sglang.launch_server --model-path M
# --tp-size N --dist-init-addr <head>:25000 --nnodes N --node-rank r`; only rank 0 serves HTTP). sgl-project/sglang
# docs/advanced_features/server_arguments.md (commit b36e8e1, generated from python/sglang/srt/server_args.py):
# "--tensor-parallel-size, --tp-size", "--pipeline-parallel-size, --pp-size", and "To run tensor parallelism on
# multiple nodes, add --nnodes 2 ... --dist-init-addr sgl-dev-0:50000 --nnodes 2 --node-rank 0" (1 on the other);
# server_args.py's "Multi-node distributed serving" group: "--dist-init-addr" (alias "--nccl-init-addr"), "--nnodes",
# "--node-rank". A rank >= 1 runs no tokenizer (python/sglang/srt/entrypoints/engine.py: "non-zero rank nodes do
# not need to run tokenizer or detokenizer") and starts only a dummy /health server once its schedulers are ready,
# which is after rank 0 has joined them: nothing to wait for before rank 0 starts (worker_port None).
SGLANG_NODE_FLAGS = ["--dist-init-addr", "{head_address}:{port}", "--nnodes", "{nnodes}", "--node-rank", "{rank}"]
SGLANG_DIST_PORT = 25000
SGLANG_NODES_OWN = ((("--tensor-parallel-size", "--tp-size", "--pipeline-parallel-size", "--pp-size"),
                     "the workload's topology on its cluster (one GPU per node: the degree is the number of nodes)"),
                    (("--dist-init-addr", "--nccl-init-addr", "--nnodes", "--node-rank"),
                     "the workload's cluster (sparkfleet starts every node)"))


def sglang_nodes(size_flag: str) -> dict:
    """SGLang across the nodes, ``size_flag`` (tensor or pipeline parallel) the number of nodes."""
    return nodes_launcher([SERVER_ARGV, size_flag, "{nnodes}"] + SGLANG_NODE_FLAGS, None,
                          [size_flag, "{nnodes}"] + SGLANG_NODE_FLAGS, SGLANG_NODES_OWN, port=SGLANG_DIST_PORT)


# TensorRT-LLM by its own MPI runtime. NVIDIA/dgx-spark-playbooks nvidia/trt-llm/README.md (commit 0db7c14, "Serve
# the model"): on the primary node `mpirun -x HF_TOKEN trtllm-llmapi-launch trtllm-serve $MODEL --tp_size 2 ...
# --port 8000`, an OpenMPI hostfile naming both Sparks and passwordless SSH between them set up first (mpirun's
# rsh launcher starts its orted on the other node over SSH; sparkrun src/sparkrun/runtimes/trtllm.py, commit
# 0041b8f, wraps trtllm-serve the same way). NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/trtllm-llmapi-launch (commit
# 020c89e): each rank reads its rank from SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or PMI_ID; rank 0 runs the
# command it wraps (trtllm-serve, its MPI variables unset) beside the MGMN leader, every other rank runs
# `python3 -m tensorrt_llm.llmapi.mgmn_worker_node` until the leader stops it. tensorrt_llm/commands/serve.py (commit
# 00209af): "--tensor_parallel_size"/"--tp_size", "--pipeline_parallel_size"/"--pp_size". So rank 0 runs the whole
# launch and a worker runs nothing sparkfleet starts (worker None): `mpirun --allow-run-as-root -np N -H
# <rank0>:1,<worker>:1 -x VAR... trtllm-llmapi-launch <trtllm-serve argv> --tp_size N`. -H with one slot per node
# (a Spark has one GPU) instead of a hostfile: ranks fill the slots in order, so rank 0 (the server) is on rank 0's
# node. --allow-run-as-root: mpirun refuses root without it (the playbooks' containers and TensorRT-LLM's own
# tests, tests/integration/defs/perf, run it as root). -x: the run's environment for every rank (mpirun forwards
# none by itself). SSH to the workers is the owner's set-up, as in the playbook (non-interactive, known host keys;
# OMPI_MCA_plm_rsh_agent or ~/.ssh/config for a key or port of its own); rank 0 checks it first (cluster/rsh.py).
# Stopping rank 0's server stops mpirun, which tears its ranks down on every node (a remote orted exits with its
# ranks when mpirun's connection goes); ServerProcess.stop also kills its session, where mpirun's local ranks are.
TRTLLM_NODES_OWN = ((("--tensor_parallel_size", "--tp_size", "--pipeline_parallel_size", "--pp_size"),
                     "the workload's topology on its cluster (one GPU per node: the degree is the number of nodes)"),)
TRTLLM_MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "{nnodes}", "-H", "{hosts}", FORWARDED_ENV,
                 "trtllm-llmapi-launch"]


def trtllm_nodes(size_flag: str) -> dict:
    """trtllm-serve across the nodes by mpirun from rank 0, ``size_flag`` (tensor or pipeline parallel) the number of
    nodes: nothing started on the workers."""
    return nodes_launcher(None, None, TRTLLM_MPIRUN + [SERVER_ARGV, size_flag, "{nnodes}"], TRTLLM_NODES_OWN)


#: The built-in engines, every layer's one table (settings, campaign checks, planning, estimates and the host read
#: it; a new engine is one entry). Every engine: ``serves`` (a server through a profile of points, else one job per
#: run), ``cpu`` (it runs on a CPU too: matmul sizes itself down, hf-generate falls back to the CPU, llama.cpp has a
#: CPU build; a campaign of these alone needs no GPU), ``kv_grows`` (its KV cache, if any, grows with the sequence
#: instead of being preallocated from the free memory: the report's KV budget fit leaves its runs out),
#: ``launcher`` (how it spans several nodes by its own runtime: {topology: :func:`nodes_launcher`, or
#: :func:`unbuilt_launcher` naming why sparkfleet cannot launch it}; None: one node only).
#: A job: ``run_s``, the nominal seconds of one run (an order of magnitude for planning: a TensorRT-LLM run starts
#: the engine and loads the model). A server: ``argv`` (its command line), ``port`` (its default),
#: ``ready_path`` (an HTTP GET answering 200 once the model is loaded: llama-server's /health answers 503 while
#: loading, tools/server/README.md; vLLM, SGLang and trtllm-serve serve /health once the engine is up: trtllm
#: docs/source/commands/trtllm-serve.rst), ``kv_log`` (the KV parser, parsers/serving_kv.py, that reads its
#: server.log), ``served_default`` (the name the server answers to when the workload gives none; None: the
#: campaign's model name), ``owns``/``abbrev`` (its flags sparkfleet sets, above), ``version`` ((argv, label) of its
#: version command in the run's environment, serving_provenance parses the output) and ``start_s`` (seconds from
#: its start to its first answer, for planning: loading the weights; vLLM and SGLang also compile and capture CUDA
#: graphs, trtllm-serve builds its engine).
ENGINES = {
    "trtllm": job_engine(cpu=False, run_s=300.0),
    "matmul": job_engine(cpu=True, run_s=30.0, kv_grows=True),
    "hf-generate": job_engine(cpu=True, run_s=120.0, kv_grows=True),
    # Several nodes: llama.cpp's RPC backend (tools/rpc/README.md, rpc-server.cpp -H/--host -p/--port; common/
    # arg.cpp --rpc SERVERS): ggml-rpc-server on each worker exposes its devices, llama-server on rank 0 splits the
    # model's layers over its own device and theirs (split mode layer, the default). TCP, unauthenticated: the
    # workers listen on the cluster's own network only.
    "llama.cpp": serving_engine(_llamacpp_argv, port=8080, kv_log="llama.cpp", owns=LLAMACPP_OWNS, abbrev=False,
                                version=(["llama-server", "--version"], "llama-server --version"), start_s=60.0,
                                cpu=True, launcher={"layers": nodes_launcher(
                                    ["ggml-rpc-server", "--host", "{address}", "--port", "{port}"], 50052,
                                    ["--rpc", "{endpoints}"], ((("--rpc",), "the workers of the workload's cluster "
                                                                            "(sparkfleet starts them)"),),
                                    transport="tcp")}),
    "vllm": serving_engine(_vllm_argv, port=8000, kv_log="vllm", owns=VLLM_OWNS, abbrev=True,
                           version=(["vllm", "--version"], "vllm --version"), start_s=300.0,
                           launcher={"tensor": vllm_nodes("--tensor-parallel-size"),
                                     "pipeline": vllm_nodes("--pipeline-parallel-size")}),
    "sglang": serving_engine(_sglang_argv, port=30000, kv_log="sglang", owns=SGLANG_OWNS, abbrev=True,
                             version=(["python3", "-c", serving_provenance.PY_VERSION, "sglang", "sglang"],
                                      "the sglang package's version (python3)"), start_s=300.0,
                             launcher={"tensor": sglang_nodes("--tp-size"), "pipeline": sglang_nodes("--pp-size")}),
    "trtllm-serve": serving_engine(_trtllm_serve_argv, port=8000, kv_log="trtllm-serve", owns=TRTLLM_SERVE_OWNS,
                                   abbrev=False, version=(["python3", "-c", serving_provenance.PY_VERSION,
                                                           "tensorrt_llm", "tensorrt_llm"],
                                                          "the tensorrt_llm package's version (python3)"),
                                   start_s=600.0, launcher={"tensor": trtllm_nodes("--tp_size"),
                                                            "pipeline": trtllm_nodes("--pp_size")}),
    # Any OpenAI-compatible endpoint (issue 37): a server already running, here or elsewhere, named by the
    # workload's endpoint {url, model}; sparkfleet measures it, never starts, checks or stops it.
    "external": unmanaged_engine(),
}
#: The engine of a workload that measures a server it did not start (its ``endpoint``).
EXTERNAL = "external"


def engine_names(serves: Optional[bool] = None, cpu: Optional[bool] = None, managed: Optional[bool] = None) -> tuple:
    """The built-in engines' names in the table's order: all of them, or those that serve (``serves``), run on
    a CPU (``cpu``) or are servers sparkfleet starts (``managed``; a job engine counts as managed) as asked."""
    return tuple(name for name, row in ENGINES.items()
                 if (serves is None or row["serves"] == serves) and (cpu is None or row["cpu"] == cpu)
                 and (managed is None or row.get("managed", True) == managed))


def kv_logs() -> tuple:
    """The KV log formats a campaign's own engine can name (``kv_log``): those the built-in servers print."""
    return tuple(dict.fromkeys(ENGINES[name]["kv_log"] for name in engine_names(serves=True, managed=True)))


def managed(workload) -> bool:
    """Whether sparkfleet starts the workload's server (every serving engine but ``external``)."""
    row = _builtin((workload or {}).get("engine"))
    return row is None or row.get("managed", True)


#: What a workload's ``endpoint`` URL may carry after host:port: the OpenAI API's root, or nothing.
ENDPOINT_PATHS = ("", "/", "/v1", "/v1/")


def endpoint_problem(value) -> Optional[str]:
    """Why ``value`` is not an endpoint {url, model} (None when it is): ``url`` an http(s) URL with a host and a
    port and no path beyond an optional /v1 (no credentials, query or fragment: the URL is recorded), ``model``
    the name the server answers to."""
    if not isinstance(value, dict) or set(value) != {"url", "model"}:
        return "must be a mapping {url, model}, got %r" % (value,)
    url, model = value["url"], value["model"]
    if not isinstance(model, str) or not model.strip() or model != model.strip():
        return "model must be the served model's name (a non-empty string), got %r" % (model,)
    if not isinstance(url, str):
        return "url must be a string, got %r" % (url,)
    try:
        parts = urllib.parse.urlsplit(url)
        port_ = parts.port
    except ValueError as exc:
        return "url %r: %s" % (url, exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "url %r must be http:// or https:// with a host" % url
    if port_ is None:
        return "url %r must name its port (http://host:port)" % url
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return "url %r must carry no credentials, query or fragment (it is recorded)" % url
    if parts.path not in ENDPOINT_PATHS:
        return "url %r: path %r; give the server's root or its /v1 (the OpenAI API root)" % (url, parts.path)
    return None


#: What a run of an unmanaged server's workload records instead of its server's checks (the version command, the
#: port check, the listener, the KV figure, the provenance): none of them runs.
UNMANAGED = ("unmanaged server: sparkfleet did not start it (the workload's endpoint), so it runs no version command, "
             "port or listener check, KV parse or provenance check of it")


def unmanaged_server(workload: dict) -> dict:
    """The record's serving.server of an unmanaged server: {managed: false, url, base_url, model, note}."""
    return {"managed": False, "url": workload["endpoint"]["url"], "base_url": endpoint_root(workload),
            "model": workload["endpoint"]["model"], "note": UNMANAGED}


class Unmanaged:
    """The server of an unmanaged run as the client's loop sees it: always running (sparkfleet did not start it
    and cannot tell; a point whose client fails records why)."""

    @staticmethod
    def running() -> bool:
        return True


def endpoint_root(workload: dict) -> str:
    """The unmanaged server's OpenAI API root (``<scheme>://<host>:<port>/v1``), from the workload's endpoint."""
    parts = urllib.parse.urlsplit(workload["endpoint"]["url"])
    return "%s://%s/v1" % (parts.scheme, parts.netloc)


# A campaign's own engine (campaign field ``engines``: Ollama, LMDeploy, a custom build) arrives resolved inside
# each of its workloads as ``engine_spec``: {command, ready_path, port, served_model_name_default, kv_log}.
#: The placeholders its command may hold (str.format fields; a literal brace is written {{ or }}).
PLACEHOLDERS = ("model", "port", "host", "served_model_name")
#: A custom engine's readiness path and port when its spec names none (the OpenAI API's model list).
CUSTOM_READY_PATH = "/v1/models"
CUSTOM_PORT = 8000
#: A TCP port: the settings' port fields and the host's check (port) read it.
TCP_PORT = (1, 65535)


def command_problem(command) -> Optional[str]:
    """Why a custom engine's ``command`` cannot be expanded (None when it can): not a non-empty list of strings,
    a stray brace, a placeholder with a conversion or format spec, or unknown placeholders (all named)."""
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        return "must be a non-empty list of strings (the server's argv), got %r" % (command,)
    unknown = []
    for arg in command:
        try:
            parsed = list(string.Formatter().parse(arg))
        except ValueError as exc:
            return "%r: %s (write a literal brace as {{ or }})" % (arg, exc)
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in PLACEHOLDERS:
                unknown.append("{%s}" % name)
            elif spec or conversion:
                return "%r: {%s} takes no conversion or format spec" % (arg, name)
    if unknown:
        return "unknown placeholder%s %s (known: %s)" % ("s" if len(set(unknown)) > 1 else "",
                                                         ", ".join(sorted(set(unknown), key=unknown.index)),
                                                         ", ".join("{%s}" % p for p in PLACEHOLDERS))
    return None


def _custom_row(engine: str, spec: dict) -> dict:
    """The ENGINES row of a campaign's own engine, from its resolved spec. Raises ServingError naming the key."""
    problem = command_problem(spec.get("command"))
    problem = problem and "command " + problem
    ready_path = spec.get("ready_path") or CUSTOM_READY_PATH
    kv_log = spec.get("kv_log")
    if problem is None and not (isinstance(ready_path, str) and ready_path.startswith("/")):
        problem = "ready_path %r must start with '/'" % (ready_path,)
    if problem is None and kv_log is not None and kv_log not in kv_logs():
        problem = "kv_log %r is not one of %s" % (kv_log, ", ".join(kv_logs()))
    if problem:
        raise ServingError("engine %s: %s" % (engine, problem))
    command = list(spec["command"])

    def argv(workload: dict, model: dict, port_: int, served: str, extra: list) -> list:
        values = {"model": _model_source(model), "port": port_, "host": LOOPBACK, "served_model_name": served}
        return [arg.format(**values) for arg in command] + extra

    port_ = spec.get("port")
    return {"argv": argv, "port": CUSTOM_PORT if port_ is None else port_, "ready_path": ready_path,
            "kv_log": kv_log, "served_default": spec.get("served_model_name_default"),
            "owns": _custom_owns(command), "abbrev": False}


_PLACEHOLDER_SETS = {"port": SETS_PORT, "host": SETS_HOST, "model": SETS_MODEL, "served_model_name": SETS_SERVED}


def _custom_owns(command: list) -> tuple:
    """The flags a campaign's own engine's command gives a placeholder's value (``--port {port}``,
    ``--port={port}``, ``--bind {host}:{port}``): those are sparkfleet's, as a built-in engine's are."""
    owns = []
    for i, arg in enumerate(command):
        names = [name for _, name, _, _ in string.Formatter().parse(arg) if name in _PLACEHOLDER_SETS]
        if not names:
            continue
        if arg.startswith("-") and "=" in arg:
            flag = arg.split("=", 1)[0]
        elif i and command[i - 1].startswith("-") and "{" not in command[i - 1]:
            flag = command[i - 1]
        else:
            continue  # a positional value: nothing in server_args can name it
        owns.append(((flag,), "; ".join(dict.fromkeys(_PLACEHOLDER_SETS[n] for n in names))))
    return tuple(owns)


def owned_flag(arg, owns, abbrev: bool = False):
    """(flag, what sets it instead) when the argv element ``arg`` sets one of the ``owns`` flags (``--port``,
    ``--port=9000``; with ``abbrev``, argparse's: an abbreviation ``--po`` and ``--served_model_name``); else
    None."""
    name = str(arg).split("=", 1)[0]
    if not name.startswith("-") or name in ("-", "--"):
        return None
    long_ = name.startswith("--")
    if long_ and abbrev:
        name = "--" + name[2:].replace("_", "-")
    for flags, instead in owns:
        for flag in flags:
            if name == flag or (abbrev and long_ and len(name) > 2 and flag.startswith(name)):
                return flag, instead
    return None


def overriding_args(workload: dict) -> list:
    """Each element of the workload's server_args and client_args that sets what sparkfleet sets on that command
    line: [(field, text)], the text naming the flag, the element and what sets it instead. The server's flags are
    its engine row's ``owns``, the client's its driver's ``OWNS``; then what of the workload its client cannot
    measure (the driver's ``refusals``: AIPerf's, a depth above 0 or prefix_caching). Raises ServingError for an
    engine that is none."""
    spec, engine = engine_spec(workload), workload.get("engine")
    out = []
    owns = tuple(spec.get("owns") or ())
    if workload.get("cluster") and topology(workload) != REPLICAS:  # the flags of the engine's multi-node launch
        owns += ((spec.get("launcher") or {}).get(topology(workload)) or {}).get("owns") or ()
    checks = (("server_args", owns, spec.get("abbrev", False), "the %s server's command line" % engine),)
    try:
        drv = serving_client.driver(workload.get("client"))
        checks += (("client_args", drv.OWNS, drv.ABBREV, "%s's command line" % drv.name),)
    except ValueError:  # an unknown client is refused with its own message
        pass
    for field, owns, abbrev, where in checks:
        for arg in workload.get(field) or []:
            hit = owned_flag(arg, owns, abbrev)
            if hit:
                flag, instead = hit
                shown = flag if str(arg) == flag else "%s (as %r)" % (flag, str(arg))
                out.append((field, "%s sets %s, which sparkfleet sets on %s: %s" % (field, shown, where, instead)))
    if len(checks) > 1:  # what of the workload its client cannot measure (AIPerf: a context depth, prefix caching)
        out += drv.refusals(workload)
    return out


def engine_spec(workload: dict) -> dict:
    """The launch spec of the workload's engine, one shape for both kinds: its ENGINES row, or the row of the
    campaign's own engine its ``engine_spec`` describes. Raises ServingError for neither."""
    engine = (workload or {}).get("engine")
    row = _builtin(engine)
    if row is not None and row["serves"]:
        return row
    custom = (workload or {}).get("engine_spec")
    if not isinstance(custom, dict):
        raise ServingError("engine %r is not a serving engine (one of %s, or one of the campaign's engines)"
                           % (engine, ", ".join(engine_names(serves=True))))
    return _custom_row(str(engine), custom)


def _builtin(engine) -> Optional[dict]:
    """The engine's ENGINES row, or None (any other value, of any type: a workload's engine is not checked yet)."""
    return ENGINES.get(engine) if isinstance(engine, str) else None


def is_serving(workload) -> bool:
    """Whether the (resolved) workload is a serving run: its engine is a built-in server, or a campaign's own
    engine (its ``engine_spec`` travels with it)."""
    workload = workload or {}
    row = _builtin(workload.get("engine"))
    return bool(row and row["serves"]) or isinstance(workload.get("engine_spec"), dict)


def version_command(workload: dict):
    """(argv, label) of the workload's engine version command (its ENGINES row's ``version``), or (None, why there
    is none)."""
    engine = (workload or {}).get("engine")
    if not managed(workload):
        return None, UNMANAGED
    row = _builtin(engine)
    if row is not None and row.get("version"):
        argv, label = row["version"]
        return list(argv), label
    return None, "engine %s declares no version command sparkfleet knows" % engine


def kv_log(workload: dict) -> Optional[str]:
    """The KV parser (parsers/serving_kv.py engine name) that reads the workload's server.log; None: the
    engine's log has no format sparkfleet reads (no KV figure)."""
    return engine_spec(workload)["kv_log"]


def _model_source(model: dict) -> str:
    return str(model.get("path") or model.get("hf_id") or model["name"])


def served_name(workload: dict, model: dict) -> str:
    """The model name the client sends: the workload's served_model_name, else the engine's default (a
    campaign engine's served_model_name_default), else the campaign's model name.
    trtllm-serve cannot be told one: it answers as the model directory's basename
    (NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_server.py: ``self.model = model_dir.name``)."""
    engine = workload.get("engine")
    if not managed(workload):
        return str(workload["endpoint"]["model"])
    if engine == "trtllm-serve":
        source = _model_source(model)
        return os.path.basename(source.rstrip("/")) if os.path.isdir(source) else source
    return str(workload.get("served_model_name") or engine_spec(workload)["served_default"] or model["name"])


def port(workload: dict) -> int:
    """The server's port: the workload's, else the engine's default."""
    value = workload.get("port")
    value = engine_spec(workload)["port"] if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or not TCP_PORT[0] <= value <= TCP_PORT[1]:
        raise ServingError("workload %s: port %r is not a TCP port" % (workload.get("name"), value))
    return value


def server_argv(workload: dict, model: dict) -> list:
    """The engine server's argv (before its environment's wrapping), the workload's server_args last."""
    engine, spec = workload["engine"], engine_spec(workload)
    if engine == "llama.cpp" and not str(model.get("path") or "").endswith(".gguf"):
        raise ServingError("model %s: llama.cpp serves a .gguf file, path is %r" % (model["name"], model.get("path")))
    extra = [str(a) for a in (workload.get("server_args") or [])]
    return spec["argv"](workload, model, port(workload), served_name(workload, model), extra)


#: How a workload's run uses a cluster (workload field ``topology``): ``layers``, llama.cpp's RPC spreads the model's
#: layers over the nodes; ``tensor`` and ``pipeline``, the engine's own runtime splits it tensor-parallel or
#: pipeline-parallel across the nodes (vLLM without Ray, SGLang), one GPU per node; ``replicas``, every node serves
#: the whole model and rank 0's client spreads the requests over them in turn (run/replica_proxy.py). All but
#: ``replicas`` are an engine's launcher (its ENGINES ``launcher``, by topology); ``replicas`` takes any serving engine.
TOPOLOGIES = ("layers", "tensor", "pipeline", "replicas")
REPLICAS = "replicas"


def topology(workload: dict) -> str:
    """The workload's topology on its cluster: its own, else its engine's first launcher topology (llama.cpp:
    layers; vLLM, SGLang: tensor), else ``layers``."""
    if workload.get("topology"):
        return workload["topology"]
    row = _builtin(workload.get("engine")) or {}
    return next(iter(row.get("launcher") or ()), TOPOLOGIES[0])


def launcher_engines(topology_: Optional[str] = None) -> tuple:
    """The built-in engines sparkfleet launches across nodes by their own runtime (for ``topology_``, or any)."""
    return tuple(name for name in engine_names(serves=True)
                 if any(not spec["refused"] and topology_ in (None, t)
                        for t, spec in (ENGINES[name]["launcher"] or {}).items()))


def launcher(workload: dict) -> dict:
    """The engine's multi-node launcher for the workload's topology; ServingError naming the engine when it has
    none, or when sparkfleet cannot launch it (the registry's reason)."""
    engine, wanted = workload.get("engine"), topology(workload)
    found = ((_builtin(engine) or {}).get("launcher") or {}).get(wanted)
    if not found:
        raise ServingError("engine %s cannot spread one model over several nodes as topology %s in sparkfleet (%s: "
                           "%s; topology replicas takes any serving engine)" % (
                               engine, wanted, wanted, ", ".join(launcher_engines(wanted)) or "no engine"))
    if found["refused"]:
        raise ServingError("engine %s cannot run topology %s in sparkfleet: %s" % (engine, wanted, found["refused"]))
    return found


def starts_workers_from_rank_0(workload: dict) -> bool:
    """Whether the workload's multi-node launch starts the workers' ranks from rank 0 (mpirun, over SSH) instead of
    a worker process sparkfleet starts on each node."""
    return topology(workload) != REPLICAS and launcher(workload)["worker"] is None


def over_nccl(workload: dict) -> bool:
    """Whether the workload's multi-node run sends its tensors over NCCL (vLLM, SGLang, TensorRT-LLM tensor or
    pipeline parallel), whose RDMA must then be visible in the run's environment; llama.cpp's layers go over its
    RPC's TCP and replicas share nothing between the nodes."""
    if topology(workload) == REPLICAS:
        return False
    try:
        return launcher(workload)["transport"] == "nccl"
    except ServingError:
        return False


def cluster_problem(workload: dict) -> Optional[str]:
    """Why the workload cannot run on its cluster as its topology asks, or None."""
    try:
        if topology(workload) not in TOPOLOGIES:
            raise ServingError("topology %r is not one of %s" % (topology(workload), ", ".join(TOPOLOGIES)))
        if topology(workload) == REPLICAS:
            engine_spec(workload)
        else:
            launcher(workload)
    except ServingError as exc:
        return str(exc)
    return None


def replica_argv(workload: dict, model: dict, address: str) -> list:
    """The engine's own server on a replica node, listening on ``address`` (its --host) instead of loopback."""
    argv = server_argv(workload, model)
    if "--host" not in argv[:-1] or argv[argv.index("--host") + 1] != LOOPBACK:
        raise ServingError("engine %s: no --host %s in its server's command line to serve a replica on %s" % (
            workload.get("engine"), LOOPBACK, address))
    argv[argv.index("--host") + 1] = address
    return argv


def launcher_argv(template: list, workload: dict, model: dict, values: dict, env_names=()) -> list:
    """A launcher's argv ``template`` filled: :data:`SERVER_ARGV` spliced as the engine's server argv,
    :data:`FORWARDED_ENV` as ``-x NAME`` for each of ``env_names``, each other element's
    :data:`LAUNCHER_PLACEHOLDERS` from ``values`` (with the model and the served name)."""
    values = dict(values, model=_model_source(model), served=served_name(workload, model))
    if values.get("head_address") is None and any("{head_address}" in a or "{hosts}" in a for a in template):
        raise ServingError("engine %s, topology %s: rank 0's address on the cluster's network is not known (the "
                           "workers and rank 0 are told it by cluster_run.yml)" % (workload.get("engine"),
                                                                                  topology(workload)))
    argv = []
    for arg in template:
        if arg == SERVER_ARGV:
            argv += server_argv(workload, model)
        elif arg == FORWARDED_ENV:
            argv += [part for name in env_names for part in ("-x", str(name))]
        else:
            argv.append(arg.format(**values))
    return argv


def worker_spec(workload: dict, model: dict, address: str, rank: int = 1, nnodes: int = 2,
                head_address: Optional[str] = None) -> dict:
    """What worker ``rank`` (1..nnodes-1) of the workload's cluster runs on ``address``: {argv, port, ready_url}.
    A launcher's topology: its worker argv (None: nothing to start there, rank 0's launcher starts the rank);
    ``port`` the port it is ready on once it accepts, or None (not probed: it must still run after a settle time;
    rank 0's readiness is the cluster's); ready_url None. ``replicas``: the engine's server on ``address``, ready
    once its readiness path answers 200."""
    if topology(workload) != REPLICAS:
        spec = launcher(workload)
        if spec["worker"] is None:
            return {"argv": None, "port": None, "ready_url": None}
        values = {"rank": rank, "nnodes": nnodes, "head_address": head_address, "address": address,
                  "port": spec["port"], "endpoints": "", "hosts": ""}
        return {"argv": launcher_argv(spec["worker"], workload, model, values), "port": spec["worker_port"],
                "ready_url": None}
    return {"argv": replica_argv(workload, model, address), "port": port(workload),
            "ready_url": "http://%s:%d%s" % (address, port(workload), engine_spec(workload)["ready_path"])}


def head_argv(workload: dict, model: dict, workers: list, head_address: Optional[str] = None,
              env_names=()) -> list:
    """Rank 0's server argv: the engine's; with a launcher's topology its head flags added, or the server wrapped in
    its head argv (mpirun), naming the ``workers`` (their addresses, rank order) and rank 0's own address on the
    cluster's network, ``head_address``. ``env_names``: the run's variables, forwarded to every rank by a head argv
    that says where (:data:`FORWARDED_ENV`)."""
    if topology(workload) == REPLICAS:
        return server_argv(workload, model)
    spec = launcher(workload)
    endpoints = ",".join("%s:%d" % (address, spec["port"]) for address in workers) if spec["port"] else ""
    values = {"rank": 0, "nnodes": len(workers) + 1, "head_address": head_address, "address": head_address,
              "port": spec["port"], "endpoints": endpoints,
              "hosts": ",".join("%s:1" % address for address in [head_address] + list(workers))}
    head = launcher_argv(spec["head"], workload, model, values, env_names)
    return head if SERVER_ARGV in spec["head"] else server_argv(workload, model) + head


def replica_urls(workload: dict, workers: list) -> list:
    """The servers a ``replicas`` run's client reaches through the proxy: rank 0's own, then each worker's."""
    return ["http://%s:%d" % (LOOPBACK, port(workload))] + ["http://%s:%d" % (a, port(workload)) for a in workers]


def ready_url(workload: dict) -> str:
    return "http://%s:%d%s" % (LOOPBACK, port(workload), engine_spec(workload)["ready_path"])


def base_url(workload: dict) -> str:
    """The OpenAI-compatible API root the client is given: the endpoint's for an unmanaged server."""
    if not managed(workload):
        return endpoint_root(workload)
    return "http://%s:%d/v1" % (LOOPBACK, port(workload))


#: Where a tokenizer a GGUF's vocabulary gives is kept on the host, under the results root.
TOKENIZER_CACHE = gguf_tokenizer.CACHE_SUBDIR
#: What a tokenizer's ``source`` says (the record's serving.tokenizer.source).
SOURCE_GIVEN, SOURCE_DIRECTORY = "the model's tokenizer", "the model's directory"
SOURCE_BESIDE, SOURCE_DERIVED = "the tokenizer.json beside the GGUF", "derived from the GGUF's vocabulary"
_SET_TOKENIZER = "set the model's tokenizer (a tokenizer.json, or a directory holding one, on the host)"


def model_gguf(model: dict) -> Optional[str]:
    """The GGUF file a model's tokenizer can come from: a .gguf ``tokenizer``, path or ``gguf``; else None."""
    for key in ("tokenizer", "path", "gguf"):
        value = str(model.get(key) or "")
        if value.endswith(".gguf"):
            return value
    return None


def tokenizer_choice(model: dict, cache_root: Optional[str] = None) -> dict:
    """The tokenizer the client counts with, and where it came from: {"path", "source"} (a derived one also
    "gguf", "key", "derived": whether it was derived now, "tokens"). In this order (issue 33: nothing test-only):

    1. the model's ``tokenizer`` (a tokenizer.json or a directory holding one), unless it names a .gguf;
    2. the model's ``path`` when it is a directory (a Hugging Face model directory);
    3. for a GGUF (its path, gguf or a .gguf tokenizer): the tokenizer.json beside it when that holds as many
       token ids as the GGUF's vocabulary (an unrelated one beside it is not taken);
    4. else one derived from the GGUF's own vocabulary (gguf_tokenizer: llama.cpp's own splitting), written
       once under ``cache_root`` (<results_root>/.sparkfleet/tokenizers) and reused;
    5. a GGUF whose vocabulary cannot be derived falls back to the tokenizer.json beside it, whatever its size.

    Raises ServingError naming the model, what was found and what to set."""
    value = model.get("tokenizer")
    if value and not str(value).endswith(".gguf"):
        return {"path": str(value), "source": SOURCE_GIVEN}
    path = model.get("path")
    if not value and path and os.path.isdir(str(path)):
        return {"path": str(path), "source": SOURCE_DIRECTORY}
    gguf = model_gguf(model)
    if gguf is None:
        raise ServingError("model %s: no tokenizer for the serving client (no tokenizer, and its path %r is neither a "
                           "directory nor a .gguf file): %s" % (model["name"], path, _SET_TOKENIZER))
    beside = os.path.join(os.path.dirname(gguf), "tokenizer.json")
    beside = beside if os.path.isfile(beside) else None
    try:
        meta, digest = gguf_tokenizer.read_metadata(gguf)
    except (OSError, gguf_tokenizer.TokenizerError) as exc:
        raise ServingError("model %s: no tokenizer for the serving client: its GGUF %s cannot be read (%s); %s"
                           % (model["name"], gguf, getattr(exc, "strerror", None) or exc, _SET_TOKENIZER)) from None
    tokens = len(meta.get("tokenizer.ggml.tokens") or [])
    if beside and gguf_tokenizer.vocabulary_size(beside) == tokens:
        return {"path": os.path.dirname(gguf), "source": SOURCE_BESIDE, "gguf": gguf, "tokens": tokens}
    if not cache_root:
        raise ServingError("model %s: its tokenizer is derived from its GGUF %s on the host, under the results root "
                           "(no cache directory given here)" % (model["name"], gguf))
    try:
        derived = gguf_tokenizer.derive(gguf, cache_root, meta=meta, digest=digest)
    except gguf_tokenizer.TokenizerError as exc:
        if beside:
            return {"path": os.path.dirname(gguf), "source": SOURCE_BESIDE, "gguf": gguf, "tokens": tokens,
                    "note": "its vocabulary size differs from the GGUF's %d, and the GGUF's own cannot be derived: "
                            "%s" % (tokens, exc)}
        raise ServingError("model %s: no tokenizer for the serving client: none can be derived from its GGUF %s: %s; "
                           "%s" % (model["name"], gguf, exc, _SET_TOKENIZER)) from None
    except OSError as exc:
        raise ServingError("model %s: the tokenizer derived from its GGUF %s cannot be written under %s: %s"
                           % (model["name"], gguf, cache_root, exc.strerror or exc)) from None
    return {"path": derived["path"], "source": SOURCE_DERIVED, "gguf": gguf, "key": derived["key"],
            "derived": not derived["cached"], "tokens": derived["tokens"], "tokenizer_model": derived["model"],
            "pre_tokenizer": derived["pre"]}


def tokenizer(model: dict, cache_root: Optional[str] = None) -> str:
    """The path of the tokenizer the client counts with (:func:`tokenizer_choice`)."""
    return tokenizer_choice(model, cache_root)["path"]


def tokenizer_shown(model: dict) -> str:
    """The tokenizer as ``sparkfleet plan`` shows it offline: the path when the campaign decides it, else a
    placeholder saying what the host decides (a directory path, or a GGUF's tokenizer)."""
    value = model.get("tokenizer")
    if value and not str(value).endswith(".gguf"):
        return str(value)
    gguf = model_gguf(model)
    if gguf:
        return "<tokenizer of %s>" % gguf
    return str(model.get("path") or "<no tokenizer>")


def with_host_network(flags: list):
    """(docker run flags with ``--network host`` added unless they already pick a network, network recorded).

    The client reaches the server on the host's loopback; a published port would add docker-proxy to every
    request."""
    flags = [str(f) for f in flags]
    for i, flag in enumerate(flags):
        name, _, value = flag.partition("=")
        if name in ("--network", "--net"):
            if not value and i + 1 < len(flags):
                value = flags[i + 1]
            return flags, {"network": value, "network_added": False}
    return flags + ["--network", "host"], {"network": "host", "network_added": True}


# ------------------------------------------------------------------------------------ profile


def point_name(depth, concurrency, pp, tg) -> str:
    """The contract's name of a profile point, ``d4096.c2.pp512.tg64``: here and in the report, which hands
    pandas' numbers (a whole float is written as its integer, 4096.0 as 4096; anything else as str writes it,
    NaN as nan)."""
    return "d%s.c%s.pp%s.tg%s" % tuple(_level(v) for v in (depth, concurrency, pp, tg))


def _level(value) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


#: A serving profile's axes and their physical ranges, defined once: the campaign's profile fields
#: (settings.profile_problems) and the host's check of the profile it runs (:func:`profile_points`).
PROFILE_AXES = (
    Field("depth", "int", REQUIRED, "Context already in the conversation before the prompt.", "tokens", 0,
          2 ** 21),
    Field("concurrency", "int", REQUIRED, "Concurrent requests.", "requests", 1, 4096),
    Field("pp", "int", REQUIRED, "Prompt tokens processed per request.", "tokens", 1, 2 ** 21),
    Field("tg", "int", REQUIRED, "Tokens generated per request.", "tokens", 1, 2 ** 21),
)


def _levels(profile: dict, axis: Field) -> list:
    values = profile.get(axis.name)
    if not isinstance(values, list) or not values:
        raise ValueError("profile.%s must be a non-empty list of integers, got %r" % (axis.name, values))
    for i, v in enumerate(values):
        problem = field_problem(axis, v)
        if problem:
            raise ValueError("profile.%s[%d]: %s" % (axis.name, i, problem))
    return sorted(set(values))


def profile_points(workload: dict) -> list:
    """The profile crossed (depth x concurrency x pp x tg), each with its name, in a fixed order.
    Raises ValueError for a missing or malformed profile."""
    profile = workload.get("profile")
    if not isinstance(profile, dict):
        raise ValueError("workload %s: a serving workload needs a profile mapping, got %r"
                         % (workload.get("name"), profile))
    depth, conc, pp, tg = (_levels(profile, axis) for axis in PROFILE_AXES)
    points = []
    for d in depth:
        for c in conc:
            for p in pp:
                for t in tg:
                    points.append({"depth": d, "concurrency": c, "pp": p, "tg": t, "point": point_name(d, c, p, t)})
    return points


def order_seed(rid: str) -> int:
    """The seed of a run's point order: the first 8 hex digits of sha256(run_id)."""
    return int(hashlib.sha256(rid.encode("utf-8")).hexdigest()[:8], 16)


def shuffled_points(workload: dict, rid: str):
    """(points in the run's seeded shuffled order, each with its ``order``; the seed)."""
    seed = order_seed(rid)
    points = profile_points(workload)
    random.Random(seed).shuffle(points)
    for i, point in enumerate(points):
        point["order"] = i
    return points, seed


# ------------------------------------------------------------------------------------ process


def log_tail(path: str, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of a log, one line of text (for a reason)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - limit, 0))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-5:])[-600:]


class ServerProcess:
    """One engine server's life: start in its own process group (output to ``log_path``), wait until ready,
    stop. A context manager whose exit always stops the server, whatever ended the block (an error, a
    JobStopped raised by SIGTERM): no server may outlive its run and hold memory for the next one.

    ``argv``: the server command already wrapped for its environment. ``container``: (docker, name) when the
    command is ``docker run --name name``; the container is then killed and removed by name too.
    ``on_start(proc)``: called once started (job registration, fingerprint). ``port``: the port it listens on
    (127.0.0.1): checked free before the start (a server already there would be measured instead), and by
    :meth:`check_listener` held by this server once it answers.
    """

    def __init__(self, argv: list, log_path: str, url: str, container=None, on_start=None,
                 grace_s: float = STOP_GRACE_S, port: Optional[int] = None):
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.url = url
        self.port = port
        self.container = container
        self.on_start = on_start
        self.grace_s = grace_s
        self.proc = None
        self.stopped = None  # "exited" | "terminated" | "killed" once stopped
        self.exit_code = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy

    def __enter__(self):
        try:
            self.start()
        except BaseException:  # on_start failed, or a stop came: __exit__ would not run
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        if self.container:
            self._docker("rm", "-f")  # a leftover of a killed run would hold the name (and the memory)
        taken = listeners.port_taken(self.port, LOOPBACK) if self.port else None
        if taken:  # another server answering there would be measured instead of this one (issue 33)
            raise ServingError(taken)
        with open(self.log_path, "ab") as log:
            # A SIGTERM (JobStopped) must not land between the start and self.proc being set, or the server
            # would outlive the job: hold it meanwhile. The server itself starts with no signal blocked.
            held = hold_sigterm()
            try:
                self.proc = Spawned(self.argv, log.fileno())
            finally:
                release_sigterm(held)
        if self.on_start is not None:
            self.on_start(self.proc)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float) -> float:
        """Seconds until ``url`` answered 200. Raises ServingError when the server exits first (with the log's
        tail) or does not answer within ``timeout_s``."""
        started = time.monotonic()
        deadline = started + max(float(timeout_s), 0.0)
        last = "no answer yet"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServingError("server exited with code %s before it was ready: %s"
                                   % (code, log_tail(self.log_path) or "server.log is empty"))
            try:
                with self._opener.open(self.url, timeout=PROBE_TIMEOUT_S) as response:
                    if response.status == 200:
                        return round(time.monotonic() - started, 3)
                    last = "HTTP %d" % response.status
            except urllib.error.HTTPError as exc:  # 503 while the model loads
                last = "HTTP %d" % exc.code
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(getattr(exc, "reason", exc))
            if time.monotonic() >= deadline:
                raise ServingError("server not ready after %.0f s (%s answered %s): %s"
                                   % (float(timeout_s), self.url, last, log_tail(self.log_path)))
            time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))

    def check_listener(self, proc_root: str = "/proc") -> dict:
        """Whether what answers on 127.0.0.1:port is this server (listeners.owner): every socket listening there
        held by its process group, a process below it or, for a container, below the container's init (with
        --network host its sockets are in this host's table) or by the docker-proxy of its published port."""
        table = fingerprint.process_table(proc_root)
        ours = set(group_members(self.proc.pid, proc_root))
        roots, accept = [self.proc.pid], None
        if self.container:
            docker, name = self.container
            init = fingerprint.container_pid(docker, name, timeout=10.0)
            if init is None:  # its processes cannot be told from anyone else's
                return {"status": "unverified", "holders": [],
                        "detail": "container %s: no init pid (docker inspect), its processes unknown" % name}
            roots.append(init)
            accept = functools.partial(_proxy_of, docker, name)
        for root in roots:
            ours.update(pid for pid, _ in fingerprint.descendants(root, table))
        return listeners.owner(self.port, ours, proc_root, accept=accept)

    def model_meta(self) -> dict:
        """llama-server's ``GET /v1/models`` ``meta`` of the model it loaded (its own parameter count, tensor bytes,
        embedding size, vocabulary: tools/server ``model_meta``), or {"error": why there is none}."""
        if not self.port:
            return {"error": "no port to ask"}
        url = "http://%s:%d/v1/models" % (LOOPBACK, self.port)
        try:
            with self._opener.open(url, timeout=PROBE_TIMEOUT_S * 5) as response:
                payload = json.loads(response.read(1 << 20).decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return {"error": "GET %s: %s" % (url, getattr(exc, "reason", exc))}
        meta = serving_provenance.model_meta(payload)
        return dict(meta) if meta is not None else {"error": "GET %s: no model meta in its answer" % url}

    def stop(self) -> dict:
        """Stop the server (idempotent): SIGTERM to its group, the grace, SIGKILL; a container killed and removed
        by name. Returns {"stopped", "exit_code"}."""
        if self.proc is None or self.stopped is not None:
            return {"stopped": self.stopped, "exit_code": self.exit_code}
        how = "exited"
        if self.proc.poll() is None:
            how = "terminated"
            self._signal_group(signal.SIGTERM)  # `docker run` (not a tty) passes it on to the container
            try:
                self.proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                how = "killed"
                if self.container:
                    self._docker("kill")
                self._signal_group(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=30)
        # Whatever the leader did, its group's other members (engine workers) go too, and are waited for; so do the
        # processes of its session in groups of their own (mpirun puts each rank it starts in one: a killed mpirun
        # would leave rank 0's server running).
        self._signal_group(signal.SIGKILL)
        for pid in group_members(self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        wait_group_gone(self.proc.pid, GROUP_GONE_S)
        if self.container:
            self._docker("rm", "-f")
        self.stopped, self.exit_code = how, self.proc.returncode
        return {"stopped": self.stopped, "exit_code": self.exit_code}

    def _signal_group(self, sig) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _docker(self, *verb) -> None:
        docker, name = self.container
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([docker] + list(verb) + [name], capture_output=True, timeout=120)


def _proxy_of(docker: str, name: str, holder: dict) -> bool:
    """Whether ``holder`` is the docker-proxy forwarding to container ``name`` (its -container-ip one of the
    container's addresses): the listener of a port published from a container not on the host's network."""
    if holder.get("comm") != "docker-proxy":
        return False
    args = (holder.get("cmdline") or "").split()
    target = args[args.index("-container-ip") + 1] if "-container-ip" in args[:-1] else None
    try:
        proc = subprocess.run([docker, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} "
                               "{{end}}", name], capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and target is not None and target in proc.stdout.split()


def group_members(pgid: int, proc_root: str = "/proc") -> list:
    """The pids of process group ``pgid``, and of the session it leads (a server starts in a session of its own:
    its processes in other groups are its too), that have not exited (zombies left out: they hold no memory)."""
    members = []
    for pid in procstat.pids(proc_root):
        stat = procstat.read(pid, proc_root)
        if procstat.live(stat) and pgid in (stat.pgrp, stat.session):
            members.append(pid)
    return members


def wait_group_gone(pgid: int, timeout_s: float) -> list:
    """Wait (bounded) until group ``pgid`` has no live member; returns those still there at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        members = group_members(pgid)
        if not members or time.monotonic() >= deadline:
            return members
        time.sleep(0.05)


class Spawned:
    """A process started with posix_spawnp in a new session, its signal mask empty and SIGPIPE/SIGXFSZ at their
    defaults, stdin /dev/null, stdout and stderr to ``log_fd``. subprocess.Popen cannot give the child an
    empty mask: started while the parent holds SIGTERM, it would inherit SIGTERM blocked and only die by
    SIGKILL. Polled like a Popen: pid, returncode, poll(), wait(timeout)."""

    def __init__(self, argv: list, log_fd: int):
        self.returncode = None
        self.pid = os.posix_spawnp(
            argv[0], argv, dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                          (os.POSIX_SPAWN_DUP2, log_fd, 1), (os.POSIX_SPAWN_DUP2, log_fd, 2)],
            setsid=True, setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -1
                return self.returncode
            if pid == self.pid:  # os.waitstatus_to_exitcode is Python 3.9+
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        return self.returncode

    def wait(self, timeout: float):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.05)
        return self.returncode


def hold_sigterm() -> bool:
    """Block SIGTERM in this thread (a stop must not land between a child's start and its being tracked):
    True when it is held now, False where it cannot be (not the main thread, no pthread_sigmask)."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        return True
    except (AttributeError, ValueError, OSError):  # not the main thread, or no pthread_sigmask
        return False


def release_sigterm(held: bool) -> None:
    if held:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
