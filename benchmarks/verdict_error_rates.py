"""How often each headline verdict is wrong: false alarms with no true difference, and power for a real one.

    .venv/bin/python benchmarks/verdict_error_rates.py [--campaigns 200] [--workers 2] [--json OUT]

Every simulated campaign is a results tree of record.json files, read by the real loader (sparkfleet.load) and
judged by the real report path (sparkfleet.report.compose.analyse: the verdict block, the host check of
``report --hosts`` and the report's section; sparkfleet.fleet_state.analyse for ``sparkfleet fleet``), never by
the statistics functions alone. Two shapes:

* **the GPU example** (examples/gpu/results/gpu: llama-1b, environments native / bare / bare.aa, workloads T1
  and matmul, 3 iterations): each run's record is the example's own record of that environment and workload,
  its metrics replaced by the native cell's mean x (1 + N(0, CV)); on three hosts for the host verdicts (the
  example's host files copied to each name), on one host for the environment, memory and regression verdicts
  (a second, independent tree is the baseline / the reference campaign);
* **the serving tree** (tests/unit/sparkfleet/serving_tree.py: 2 engines x 2 environments x 4 points x 8
  metrics, 5 iterations): on one host for the serving environment and engine verdicts and, against an
  independent serving campaign, for the regression gate (``sparkfleet compare`` through its command line, and
  ``report --baseline``: serving points x metrics and run-level rows in one Holm family); on three hosts (each
  with the GPU example's host files) for the host verdicts, every serving point a host cell of its own, and
  against an independent reference serving campaign;
* **the SLA capacity** (the serving tree with each run's ``serving.sla``, a discrete capacity per depth): the
  capacity verdicts between environments and engines (report/serving_sla.py).

A verdict kind *fires* in a campaign when its headline says DIFFERENT (environment, memory, serving environment,
serving engine), REGRESSION / IMPROVEMENT (regression), host out (report verdict block), NOT NORMAL
(``report --hosts`` / the report's host section; against a reference campaign) or out (``sparkfleet fleet``).
Under no difference the share of campaigns in which it fires is the family-wise false-alarm rate (target: at
most alpha = 5%); with a true effect, the share in which it names it is the power (target: at least 80%):
a 10% effect at CV 3% with 5 iterations, a host 15% slow at 2% noise with 3 runs a cell (serving: at CV 3%
with 5 iterations).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT.parents[2]), str(ROOT / "tests" / "unit" / "sparkfleet")]

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record as contract  # noqa: E402
from sparkfleet import compare, fleet_state  # noqa: E402
from sparkfleet import serving as serving_metrics  # noqa: E402
from sparkfleet.load import load_runs  # noqa: E402
from sparkfleet.report import host_normal  # noqa: E402
from sparkfleet.report.analysis import Options  # noqa: E402
from sparkfleet.report.compose import analyse  # noqa: E402
from sparkfleet.report.serving import ENGINE, ENVIRONMENT  # noqa: E402

EXAMPLE = ROOT / "examples" / "gpu" / "results" / "gpu"
HOST = "localhost"
#: Throughput and time metrics: what a slow host or an environment's overhead moves (memory is not).
PERFORMANCE = {m for m in (*compare.HIGHER_IS_BETTER, *compare.LOWER_IS_BETTER)
               if m not in ("kv_cache_gib", "peak_memory_gib")}
CVS = (0.01, 0.03, 0.05)
#: A campaign's default iterations per cell (plugin_utils/settings.py, campaign field "iterations").
DEFAULT_ITERATIONS = 10


# --- the GPU example's shape ---------------------------------------------------------------------------------

def _templates() -> tuple[dict[tuple[str, str], dict], dict[str, dict[str, float]]]:
    """The example's first record per (environment, workload), and the native cell's mean per metric."""
    records: dict[tuple[str, str], list[dict]] = {}
    for path in sorted((EXAMPLE / HOST / "runs").glob("*/record.json")):
        data = json.loads(path.read_text())
        if data.get("status") == "ok" and not data.get("warmup"):
            records.setdefault((data["environment"], data["workload"]), []).append(data)
    means = {}
    for (environment, workload), group in records.items():
        if environment == "native":
            metrics = [m for m in group[0]["metrics"] if m in contract.METRICS and m not in contract.CONFIG_METRICS
                       and m not in contract.KV_BUDGET_METRICS]
            means[workload] = {m: float(np.mean([r["metrics"][m] for r in group if r["metrics"].get(m) is not None]))
                               for m in metrics}
    return {key: group[0] for key, group in records.items()}, means


Factor = Callable[[str, str, str], float]  # (host, environment, metric) -> the true value's factor


def no_effect(_host: str, _environment: str, _metric: str) -> float:
    return 1.0


def worse(by: float, host: str | None = None, environment: str | None = None) -> Factor:
    """Throughput lower and times longer by ``by`` on ``host`` / ``environment`` (None: everywhere)."""
    def factor(h: str, e: str, metric: str) -> float:
        if metric not in PERFORMANCE or (host and h != host) or (environment and e != environment):
            return 1.0
        return 1 - by if compare.direction(metric) > 0 else 1 / (1 - by)
    return factor


def gpu_tree(root: Path, rng: np.random.Generator, cv: float, iterations: int = 3, hosts: tuple[str, ...] = (HOST,),
             factor: Factor = no_effect) -> Path:
    """A campaign shaped like the GPU example: every run the example's record of its environment and workload,
    its metrics the native mean x factor x (1 + N(0, cv)), interleaved as the planner orders runs."""
    templates, means = _templates()
    for host in hosts:
        host_dir = root / host
        shutil.copytree(EXAMPLE / HOST, host_dir, ignore=shutil.ignore_patterns("runs", "ledger.jsonl"))
        order = 0
        for iteration in range(1, iterations + 1):
            for (environment, workload), template in sorted(templates.items()):
                data = copy.deepcopy(template)
                data.update(host=host, iteration=iteration, order_index=order,
                            run_id=contract.run_id(data["campaign"], host, data["model"], environment, workload,
                                                   iteration))
                for metric, mean in means[workload].items():
                    data["metrics"][metric] = mean * factor(host, environment, metric) * (1 + rng.normal(0, cv))
                contract.write_json_atomic(host_dir / "runs" / data["run_id"] / "record.json", data)
                order += 1
    return root


# --- what each verdict kind says ---------------------------------------------------------------------------

def _fired(report, question: str, labels: tuple[str, ...] = ("different",)) -> bool:
    return any(line.question == question and line.label in labels for line in report.verdicts)


def _serving_fired(report, kind: str) -> bool:
    return any(line.question == "serving" and line.outcome == "different" and line.verdicts
               and line.verdicts[0].question == kind for line in report.verdicts)


def _not_normal(check, host: str | None = None, against: str | None = None) -> bool:
    if check is None:
        return False
    if against is not None:
        rows = check.comparisons
        rows = rows[(rows["outcome"] == "different") & rows["against"].astype(str).str.contains(against)]
        return bool(len(rows)) if host is None else host in set(rows["host"].astype(str))
    hosts = check.hosts[check.hosts["verdict"] == "not normal"]["host"].astype(str)
    return bool(len(hosts)) if host is None else host in set(hosts)


def single_host(work: Path, rng: np.random.Generator, cv: float, iterations: int, effect: Factor) -> dict[str, bool]:
    """Environment, memory and regression verdicts: a campaign against an independent baseline campaign.
    ``effect`` applies to the current campaign (its bare environment, or everything for a regression)."""
    baseline = gpu_tree(work / "baseline" / "gpu", rng, cv, iterations)
    current = gpu_tree(work / "current" / "gpu", rng, cv, iterations, factor=effect)
    report = analyse(load_runs(current), Options(baseline=str(baseline)))
    return {"environment": _fired(report, "environment"), "memory": _fired(report, "memory"),
            "regression": _fired(report, "regression", ("regression", "improved"))}


def fleet(work: Path, rng: np.random.Generator, cv: float, iterations: int, slow: str | None,
          by: float) -> dict[str, bool]:
    """The host verdicts on three hosts (``slow``: the host that is ``by`` slower, None for none), and each
    host against an independent reference campaign of the same shape."""
    hosts = ("spark-01", "spark-02", "spark-03")
    factor = worse(by, host=slow) if slow else no_effect
    root = gpu_tree(work / "fleet" / "gpu", rng, cv, iterations, hosts, factor)
    reference = gpu_tree(work / "reference" / "gpu", rng, cv, iterations, hosts)
    loaded = load_runs(root)
    report = analyse(loaded)
    host_out = [line.subject for line in report.verdicts if line.question == "hosts" and line.label == "host out"]
    with_ref = host_normal.check_hosts(root, loaded.runs, reference=reference, always=True)
    state = fleet_state.analyse(root)
    if slow is None:
        return {"hosts (report)": bool(host_out), "not normal": _not_normal(report.hosts),
                "fleet out": bool(state.outside_hosts), "reference": _not_normal(with_ref, against="reference")}
    return {"hosts (report)": slow in host_out, "not normal": _not_normal(report.hosts, slow),
            "fleet out": slow in state.outside_hosts, "reference": _not_normal(with_ref, slow, "reference")}


def serving(work: Path, seed: int, cv: float, iterations: int, engine_by: float = 0.0,
            environment_by: float = 0.0) -> dict[str, bool]:
    from serving_tree import build_serving_tree  # noqa: PLC0415 - the tests' synthetic serving tree

    def factor(engine: str, environment: str, metric: str, _point: dict[str, int]) -> float:
        by = (engine_by if engine == "llama.cpp" else 0.0) + (environment_by if environment == "container" else 0.0)
        return 1 - by if serving_metrics.direction(metric) > 0 else 1 / (1 - by)

    root = build_serving_tree(work / "serve", iterations=iterations, factor=factor, cv=cv, seed=seed)
    report = analyse(load_runs(root))
    return {"serving environment": _serving_fired(report, ENVIRONMENT),
            "serving engine": _serving_fired(report, ENGINE)}


#: The SLA capacity scenarios: a run's true capacity is BASE_CAPACITY x its factor x (1 + N(0, CAPACITY_CV)),
#: floored to the integer concurrency a bisection settles on; the search's cap is far above it.
BASE_CAPACITY, CAPACITY_CV, CAPACITY_CAP = 20.0, 0.10, 256


def serving_capacity(work: Path, seed: int, iterations: int, container_by: float = 0.0) -> dict[str, bool]:
    """The SLA capacity verdicts (report/serving_sla.py) on the serving tree (2 engines x 2 environments x 2
    depths), each run's capacity per (depth, pp, tg) a discrete draw; ``container_by``: the container's true
    capacity that much lower. Fires when a capacity comparison says different (environment or engine)."""
    from serving_tree import build_serving_tree  # noqa: PLC0415 - the tests' synthetic serving tree

    def capacity(_engine: str, environment: str, rng: np.random.Generator) -> int:
        factor = 1 - container_by if environment == "container" else 1.0
        return max(0, int(BASE_CAPACITY * factor * (1 + rng.normal(0, CAPACITY_CV))))

    root = build_serving_tree(work / "serve", iterations=iterations, seed=seed, sla=(capacity, CAPACITY_CAP))
    judged = analyse(load_runs(root)).serving.capacity_comparisons
    different = judged[judged["outcome"] == "different"]
    if container_by:  # power: the container named lower, and nothing else called different
        return {"capacity environment": bool(len(different[(different["b"] == "container")
                                                           & (different["shift"] < 0)]))}
    return {"capacity environment": bool((different["question"] == ENVIRONMENT).any()),
            "capacity engine": bool((different["question"] == ENGINE).any())}


def _serving_factor(by: float) -> Callable[[str, str, str, dict[str, int]], float]:
    """Every serving figure ``by`` worse (throughput down, latency up) at every engine, environment and point."""
    def factor(_engine: str, _environment: str, metric: str, _point: dict[str, int]) -> float:
        return 1 - by if serving_metrics.direction(metric) > 0 else 1 / (1 - by)
    return factor


def _seeds(seed: int, k: int) -> list[int]:
    """``k`` independent tree seeds of one simulated campaign (its trees must not share their noise)."""
    return [int(s) for s in np.random.default_rng(seed).integers(0, 2**62, size=k)]


def serving_regression(work: Path, seed: int, cv: float, iterations: int, by: float = 0.0) -> dict[str, bool]:
    """The regression gate between two independent serving campaigns (B ``by`` worse on every serving figure),
    driven as the commands are: ``sparkfleet compare A B`` through its command line (sparkfleet.cli.main, the exit
    status and its --json rows) and ``report B --baseline A`` (compose.analyse, Options(baseline)): the serving
    points x metrics and the run-level rows in one Holm family (sparkfleet.compare.compare_campaigns)."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    from serving_tree import build_serving_tree  # noqa: PLC0415 - the tests' synthetic serving tree

    from sparkfleet.cli import main as cli  # noqa: PLC0415

    one_seed, other_seed = _seeds(seed, 2)
    baseline = build_serving_tree(work / "a" / "serve", iterations=iterations, cv=cv, seed=one_seed)
    current = build_serving_tree(work / "b" / "serve", iterations=iterations, cv=cv, seed=other_seed,
                                 factor=_serving_factor(by))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli(["compare", str(baseline), str(current), "--json"])
    verdicts = [row.get("verdict") for row in json.loads(out.getvalue())["comparisons"] if row.get("metric")]
    report = analyse(load_runs(current), Options(baseline=str(baseline)))
    if by:  # power: the gate names a regression (an improvement is the wrong answer)
        return {"regression": _fired(report, "regression", ("regression",)), "compare exit 1": status == 1}
    return {"regression": _fired(report, "regression", ("regression", "improved")), "compare exit 1": status == 1,
            "compare any change": any(v in ("regression", "improvement") for v in verdicts)}


