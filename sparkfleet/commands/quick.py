"""`sparkfleet quick ENGINE MODEL`: a serving table on this machine in minutes.

A campaign is built from the flags - one model, one environment (``bare`` by default: the engine as the host has
it on its PATH), one serving workload of a preset's points (``serve-quick``: 2 depths x 2 concurrencies), a few
iterations - written beside the results (``<results>/<name>.campaign.yml``, to read and to re-run or grow into a
real campaign), and run as `sparkfleet run -e @that-file` on the default inventory (this machine): the same
playbooks, the same records, the same report, and its per-point table (median [95% CI], aggregate and per-user
generation tok/s, time to first token) on the terminal at the end. Exit status: `sparkfleet run`'s.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import (
    ENVIRONMENT_KINDS,
    SERVING_ENGINES,
    WORKLOAD_PRESETS,
)

#: Presets that are serving profiles (a profile of points), from the catalogue.
SERVING_PRESETS = tuple(name for name, preset in WORKLOAD_PRESETS.items() if "profile" in preset)
DEFAULT_ITERATIONS = 3  # the fewest runs per point with a 95% interval (stats.MIN_N_INTERVAL)


def register(sub) -> None:
    p = sub.add_parser("quick", help="serve MODEL with ENGINE on this machine and print its per-point numbers "
                                     "(a campaign built from flags, run through bench.yml)",
                       description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", choices=SERVING_ENGINES, help="the serving engine")
    p.add_argument("model", help="the model on this machine: a .gguf file (llama.cpp) or a model directory")
    p.add_argument("--environment", choices=ENVIRONMENT_KINDS, default="bare",
                   help="where the server runs: bare (default: the engine on this machine's PATH), container or "
                        "native (chroot into --image's rootfs)")
    p.add_argument("--image", help="the engine's image (container and native environments)")
    p.add_argument("--preset", choices=SERVING_PRESETS, default="serve-quick",
                   help="the points measured (default serve-quick: depth 0 and 4096, concurrency 1 and 4)")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"server lifetimes per point, interleaved (default {DEFAULT_ITERATIONS}: the fewest with a "
                        "95%% interval)")
    p.add_argument("--tokenizer", help="the client's tokenizer (default: derived from the model)")
    p.add_argument("--random-weights", action="store_true",
                   help="the model has random weights (a test model): the client skips its coherence check")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="an argument for the engine's server, e.g. --server-arg=-t --server-arg=4 (repeatable)")
    p.add_argument("--name", help="the campaign's name (default quick-<engine>-<model>)")
    p.add_argument("--results", default="results", help="the controller's results directory (default ./results)")
    p.add_argument("-i", "--inventory", metavar="INVENTORY",
                   help="Ansible inventory (default: ansible.cfg's, this machine)")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="EXTRA",
                   help="more extra variables for the playbook, as for ansible-playbook (repeatable)")
    p.add_argument("--fresh", action="store_true", help="measure again where this campaign already ran (the old "
                                                        "results are kept, moved aside)")
    p.add_argument("--json-events", metavar="FILE", help="also keep the progress events (JSON lines) in FILE")
    p.add_argument("--quiet", action="store_true", help="no live display; only the final summary")
    p.add_argument("--print-campaign", action="store_true", help="print the campaign and exit; nothing runs")
    p.set_defaults(func=quick)


def model_name(model: str) -> str:
    """The model's name in the campaign: its file or directory name, without .gguf, in the names' alphabet."""
    stem = Path(model.rstrip("/")).name
    stem = stem[:-5] if stem.endswith(".gguf") else stem
    return re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:60] or "model"


def campaign_name(engine: str, model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", f"quick-{engine}-{model_name(model)}")[:80]


def build_campaign(args) -> dict:
    """The campaign the flags describe (validated by the play like any other)."""
    if args.iterations < 1:
        raise UsageError(f"--iterations {args.iterations}: at least 1")
    if args.environment != "bare" and not args.image:
        raise UsageError(f"--environment {args.environment} runs the server in an image: give --image")
    model_path = str(Path(args.model).expanduser().resolve())
    model = {"name": model_name(model_path), "path": model_path}
    if args.tokenizer:
        model["tokenizer"] = str(Path(args.tokenizer).expanduser().resolve())
    if args.random_weights:
        model["random_weights"] = True
    workload = {"name": "quick", "engine": args.engine, "preset": args.preset}
    if args.server_arg:
        workload["server_args"] = list(args.server_arg)
    campaign = {"name": args.name or campaign_name(args.engine, model_path),
                "description": f"sparkfleet quick: {args.engine} serving {model_path} ({args.environment}), "
                               f"{args.preset} points",
                "models": [model],
                "environments": [{"name": args.environment, "kind": args.environment}],
                "workloads": [workload], "iterations": args.iterations, "warmup_runs": 0}
    if args.image:
        campaign["image"] = args.image
    return campaign


def extra_vars(args, campaign_file: Path) -> list[str]:
    """The run's extra vars: the campaign file, the results directory and the models directory (the model's own,
    so a container or a chroot sees it at the same path), then the user's."""
    model_dir = Path(args.model).expanduser().resolve().parent  # a .gguf file's directory, or a model directory's
    return [f"@{campaign_file}", f"sparkfleet_results_dir={Path(args.results).resolve()}",
            f"sparkfleet_models_dir={model_dir}", *args.extra_vars]


def quick(args) -> int:
    from sparkfleet.commands import run

    if not Path(args.model).expanduser().exists():
        raise UsageError(f"model {args.model}: no such file or directory on this machine")
    campaign = build_campaign(args)
    text = yaml.safe_dump({"sparkfleet_campaign": campaign}, sort_keys=False)
    if args.print_campaign:
        print(text, end="")
        return 0
    results = Path(args.results).resolve()
    results.mkdir(parents=True, exist_ok=True)
    campaign_file = results / f"{campaign['name']}.campaign.yml"
    campaign_file.write_text("# written by `sparkfleet quick`; run it again with `sparkfleet run -e @THIS_FILE "
                             f"-e sparkfleet_results_dir={results}`\n" + text)
    print(f"sparkfleet quick: campaign {campaign['name']} in {campaign_file}", flush=True)
    run_args = argparse.Namespace(inventory=args.inventory, extra_vars=extra_vars(args, campaign_file),
                                  playbook="bench.yml", json_events=args.json_events, env=[], quiet=args.quiet,
                                  fresh=args.fresh)
    return run.run(run_args)
