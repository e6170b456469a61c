"""Filters that validate a campaign and plan its runs on the controller, with sparkfleet's own code.

The controller's Python runs these, so a bad campaign fails in the validate stage, before any host is
touched, with the same messages as `sparkfleet validate`.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

try:
    from sparkfleet import hostvars
    from sparkfleet.campaign import CampaignError, plan, resolve
except ImportError as exc:  # the controller runs ansible from a Python without sparkfleet installed
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _need_sparkfleet() -> None:
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(
            f"sparkfleet is not importable by the Python running ansible ({_IMPORT_ERROR}); "
            "run ansible-playbook from the project's virtualenv (./bootstrap.sh bench)")


def campaign_resolve(campaign):
    """Validated, defaulted campaign; fails naming every bad field."""
    _need_sparkfleet()
    try:
        return resolve(campaign, source="sparkfleet_campaign")
    except CampaignError as exc:
        raise AnsibleFilterError(str(exc)) from None


def campaign_plan(campaign, host):
    """The host's planned runs, in execution order, as plain dicts."""
    _need_sparkfleet()
    return [run.to_dict() for run in plan(campaign, str(host))]


def host_settings_problems(variables, host):
    """{'errors': [...], 'warnings': [...]} for a host's sparkfleet_* inventory variables."""
    _need_sparkfleet()
    errors, warnings = hostvars.problems(str(host), dict(variables))
    return {"errors": errors, "warnings": warnings}


class FilterModule:
    def filters(self):
        return {"campaign_resolve": campaign_resolve, "campaign_plan": campaign_plan,
                "host_settings_problems": host_settings_problems}