def serving_fleet(work: Path, seed: int, cv: float, iterations: int, slow: str | None,
                  by: float) -> dict[str, bool]:
    """The host verdicts on a serving campaign of three hosts (``slow`` ``by`` worse on every serving figure, None
    for none), each host's tree the tests' serving tree with its own noise and the GPU example's host files (so the
    report's host section has its evidence, as a real campaign's does); an independent campaign of the same shape is
    the reference. The serving points are host cells of their own (check_hosts(points=...)) as ``report --hosts``,
    the report's section and ``sparkfleet fleet`` pass them."""
    from serving_tree import build_serving_tree  # noqa: PLC0415 - the tests' synthetic serving tree

    hosts = ("spark-01", "spark-02", "spark-03")
    seeds = iter(_seeds(seed, 2 * len(hosts)))
    for tree in ("fleet", "reference"):
        for host in hosts:
            by_here = by if tree == "fleet" and host == slow else 0.0
            build_serving_tree(work / tree / "serve", iterations=iterations, cv=cv, seed=next(seeds), hosts=(host,),
                               factor=_serving_factor(by_here))
            shutil.copytree(EXAMPLE / HOST, work / tree / "serve" / host,
                            ignore=shutil.ignore_patterns("runs", "ledger.jsonl"), dirs_exist_ok=True)
    root, reference = work / "fleet" / "serve", work / "reference" / "serve"
    loaded = load_runs(root)
    report = analyse(loaded)
    host_out = [line.subject for line in report.verdicts if line.question == "hosts" and line.label == "host out"]
    with_ref = host_normal.check_hosts(root, loaded.runs, reference=reference, always=True, points=loaded.serving)
    state = fleet_state.analyse(root)
    if slow is None:
        return {"hosts (report)": bool(host_out), "not normal": _not_normal(report.hosts),
                "fleet out": bool(state.outside_hosts), "fleet not normal": _not_normal(state.verdicts),
                "reference": _not_normal(with_ref, against="reference")}
    return {"hosts (report)": slow in host_out, "not normal": _not_normal(report.hosts, slow),
            "fleet out": slow in state.outside_hosts, "fleet not normal": _not_normal(state.verdicts, slow),
            "reference": _not_normal(with_ref, slow, "reference")}


