"""`sparkfleet validate CAMPAIGN.yml`: check a campaign offline, before any host is touched."""

from __future__ import annotations

import json

from sparkfleet.campaign import load, plan


def register(sub) -> None:
    p = sub.add_parser("validate", help="check a campaign file offline and print its plan size")
    p.add_argument("campaign", metavar="CAMPAIGN.yml")
    p.add_argument("--json", action="store_true", help="print the resolved campaign and plan as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    campaign = load(args.campaign)  # CampaignError -> one clear message per problem, exit 2
    runs = plan(campaign, host="HOST")
    if args.json:
        print(json.dumps({"campaign": campaign, "runs_per_host": len(runs)}, indent=2, sort_keys=True))
    else:
        print(f"{args.campaign}: ok — campaign {campaign['name']!r}: {len(campaign['models'])} model(s) × "
              f"{len(campaign['environments'])} environment(s) × {len(campaign['workloads'])} workload(s) × "
              f"{campaign['iterations']} iteration(s) + {campaign['warmup_runs']} warm-up = {len(runs)} runs "
              f"per host, order {campaign['order']}, config hash {campaign['config_hash']}")
    return 0
