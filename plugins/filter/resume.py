"""The resume check on the controller: a changed campaign under the same name is refused, naming what changed,
or runs under a new campaign id when the user asks for it (``-e sparkfleet_campaign_on_change=new``).

The rule itself (what counts as a change, the message, the new id) is ``sparkfleet_host.resume``, which each
host's ``bench_run`` applies again to the results it holds.
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleFilterError

try:
    from sparkfleet.campaign import config_hash
    from sparkfleet_host import resume
except ImportError as exc:  # the controller runs ansible from a Python without sparkfleet installed
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _kept(results_dir: str, name: str) -> dict | None:
    """The campaign.json an earlier run of ``name`` left in the controller's results, if any."""
    path = os.path.join(str(results_dir), name, "campaign.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"{path}: cannot read the campaign kept there ({exc}); move it aside") from None
    if not isinstance(data, dict) or "config_hash" not in data:
        return None  # e.g. an imported study: no configuration to compare with
    return data


def campaign_resume(campaign, results_dir, on_change="refuse"):
    """The campaign to run: ``campaign`` itself when it is new or unchanged since its results were started
    under ``results_dir``; renamed to ``<name>-<hash8>`` (and its hash recomputed) when it changed and
    ``on_change`` is ``new``; otherwise fails naming every changed field."""
    if _IMPORT_ERROR is not None:
        raise AnsibleFilterError(f"sparkfleet is not importable by the Python running ansible ({_IMPORT_ERROR})")
    if on_change not in resume.ON_CHANGE:
        raise AnsibleFilterError(f"sparkfleet_campaign_on_change: {on_change!r} is not one of "
                                 f"{', '.join(resume.ON_CHANGE)}")
    campaign = dict(campaign)
    now = {"config_hash": campaign["config_hash"], "resolved": campaign}
    kept = _kept(results_dir, campaign["name"])
    if kept is None or resume.same_measurement(kept, now):
        return campaign
    if on_change != "new":
        raise AnsibleFilterError(resume.refusal(campaign["name"], f"{results_dir}/{campaign['name']}/campaign.json",
                                                kept, now))
    renamed = {**campaign, "name": resume.new_campaign_name(campaign["name"], campaign["config_hash"])}
    renamed["config_hash"] = config_hash(renamed)
    again = _kept(results_dir, renamed["name"])
    if again is not None and not resume.same_measurement(again, {"config_hash": renamed["config_hash"],
                                                                  "resolved": renamed}):
        raise AnsibleFilterError(resume.refusal(renamed["name"], f"{results_dir}/{renamed['name']}/campaign.json",
                                                again, {"config_hash": renamed["config_hash"], "resolved": renamed}))
    return renamed


class FilterModule:
    def filters(self):
        return {"campaign_resume": campaign_resume}