# --- the scenarios -----------------------------------------------------------------------------------------

#: name -> (what it measures, its CV, the function of (work dir, seed) -> {kind: fired})
def scenarios() -> dict[str, tuple[str, float, Callable[[Path, int], dict[str, bool]]]]:
    out: dict[str, tuple[str, float, Callable[[Path, int], dict[str, bool]]]] = {}
    for runs in ("shape", DEFAULT_ITERATIONS):  # the shape's own iterations (3; serving 5), the campaign default
        for cv in CVS:
            gpu_n, serving_n = (3, 5) if runs == "shape" else (runs, runs)
            out[f"null-gpu-n{gpu_n}-cv{cv:g}"] = ("false alarms", cv, lambda w, s, cv=cv, n=gpu_n: single_host(
                w, np.random.default_rng(s), cv, n, no_effect))
            out[f"null-fleet-n{gpu_n}-cv{cv:g}"] = ("false alarms", cv, lambda w, s, cv=cv, n=gpu_n: fleet(
                w, np.random.default_rng(s), cv, n, None, 0.0))
            out[f"null-serving-n{serving_n}-cv{cv:g}"] = ("false alarms", cv, lambda w, s, cv=cv, n=serving_n: serving(
                w, s, cv, n))
    for cv in CVS:  # the serving tree's own 5 iterations (the campaign default of 10: not added, for time)
        out[f"null-serving-regression-n5-cv{cv:g}"] = ("false alarms", cv, lambda w, s, cv=cv: serving_regression(
            w, s, cv, 5))
        out[f"null-serving-fleet-n5-cv{cv:g}"] = ("false alarms", cv, lambda w, s, cv=cv: serving_fleet(
            w, s, cv, 5, None, 0.0))
    for n in (5, DEFAULT_ITERATIONS):
        out[f"null-capacity-n{n}"] = ("false alarms", CAPACITY_CV, lambda w, s, n=n: serving_capacity(w, s, n))
        out[f"power-capacity-n{n}"] = (f"power: container capacity 20% lower, noise 10%, {n} iterations",
                                       CAPACITY_CV, lambda w, s, n=n: serving_capacity(w, s, n, container_by=0.20))
    out["power-environment"] = ("power: bare 10% slower, CV 3%, 5 iterations", 0.03, lambda w, s: single_host(
        w, np.random.default_rng(s), 0.03, 5, worse(0.10, environment="bare")))
    out["power-regression"] = ("power: current 10% slower, CV 3%, 5 iterations", 0.03, lambda w, s: single_host(
        w, np.random.default_rng(s), 0.03, 5, worse(0.10)))
    out["power-fleet"] = ("power: spark-02 15% slower, 2% noise, 3 runs a cell", 0.02, lambda w, s: fleet(
        w, np.random.default_rng(s), 0.02, 3, "spark-02", 0.15))
    out["power-serving"] = ("power: container and llama.cpp 10% slower, CV 3%, 5 iterations", 0.03,
                            lambda w, s: serving(w, s, 0.03, 5, engine_by=0.10, environment_by=0.10))
    out["power-serving-regression"] = ("power: serving B 10% worse, CV 3%, 5 iterations", 0.03,
                                       lambda w, s: serving_regression(w, s, 0.03, 5, by=0.10))
    out["power-serving-fleet"] = ("power: serving spark-02 15% worse, CV 3%, 5 iterations", 0.03,
                                  lambda w, s: serving_fleet(w, s, 0.03, 5, "spark-02", 0.15))
    return out


