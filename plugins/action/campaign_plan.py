# Copyright: sparkfleet contributors
# Apache-2.0
"""Plan the fleet's runs once, on the controller, from every host's campaign_check result."""

from __future__ import annotations

import os
import sys
import uuid

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ANSIBLE_VERSION

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import reuse
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import lease
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import checked_args

#: The options documented in plugins/modules/campaign_plan.py (a test checks that the two agree).
ARGUMENT_SPEC = {
    "checks": {"type": "str", "required": True},
    "results_dir": {"type": "path"},
    "on_change": {"type": "str", "default": "refuse", "choices": ["refuse", "new"]},
    "fresh": {"type": "bool", "default": False},
    "run_token": {"type": "str"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        if not self._task.run_once:
            raise AnsibleActionFail("plans the whole fleet at once: run it with run_once: true")
        args = checked_args(ARGUMENT_SPEC, self._task.args)
        hostvars = task_vars["hostvars"]
        hosts = [str(h) for h in task_vars.get("ansible_play_hosts_all") or task_vars.get("ansible_play_hosts") or []]
        try:
            checks, unreachable = planning.usable_checks({h: planning.plain(hostvars[h].get(args["checks"]))
                                                          for h in hosts})
            fleet = planning.plan_fleet(checks, args["results_dir"], os.getcwd(), args["on_change"],
                                        check_mode=bool(self._task.check_mode))
            previous = None
            if args["fresh"] and not self._task.check_mode:  # a new instance: the old one kept beside it, whole
                previous = reuse.move_campaign_instance(os.path.join(fleet.results_dir, fleet.campaign["name"]),
                                                        reuse.stamp())
            path, changed = planning.write_campaign_file(fleet, {"ansible": ANSIBLE_VERSION, "python": sys.executable},
                                                         check_mode=bool(self._task.check_mode))
        except planning.CampaignError as exc:
            raise AnsibleActionFail(str(exc)) from None
        except OSError as exc:
            raise AnsibleActionFail(f"cannot move the previous results aside for a fresh measurement: {exc}") from None
        # The worker's parent is ansible-playbook: while it runs, the hosts' leases are held (host_lease).
        run_lease = {"token": args["run_token"] or uuid.uuid4().hex,
                     "controller": lease.controller_identity(os.getppid())}
        result.update(fleet.to_dict(), campaign_file=path, lease=run_lease, changed=changed or bool(previous),
                      unreachable_hosts=unreachable, previous_instance=previous)
        if unreachable:
            result["warnings"] = [f"{h}: unreachable: its {len(fleet.hosts[h].runs)} planned runs are recorded in "
                                  f"campaign.json and reported missing; the other hosts go on"
                                  for h in unreachable if h in fleet.hosts]
        return result
