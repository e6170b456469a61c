"""`sparkfleet validate CAMPAIGN.yml`: check a campaign offline, before any host is touched."""

from __future__ import annotations

import json
import sys

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, load, plan
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.planning import (
    model_path_problems,
    pathless_trtllm_models,
)


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a campaign file offline and print its plan size")
    p.add_argument("campaign", metavar="CAMPAIGN.yml")
    p.add_argument("--json", action="store_true", help="print the resolved campaign and plan as JSON")
    p.add_argument("--models-dir", metavar="DIR", help="the hosts' models directory (sparkfleet_models_dir): "
                   "refuse a model path outside it, as the validate stage does")
    p.set_defaults(func=run)


def run(args) -> int:
    campaign = load(args.campaign)  # CampaignError -> one clear message per problem, exit 2
    if args.models_dir is not None and not args.models_dir.startswith("/"):
        raise CampaignError([f"--models-dir: must be an absolute path, got {args.models_dir!r}"], args.campaign)
    if args.models_dir:
        problems = model_path_problems(campaign, args.models_dir)
        if problems:
            raise CampaignError(problems, args.campaign)
    for problem in pathless_trtllm_models(campaign):  # the hosts refuse it unless they bind an HF cache
        print(f"{args.campaign}: warning: {problem}", file=sys.stderr)
    runs = plan(campaign, host="HOST")
    if args.json:
        typical, upper = estimate.estimate_s(campaign)
        print(json.dumps({"campaign": campaign, "runs_per_host": len(runs), "estimated_s_per_host": {
            "typical": typical, "upper_bound": upper, "assumptions": estimate.estimate_text(campaign)}},
            indent=2, sort_keys=True))
    else:
        print(f"{args.campaign}: ok — campaign {campaign['name']!r}: {len(campaign['models'])} model(s) × "
              f"{len(campaign['environments'])} environment(s) × {len(campaign['workloads'])} workload(s) × "
              f"{campaign['iterations']} iteration(s) + {campaign['warmup_runs']} warm-up = {len(runs)} runs "
              f"per host, order {campaign['order']}, config hash {campaign['config_hash']}; "
              f"{estimate.estimate_text(campaign)}")
    return 0