#: The verdict kinds a power scenario is about (the others it also reports are not its question).
POWER_KINDS = {"power-environment": ("environment",), "power-regression": ("regression",),
               "power-fleet": ("hosts (report)", "not normal", "fleet out", "reference"),
               "power-serving": ("serving environment", "serving engine"),
               "power-serving-regression": ("regression", "compare exit 1"),
               "power-serving-fleet": ("hosts (report)", "not normal", "fleet out", "fleet not normal", "reference"),
               "power-capacity-n5": ("capacity environment",), "power-capacity-n10": ("capacity environment",)}


def without_family() -> None:
    """The verdicts as landed main gave them before issue 32: every comparison at alpha alone (hold_to_family a
    no-op), to show what the family control changes (``--no-family``)."""
    def alone(table, alpha=0.05):
        return table.assign(p_family=table.get("p_value", np.nan), family_size=1)

    compare.hold_to_family = alone
    host_normal.hold_to_family = alone


def one(name: str, seed: int, no_family: bool = False) -> dict[str, bool]:
    if no_family:
        without_family()
    _, _, run = scenarios()[name]
    work = Path(tempfile.mkdtemp(prefix="sparkfleet-verdicts-"))
    try:
        return run(work, seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's 95% interval of a proportion k / n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_tails(draws: int = 400_000, seed: int = 0) -> None:
    """How often Welch's and Student's two-sample tests reject two samples of one normal distribution, as a multiple
    of the nominal rate, at the sizes the host and the environment comparisons have (``--test-tails``)."""
    from sparkfleet.stats import student_from_moments, welch_from_moments  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    levels = (0.05, 0.01, 0.001)
    print(f"{'n a':>4} {'n b':>4}  {'test':8} " + " ".join(f"p<{t:<6g}" for t in levels))
    for n_a, n_b in ((3, 9), (3, 6), (3, 3), (5, 5)):
        a, b = rng.normal(size=(draws, n_a)), rng.normal(size=(draws, n_b))
        moments = (np.full(draws, n_a), a.mean(1), a.var(1, ddof=1), np.full(draws, n_b), b.mean(1), b.var(1, ddof=1))
        for name, test in (("Welch", welch_from_moments), ("Student", student_from_moments)):
            p = test(*moments)["p_value"]
            print(f"{n_a:>4} {n_b:>4}  {name:8} " + " ".join(f"{(p < t).mean() / t:>8.2f}" for t in levels))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=200, help="simulated campaigns per scenario")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--json", type=Path, help="write the rates here too")
    parser.add_argument("--test-tails", action="store_true",
                        help="only: each two-sample test's rejection rate under one distribution, x the nominal")
    parser.add_argument("--no-family", action="store_true",
                        help="each comparison at alpha alone, as before issue 32 (to compare)")
    args = parser.parse_args()
    if args.test_tails:
        test_tails()
        return 0
    names = args.only or list(scenarios())
    rows = []
    with ProcessPoolExecutor(args.workers) as pool:
        for name in names:
            what, cv, _ = scenarios()[name]
            start = time.monotonic()
            results = list(pool.map(one, [name] * args.campaigns, range(args.campaigns),
                                    [args.no_family] * args.campaigns, chunksize=4))
            kinds = POWER_KINDS.get(name, tuple(results[0]))
            for kind in kinds:
                k = sum(r[kind] for r in results)
                low, high = wilson(k, len(results))
                rows.append({"scenario": name, "what": what, "cv": cv, "kind": kind, "fired": k,
                             "campaigns": len(results), "rate": k / len(results), "ci95": [low, high]})
                print(f"{name:26} {kind:20} {k:4d}/{len(results)} = {k / len(results):6.1%} "
                      f"(95% CI {low:.1%}-{high:.1%})  [{what}]", flush=True)
            print(f"  ({time.monotonic() - start:.0f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
