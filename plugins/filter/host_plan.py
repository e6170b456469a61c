"""The plan of a host that a stage playbook runs without validate.yml: its settings, defaults applied once."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import SETTINGS_BY_NAME


def host_plan(variables, host, groups=None):
    """``sparkfleet_plan`` of ``host`` from its ``sparkfleet_*`` variables (name -> value): paths and knobs
    grouped as validate.yml's plan carries them, no runs; fails naming each bad variable. ``groups``: the host's
    groups, which pick its default campaign when no sparkfleet_campaign is given."""
    if not isinstance(variables, dict):
        raise AnsibleFilterError(f"host_plan: the variables must be a mapping, got {type(variables).__name__}")
    try:
        return planning.standalone_plan(str(host), planning.plain(dict(variables)),
                                        None if groups is None else [str(g) for g in groups])
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"host_plan: the sparkfleet_* variables must be plain data: {exc}") from None
    except planning.CampaignError as exc:
        raise AnsibleFilterError(str(exc)) from None


def setting_default(name):
    """The registry default of the ``sparkfleet_*`` setting ``name`` (plugin_utils/settings.py), for the few
    play keywords templated before any host's plan exists (e.g. max_fail_percentage)."""
    if name not in SETTINGS_BY_NAME:
        raise AnsibleFilterError(f"setting_default: {name!r} is not a sparkfleet setting")
    return SETTINGS_BY_NAME[name].default


class FilterModule:
    def filters(self):
        return {"host_plan": host_plan, "setting_default": setting_default}
