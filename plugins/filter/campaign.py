"""Filters that validate a campaign and give the default ones, with sparkfleet's own code.

The controller's Python runs these, so a bad campaign fails in the validate stage, before any host is
touched, with the same messages as `sparkfleet validate`.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import COLLECTION_ROOT, sparkfleet


def campaign_resolve(campaign):
    """Validated, defaulted campaign; fails naming every bad field."""
    campaign_module = sparkfleet("campaign")
    try:
        return campaign_module.resolve(campaign, source="sparkfleet_campaign")
    except campaign_module.CampaignError as exc:
        raise AnsibleFilterError(str(exc)) from None


def default_campaign(group_names, kind="campaign"):
    """The campaign a host gets when none is given (kind ``campaign``: the study's matrix for the ``sparks``
    group, the sanity campaign otherwise; kind ``reference``: the reproducibility check's), from the
    collection's own inventory/group_vars, so that an inventory kept elsewhere gets the same defaults."""
    planning = sparkfleet("planning")
    try:
        return planning.default_campaign(group_names, kind, COLLECTION_ROOT)
    except planning.CampaignError as exc:
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


class FilterModule:
    def filters(self):
        return {"campaign_resolve": campaign_resolve, "default_campaign": default_campaign,
                "docker_variant_flags": docker_variant_flags}
