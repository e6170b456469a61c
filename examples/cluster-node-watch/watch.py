"""A worker node of a multi-node run watching itself on a real GPU (issue 36): cluster/worker.py's module work as
cluster_run.yml calls it on a worker - the readiness probe in the run's (bare) environment, judged by the product's
rules on this GPU, then the telemetry daemon forked from the module, NVML through the machine's own bindings - while
the node's "rank" (a PyTorch matmul loop standing for the engine's rank on that GPU) runs; then the stop that ends
the worker and the daemon and completes the node file. Copies node.json, telemetry.csv and a summary to $OUT.

    python3 watch.py RESULTS_ROOT SECONDS
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import worker

RANK = ("import time, torch\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "end = time.time() + float(__import__('sys').argv[1])\n"
        "while time.time() < end:\n"
        "    (a @ a).sum().item()\n")


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie a non-reaping init keeps is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stopped_daemon(params: dict) -> int:
    """The telemetry daemon's pid (it must be gone after the stop)."""
    return params["daemon"]


def main() -> int:
    root, seconds = sys.argv[1], float(sys.argv[2])
    probe = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "matrix", "files", "gpu_probe.py")
    os.makedirs(os.path.join(root, ".sparkfleet", "workloads"), exist_ok=True)
    shutil.copy(probe, os.path.join(root, ".sparkfleet", "workloads", "gpu_probe.py"))
    params = {"state": "started", "name": "demo-run", "dir": os.path.join(root, ".sparkfleet", "cluster"),
              "argv": [sys.executable, "-c", RANK, str(seconds + 30)], "address": "127.0.0.1", "port": None,
              "ready_url": None, "timeout_s": 60.0, "env": {},
              "environment": {"name": "bare", "kind": "bare", "gpu_present": True, "results_root": root},
              "node": {"run_id": "demo-run", "campaign": "demo", "cluster": "pair", "head": "spark1",
                       "host": "spark2", "rank": 1, "address": "127.0.0.1"},
              "results_dir": os.path.join(root, "demo", "spark2"), "readiness": {"probe_s": 5.0},
              "telemetry_interval_s": 0.5, "max_s": 600.0, "nvml": None, "rdma_hcas": []}
    began = time.monotonic()
    started = worker.work(params, None)
    with open(os.path.join(params["dir"], "demo-run.json")) as fh:
        params["daemon"] = json.load(fh)["watch"]["pid"]
    print("started:", json.dumps(started))
    time.sleep(seconds)
    stopped = worker.work({"state": "stopped", "name": "demo-run", "dir": params["dir"]}, None)
    print("stopped:", json.dumps(stopped), f"after {time.monotonic() - began:.1f} s")
    node_dir = os.path.join(params["results_dir"], "cluster_nodes", "demo-run")
    with open(os.path.join(node_dir, "node.json")) as fh:
        node = json.load(fh)
    readiness, telemetry = node["readiness"] or {}, node["telemetry"]
    summary = {"readiness_state": readiness.get("state"), "action": (readiness.get("action") or {}).get("action"),
               "reasons": [r.get("cause") for r in readiness.get("reasons") or []],
               "probe": {k: readiness.get(k) for k in ("gpu_name", "sm_clock_mhz", "max_clock_mhz", "power_mean_w",
                                                       "power_limit_w", "power_limited", "tflops", "tflops_floor",
                                                       "utilization_pct", "window_s")},
               "telemetry": {k: telemetry.get(k) for k in ("sensor", "samples", "gpu_power_w_mean", "gpu_temp_c_max",
                                                           "sm_clock_mhz_mean", "gpu_util_pct_mean",
                                                           "throttle_reasons_seen", "errors")},
               "worker": node["worker"]["stopped"]}
    print(json.dumps(summary, indent=1))
    out = os.environ.get("OUT")
    if out:
        for name in ("node.json", "telemetry.csv"):
            shutil.copy(os.path.join(node_dir, name), os.path.join(out, name))
        with open(os.path.join(out, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
    # the rank was this process's child (in Ansible, the module's, reaped by init once the module exits)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(started["worker"]["pid"], os.WNOHANG)
    left = [p for p in (started["worker"]["pid"], stopped_daemon(params)) if running(p)]
    print("left running:", left)
    return 0 if node["telemetry"].get("samples") and not left else 1


if __name__ == "__main__":
    sys.exit(main())
