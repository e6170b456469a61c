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


#: kind -> (group_vars file of the sparks group or None, of every other host, its key)
_DEFAULTS = {
    "campaign": ("sparks/campaign.yml", "all/campaign.yml", "sparkfleet_campaign"),
    "reference": (None, "all/reproducibility.yml", "sparkfleet_reference_campaign"),
}


def default_campaign(group_names, kind="campaign"):
    """The campaign a host gets when none is given (kind ``campaign``: the study's matrix for the ``sparks``
    group, the sanity campaign otherwise; kind ``reference``: the reproducibility check's). Read from the
    collection's own inventory/group_vars, so that an inventory kept elsewhere, which does not see those
    group_vars, gets the same defaults."""
    import os  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    if kind not in _DEFAULTS:
        raise AnsibleFilterError(f"default_campaign: kind must be one of {', '.join(_DEFAULTS)}, not {kind!r}")
    sparks_file, other_file, key = _DEFAULTS[kind]
    name = sparks_file if sparks_file and "sparks" in (group_names or ()) else other_file
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "inventory", "group_vars", name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)[key]


def campaign_plan(campaign, host, settings=None):
    """The host's planned runs, in execution order, as plain dicts, each with its full launch spec (a container's
    docker flags resolved from ``settings``, the host's sparkfleet_* variables; timeout; cooldown)."""
    _need_sparkfleet()
    try:
        return [run.to_dict() for run in plan(campaign, str(host), dict(settings or {}))]
    except CampaignError as exc:
        raise AnsibleFilterError(str(exc)) from None


def docker_variant_flags(variants, flags):
    """Variant name -> its docker run flags: ``flags`` without the variant's remove_flags, then its extra_flags
    (the rule campaign.plan resolves a container environment's flags with)."""
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.settings import (  # noqa: PLC0415
        docker_variant_flags as resolve,
    )

    if not isinstance(variants, dict):
        raise AnsibleFilterError(f"docker_variant_flags: variants must be a mapping, got {type(variants).__name__}")
    return {name: resolve(list(flags or []), spec) for name, spec in variants.items()}


def host_settings_problems(variables, host):
    """{'errors': [...], 'warnings': [...]} for a host's sparkfleet_* inventory variables."""
    _need_sparkfleet()
    errors, warnings = hostvars.problems(str(host), dict(variables))
    return {"errors": errors, "warnings": warnings}


class FilterModule:
    def filters(self):
        return {"campaign_resolve": campaign_resolve, "default_campaign": default_campaign,
                "campaign_plan": campaign_plan, "docker_variant_flags": docker_variant_flags,
                "host_settings_problems": host_settings_problems}
