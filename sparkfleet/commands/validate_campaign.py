"""`sparkfleet validate CAMPAIGN.yml`: check a campaign offline, before any host is touched.

It refuses what the validate stage refuses of a host with the settings given (--vars, -e, --models-dir; else the
registry defaults, as plan and the playbooks use them): a model path outside the models directory
(``sparkfleet_models_dir``, default ``<sparkfleet_work_dir>/models``), a trtllm model without a ``path`` unless a
Hugging Face cache is bound (``sparkfleet_hf_cache_dir``).
"""

from __future__ import annotations

import json

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, load, plan
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.planning import (
    host_models_dir,
    model_path_problems,
    pathless_trtllm_models,
)
from sparkfleet.commands.plan import HOST, add_host_options, host_variables


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a campaign file offline and print its plan size")
    p.add_argument("campaign", metavar="CAMPAIGN.yml")
    p.add_argument("--json", action="store_true", help="print the resolved campaign and plan as JSON")
    p.add_argument("--models-dir", metavar="DIR", help="the hosts' models directory (sparkfleet_models_dir; "
                   "default: the hosts' default, <sparkfleet_work_dir>/models): refuse a model path outside it, as "
                   "the validate stage does")
    add_host_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    campaign = load(args.campaign)  # CampaignError -> one clear message per problem, exit 2
    if args.models_dir is not None and not args.models_dir.startswith("/"):
        raise CampaignError([f"--models-dir: must be an absolute path, got {args.models_dir!r}"], args.campaign)
    variables = host_variables(args)
    if args.models_dir:
        variables["sparkfleet_models_dir"] = args.models_dir
    problems = model_path_problems(campaign, host_models_dir(variables))
    # The hosts refuse a trtllm model without a path unless they bind a Hugging Face cache: so does this.
    problems += pathless_trtllm_models(campaign, settings.setting(variables, "sparkfleet_hf_cache_dir"))
    if problems:
        raise CampaignError(problems, args.campaign)
    runs = plan(campaign, host=HOST, host_settings=variables)
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
