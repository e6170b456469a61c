#!/usr/bin/env python3
"""The pair preflight's NCCL test inside an environment (plugins/module_utils/sparkfleet_host/cluster/nccl_env.py),
for real on a machine of two GPUs: the product's SCRIPT in the machine's own PyTorch and NCCL, one process per GPU
as there is one per Spark, each placed as a bare run's process is (runexec.placed_command), meeting on loopback
as two Sparks meet on rank 0's address, then judged by nccl_env.judge and nccl_env.busbw_rows, the pair verdict's
own code.

    python3 examples/nccl-in-environment/run.py --out DIR [--force-socket] [--floor 20]

Each rank sees one GPU (CUDA_VISIBLE_DEVICES), as a Spark's process does. NVLink multicast stays off (NCCL, PyTorch
and NVSHMEM). --force-socket adds NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, so that NCCL must use its network
transport, NET/Socket on a machine with no RDMA device. Nothing here changes clocks, power limits or persistence.
Writes DIR/results.json (each rank's reading, the checks, the bus bandwidth rows) and DIR/rank{0,1}.log.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SOCKET = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def import_collection():
    """The checkout as ansible_collections.sparkfleet.bench (the module_utils import themselves by that name)."""
    root = Path(tempfile.mkdtemp(prefix="sparkfleet-collection-"))
    (root / "ansible_collections" / "sparkfleet").mkdir(parents=True)
    (root / "ansible_collections" / "sparkfleet" / "bench").symlink_to(REPO)
    sys.path.insert(0, str(root))
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import nccl_env
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import runexec
    return nccl_env, runexec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--force-socket", action="store_true")
    parser.add_argument("--floor", type=float, default=20.0, help="busbw floor, GB/s (the setting's default)")
    args = parser.parse_args()
    nccl_env, runexec = import_collection()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    extra = dict(NO_MULTICAST, **(SOCKET if args.force_socket else {}))
    sizes = [s for s in nccl_env.SIZES if not args.force_socket or s <= (1 << 30)]

    def rank(r: int) -> dict:
        env = nccl_env.process_env(r, 2, "127.0.0.1", port, {}, dict(extra, CUDA_VISIBLE_DEVICES=str(r)), sizes)
        done = nccl_env.run(lambda argv: runexec.placed_command("", argv, env, "/", {"kind": "bare"})[0])
        Path(out, f"rank{r}.log").write_text(done["output"])
        return {"environment": "bare", "kind": "bare", "judged": True, "reason": "", "rank": r, "world": 2,
                "error": done["error"], "reading": done["reading"]}

    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        entries = list(pool.map(rank, (0, 1)))
    names = ["gpu0", "gpu1"]
    checks, versions = nccl_env.judge(names, [{"environments": [e]} for e in entries], [[], []], args.floor)
    rows = nccl_env.busbw_rows(entries) if all((e["reading"] or {}).get("result") for e in entries) else []
    for entry in entries:  # the channel list is long; its summary stays
        transport = (entry["reading"] or {}).get("transport") or {}
        channels = transport.pop("channels", [])
        transport["channel_count"], transport["channel_examples"] = len(channels), sorted({c["via"] for c in channels})
    result = {"what": "cluster/nccl_env.py's SCRIPT, one process per GPU, bare placement, loopback rendezvous",
              "command": " ".join(["run.py", *sys.argv[1:]]), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                      time.gmtime()),
              "seconds": round(time.monotonic() - started, 1), "env": extra, "sizes": sizes, "floor_gbs": args.floor,
              "ranks": entries, "busbw_rows": rows, "versions": versions,
              "checks": [{"check": c, "node": n, "pass": ok, "reason": why} for c, n, (ok, why) in checks]}
    Path(out, "results.json").write_text(json.dumps(result, indent=1) + "\n")
    for row in rows:
        print(f"{row['size_bytes']:>12}  {row['seconds'] * 1e6:>10.1f} us  algbw {row['algbw_gbs']:>8.2f}  "
              f"busbw {row['busbw_gbs']:>8.2f} GB/s")
    for check in result["checks"]:
        print(f"{check['check']} on {check['node']}: {'pass' if check['pass'] else 'FAIL'}: {check['reason']}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
