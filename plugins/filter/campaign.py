"""The default campaigns, for playbooks that pick one by the host's groups (reproducibility.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning


def default_campaign(group_names, kind="campaign"):
    """The campaign a host gets when none is given (kind ``campaign``: the study's matrix for the ``sparks``
    group, the sanity campaign otherwise; kind ``reference``: the reproducibility check's), from the
    collection's catalogue (plugins/plugin_utils/catalogue/campaigns/)."""
    try:
        return planning.default_campaign(group_names, kind)
    except planning.CampaignError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"default_campaign": default_campaign}
