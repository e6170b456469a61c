# -*- coding: utf-8 -*-
"""Resume never mixes two configurations of one campaign: the config hash is checked, changes are named.

A campaign's results are resumed by name: re-running ``bench.yml`` skips the runs the ledger says are done.
That is only sound while the campaign is the one that produced them. The resolved campaign (with its
``config_hash``) is kept beside the results where it is first run - the controller's
``results/<campaign>/campaign.json`` and each host's ``<results_root>/<campaign>/<host>/campaign-config.json``
- and a later run of the same name with a different configuration is refused, naming what changed
(:func:`changes`), unless the user asks for the changed campaign to run under a new campaign id
(:func:`new_campaign_name`: ``<name>-<first 8 of its config hash>``, ``-e sparkfleet_campaign_on_change=new``).

Used on the controller (validate stage, by the campaign_plan action) and on each host by
``bench_run`` before it runs anything, so that a controller whose results directory was moved or wiped still
cannot mix runs on a host. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from .record import RECORD_NAME
from .textfile import read_json_object

#: The host's copy of the resolved campaign its results were produced with, beside ledger.jsonl.
CONFIG_FILE = "campaign-config.json"
#: What to do when a campaign changed: refuse (the default), or run it under a new campaign id.
ON_CHANGE = ("refuse", "new")
#: Resolved-campaign fields that do not change what is measured: a change to them alone is no change.
NOT_MEASURED = ("config_hash", "results_dir", "description")

_MISSING = object()
#: Values of a field that is as good as absent (a field added by a later version, not in use).
_EMPTY = (None, False, "", [], {})


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def changes(old: Any, new: Any, path: str = "") -> List[str]:
    """What differs between two resolved campaigns, one ``field: old -> new`` line per leaf that changed.

    Lists of named entries (models, environments, workloads) are matched by name, so a reordered or an
    added workload reads as such rather than as every later entry changing.
    """
    if path == "" and isinstance(old, dict) and isinstance(new, dict):
        old = {k: v for k, v in old.items() if k not in NOT_MEASURED}
        new = {k: v for k, v in new.items() if k not in NOT_MEASURED}
    if isinstance(old, dict) and isinstance(new, dict):
        out: List[str] = []
        for key in list(old) + [k for k in new if k not in old]:
            sub = "%s.%s" % (path, key) if path else str(key)
            out += changes(old.get(key, _MISSING), new.get(key, _MISSING), sub)
        return out
    if isinstance(old, list) and isinstance(new, list) and _named(old) and _named(new):
        old_by = {item["name"]: item for item in old}
        new_by = {item["name"]: item for item in new}
        out = []
        for name in list(old_by) + [n for n in new_by if n not in old_by]:
            sub = "%s[%s]" % (path, name)
            if name not in new_by:
                out.append("%s: removed" % sub)
            elif name not in old_by:
                out.append("%s: added" % sub)
            else:
                out += changes(old_by[name], new_by[name], sub)
        if not out and [i["name"] for i in old] != [i["name"] for i in new]:
            out.append("%s: order %s -> %s" % (path, [i["name"] for i in old], [i["name"] for i in new]))
        return out
    # Equal values are the same setting whatever their class (Ansible hands filters str/dict subclasses
    # that carry data tags); only true/false vs 1/0 differ in meaning.
    if old == new and isinstance(old, bool) == isinstance(new, bool):
        return []
    if _MISSING in (old, new) and (new if old is _MISSING else old) in _EMPTY:
        return []  # a field one sparkfleet version resolves and another lacks, at its empty default: same runs
    return ["%s: %s -> %s" % (path or "campaign", _show(old), _show(new))]


def _named(items: list) -> bool:
    names = [item.get("name") for item in items if isinstance(item, dict)]
    return len(names) == len(items) and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def new_campaign_name(name: str, config_hash: str) -> str:
    """The campaign id a changed campaign runs under when the user opts in: ``<name>-<hash[:8]>``.
    Deterministic: running the same changed campaign again resumes it."""
    return "%s-%s" % (name, str(config_hash)[:8])


def refusal(name: str, where: str, old: Dict[str, Any], new: Dict[str, Any]) -> str:
    """The message that refuses to resume ``name`` with a changed configuration."""
    both = isinstance(old.get("resolved"), dict) and isinstance(new.get("resolved"), dict)
    listed = changes(old["resolved"], new["resolved"]) if both else []
    what = "; ".join(listed) if listed else "the fields that changed are unknown (no resolved campaign was kept)"
    return ("campaign %r was started with another configuration (%s; config hash %s, now %s): %s. "
            "Resuming would mix runs of two configurations in one cell. Restore the campaign, give it a new "
            "name, or run with -e sparkfleet_campaign_on_change=new to run it as campaign %r."
            % (name, where, old.get("config_hash"), new.get("config_hash"), what,
               new_campaign_name(name, new.get("config_hash") or "")))


def same_measurement(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
    """Whether two kept configurations ({config_hash, resolved}) measure the same thing."""
    if old.get("config_hash") == new.get("config_hash"):
        return True
    old_resolved, new_resolved = old.get("resolved"), new.get("resolved")
    return bool(old_resolved) and bool(new_resolved) and not changes(old_resolved, new_resolved)


# ------------------------------------------------------------------------------------------ host side


def read_config(host_dir: str) -> Optional[Dict[str, Any]]:
    return read_json_object(os.path.join(host_dir, CONFIG_FILE))


def record_hashes(host_dir: str, limit: int = 1000) -> Dict[str, str]:
    """config hash -> one run_id, from the records already on the host (for results kept before
    campaign-config.json existed: their records carry the hash under versions.campaign_config_hash)."""
    runs = os.path.join(host_dir, "runs")
    found: Dict[str, str] = {}
    try:
        names = sorted(os.listdir(runs))[:limit]
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(runs, name, RECORD_NAME)) as fh:
                versions = json.load(fh).get("versions") or {}
        except (OSError, ValueError, AttributeError):
            continue
        digest = versions.get("campaign_config_hash") if isinstance(versions, dict) else None
        if isinstance(digest, str) and digest not in found:
            found[digest] = name
    return found


def check_host(host_dir: str, name: str, config: Dict[str, Any]) -> Optional[str]:
    """Why this host's results of campaign ``name`` must not be resumed with ``config``, or None.

    ``config``: ``{"config_hash": ..., "resolved": {...}}``. Results without a kept configuration (from an
    older sparkfleet) are judged by the hash their records carry.
    """
    kept = read_config(host_dir)
    if kept is not None:
        if same_measurement(kept, config):
            return None
        return refusal(name, "on this host", kept, config)
    others = {h: r for h, r in record_hashes(host_dir).items() if h != config.get("config_hash")}
    if others:
        digest, run = next(iter(others.items()))
        return refusal(name, "on this host, run %s" % run, {"config_hash": digest}, config)
    return None


def keep_config(host_dir: str, config: Dict[str, Any], write_json_atomic) -> bool:
    """Keep ``config`` as the host's campaign configuration unless one is kept already (then the results
    were produced with an equal one: check_host said so). Returns whether it wrote the file."""
    if read_config(host_dir) is not None:
        return False
    write_json_atomic(os.path.join(host_dir, CONFIG_FILE),
                      {"config_hash": config.get("config_hash"), "resolved": config.get("resolved")})
    return True
