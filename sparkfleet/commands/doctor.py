"""`sparkfleet doctor -i INVENTORY`: is every host ready? SSH, sudo, Docker, GPU, disk, clock.

A fast parallel pre-check over SSH (paramiko, host-key checking on). Prints a table, or JSON with
``--json``; exit 0 when every host passes, 1 otherwise, 2 on bad arguments. A host without a GPU passes as
"CPU workloads only" when the campaign it would run (``--campaign``, else its own) needs no GPU.
"""

from __future__ import annotations

import json

from sparkfleet.argtypes import finite_float


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check every host of an inventory: SSH, sudo, Docker, GPU, disk, clock skew")
    p.add_argument("-i", "--inventory", required=True, metavar="INVENTORY", help="Ansible inventory (e.g. sparks.ini)")
    p.add_argument("--timeout", type=finite_float, default=10.0, metavar="S",
                   help="seconds for connecting and for each check (default 10)")
    p.add_argument("--campaign", metavar="CAMPAIGN.yml",
                   help="check every host against this campaign (default: the one each host would run: its "
                        "sparkfleet_campaign, else the study for the sparks group and the sanity campaign elsewhere); "
                        "a host without a GPU is ready for a campaign that needs none")
    p.add_argument("--min-free-gib", type=finite_float, default=None, metavar="GIB",
                   help="least free disk under the work dir (default: each host's "
                        "sparkfleet_preflight_min_free_disk_gib, preflight's own limit, "
                        f"{_default_min_free_gib():g} GiB unless set)")
    p.add_argument("--max-skew", type=finite_float, default=1.0, metavar="S",
                   help="largest clock skew against this machine (default 1 s)")
    p.add_argument("--json", action="store_true", help="print the per-host results as JSON")
    p.set_defaults(func=run)


def _default_min_free_gib() -> float:
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import SETTINGS_BY_NAME

    return float(SETTINGS_BY_NAME["sparkfleet_preflight_min_free_disk_gib"].default)


def run(args) -> int:
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import load
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
    from sparkfleet.doctor import Limits, check_fleet, load_targets, render_table

    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    campaign = load(args.campaign) if args.campaign else None  # CampaignError: one line per problem, exit 2
    targets = load_targets(args.inventory, campaign)
    reports = check_fleet(targets, Limits(timeout=args.timeout, min_free_gib=args.min_free_gib,
                                          max_skew_s=args.max_skew))
    if args.json:
        print(json.dumps({"ok": all(r.ok for r in reports), "hosts": [r.to_dict() for r in reports]},
                         indent=2, sort_keys=True))
    else:
        print(render_table(reports))
    return 0 if all(r.ok for r in reports) else 1
