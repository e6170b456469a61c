# Copyright: sparkfleet contributors
# Apache-2.0
"""Check that a host can run the campaign: resolved on the controller, the host asked in one read-only command."""

from __future__ import annotations

import json
import os
import shlex

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import resume, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import (
    COLLECTION_ROOT,
    checked_args,
    marked_sections,
    sparkfleet,
)

#: The options documented in plugins/modules/campaign_check.py (a test checks that the two agree).
ARGUMENT_SPEC = {
    "campaign": {"type": "raw"},
}
MARK = "@@sparkfleet-check@@"


def probe_command(paths: list[str], kept: list[str]) -> str:
    """One shell command (test/cat only): whether each path exists, then each kept configuration file."""
    q = shlex.quote
    parts = [f"printf '%s\\n' '{MARK} path'; test -e {q(p)} && echo yes || echo no" for p in paths]
    parts += [f"printf '\\n%s\\n' '{MARK} kept'; cat {q(k)} 2>/dev/null" for k in kept]
    return "; ".join(parts + ["true"])


def parse_probe(text: str, paths: list[str], kept: list[str]) -> tuple[list[str], list]:
    """(the paths that do not exist, each kept file's JSON or None) from probe_command's output."""
    sections = marked_sections(text, MARK)
    answers = [body.strip() for kind, body in sections if kind == "path"]
    files = [body for kind, body in sections if kind == "kept"]
    if len(answers) != len(paths) or len(files) != len(kept):
        raise AnsibleActionFail(f"could not read the host's answer to the campaign check: {text[-400:]!r}")
    missing = [p for p, answer in zip(paths, answers, strict=True) if answer != "yes"]
    configs = []
    for body in files:
        try:
            data = json.loads(body) if body.strip() else None
        except ValueError:
            data = None  # half-written or damaged: bench_run judges the host's results again itself
        configs.append(data if isinstance(data, dict) else None)
    return missing, configs


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _variables(self, planning, task_vars: dict) -> dict:
        """The host's sparkfleet_* settings, templated; an unknown name is kept (unvalued) to be warned about."""
        out, problems = {}, []
        for name in sorted(task_vars):
            if not name.startswith("sparkfleet_") or name in settings.SET_BY_PLAYBOOKS:
                continue
            if name not in settings.SETTINGS_BY_NAME:
                out[name] = None
                continue
            try:
                out[name] = planning.plain(self._templar.template(task_vars[name]))
            except (AnsibleError, TypeError, ValueError) as exc:
                problems.append(f"{name}: cannot be templated ({exc})")
        if problems:
            raise AnsibleActionFail(f"bad inventory variables: {task_vars.get('inventory_hostname')}: "
                                    + "; ".join(problems))
        return out

    def _campaign(self, planning, args: dict, task_vars: dict):
        if args.get("campaign") is not None:
            return planning.plain(args["campaign"])
        return planning.default_campaign(task_vars.get("group_names") or [], "campaign", COLLECTION_ROOT)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        planning = sparkfleet("planning")
        args = checked_args(ARGUMENT_SPEC, self._task.args)
        host = str(task_vars.get("inventory_hostname"))
        try:
            campaign = self._campaign(planning, args, task_vars)
        except (TypeError, ValueError) as exc:  # e.g. an unquoted YAML date: not JSON data
            raise AnsibleActionFail(f"sparkfleet_campaign: must be plain data (mappings, lists, strings, "
                                    f"numbers): {exc}") from None
        try:
            check = planning.check_host(host, campaign, self._variables(planning, task_vars))
        except planning.CampaignError as exc:
            raise AnsibleActionFail(str(exc)) from None
        models = [m for m in check.campaign["models"] if m.get("path")]
        names = planning.kept_names(check.campaign)
        kept_files = [os.path.join(planning.host_results_dir(check.settings, n, host), resume.CONFIG_FILE)
                      for n in names]
        out = self._low_level_execute_command(probe_command([m["path"] for m in models], kept_files))
        if out.get("rc") not in (0, None):
            raise AnsibleActionFail(f"could not ask the host about the campaign: {out.get('stderr', '').strip()}")
        missing, configs = parse_probe(out.get("stdout", ""), [m["path"] for m in models], kept_files)
        check.kept = dict(zip(names, configs, strict=True))
        result.update(check.to_dict(), changed=False, missing_model_paths=missing)
        if check.warnings:
            result["warnings"] = list(check.warnings)
        if missing:
            gone = [m for m in models if m["path"] in missing]
            result.update(failed=True, msg=f"{host}: model path(s) not found: {', '.join(missing)} "
                                           f"(models {', '.join(m['name'] for m in gone)})")
        return result
