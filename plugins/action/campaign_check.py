# Copyright: sparkfleet contributors
# Apache-2.0
"""Check that a host can run the campaign: resolved on the controller, the host asked in one read-only command."""

from __future__ import annotations

import contextlib
import json
import os
import shlex

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import resume
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.controller import checked_args, marked_sections

#: The options documented in plugins/modules/campaign_check.py (a test checks that the two agree).
ARGUMENT_SPEC = {
    "campaign": {"type": "raw"},
}
MARK = "@@sparkfleet-check@@"


def probe_command(paths: list[str], kept: list[str], models_dir: str | None = None) -> str:
    """One read-only shell command (test/readlink/cat): whether each path exists and where it really leads,
    then each kept configuration file, then where the models directory really is."""
    q = shlex.quote
    parts = [f"printf '%s\\n' '{MARK} path'; if test -e {q(p)}; then echo yes; readlink -f {q(p)}; else echo no; fi"
             for p in paths]
    parts += [f"printf '\\n%s\\n' '{MARK} kept'; cat {q(k)} 2>/dev/null" for k in kept]
    if models_dir:
        parts.append(f"printf '\\n%s\\n' '{MARK} models_dir'; readlink -f {q(models_dir)} 2>/dev/null")
    return "; ".join(parts + ["true"])


def parse_probe(text: str, paths: list[str], kept: list[str]) -> tuple[list[str], list]:
    """(the paths that do not exist, each kept file's JSON or None) from probe_command's output."""
    sections = marked_sections(text, MARK)
    answers = [body.strip().splitlines()[:1] for kind, body in sections if kind == "path"]
    files = [body for kind, body in sections if kind == "kept"]
    if len(answers) != len(paths) or len(files) != len(kept):
        raise AnsibleActionFail(f"could not read the host's answer to the campaign check: {text[-400:]!r}")
    missing = [p for p, answer in zip(paths, answers, strict=True) if answer != ["yes"]]
    configs = []
    for body in files:
        data = None
        with contextlib.suppress(ValueError):  # half-written or damaged: bench_run judges the host's results itself
            data = json.loads(body) if body.strip() else None
        configs.append(data if isinstance(data, dict) else None)
    return missing, configs


def linked_outside(text: str, paths: list[str], models_dir: str) -> list[tuple[str, str, str]]:
    """(path, where it really leads, where the models directory really is) for each existing path that a
    symlink leads out of the models directory: inside the chroot and the container that link goes nowhere."""
    sections = marked_sections(text, MARK)
    real_dir = next((body.strip() for kind, body in sections if kind == "models_dir"), "")
    answers = [body.strip().splitlines() for kind, body in sections if kind == "path"]
    if not real_dir or len(answers) != len(paths):
        return []
    within = planning.path_within
    return [(p, lines[1].strip(), real_dir) for p, lines in zip(paths, answers, strict=True)
            if len(lines) > 1 and lines[0] == "yes" and not within(lines[1].strip(), real_dir)]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def _variables(self, task_vars: dict) -> dict:
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

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = checked_args(ARGUMENT_SPEC, self._task.args)
        host = str(task_vars.get("inventory_hostname"))
        try:
            campaign = (planning.plain(args["campaign"]) if args.get("campaign") is not None
                        else planning.default_campaign(task_vars.get("group_names") or [], "campaign"))
        except (TypeError, ValueError) as exc:  # e.g. an unquoted YAML date: not JSON data
            raise AnsibleActionFail(f"sparkfleet_campaign: must be plain data (mappings, lists, strings, "
                                    f"numbers): {exc}") from None
        try:
            check_vars = self._variables(task_vars)
            check = planning.check_host(host, campaign, check_vars)
        except planning.CampaignError as exc:
            raise AnsibleActionFail(str(exc)) from None
        check.address = str(self._templar.template(task_vars.get("ansible_host") or host))
        models = [m for m in check.campaign["models"] if m.get("path")]
        names = planning.kept_names(check.campaign)
        kept_files = [os.path.join(check.knobs["paths"]["results_root"], n, host, resume.CONFIG_FILE) for n in names]
        paths = [m["path"] for m in models]
        bound = any(e.get("kind") in planning.BOUND_KINDS for e in check.campaign["environments"])
        models_dir = planning.host_models_dir(check_vars) if bound and paths else None
        try:
            out = self._low_level_execute_command(probe_command(paths, kept_files, models_dir))
        except AnsibleConnectionFailure as exc:
            # Unreachable, with the controller's check done: Ansible drops this host (reported as unreachable)
            # and campaign_plan still plans its runs into campaign.json, so the report names them missing.
            result.update(check.to_dict(), changed=False, unreachable=True, msg=str(exc))
            return result
        if out.get("rc") not in (0, None):
            raise AnsibleActionFail(f"could not ask the host about the campaign: {out.get('stderr', '').strip()}")
        missing, configs = parse_probe(out.get("stdout", ""), paths, kept_files)
        check.kept = dict(zip(names, configs, strict=True))
        result.update(check.to_dict(), changed=False, missing_model_paths=missing)
        if check.warnings:
            result["warnings"] = list(check.warnings)
        problems = []
        if missing:
            gone = [m for m in models if m["path"] in missing]
            problems.append(f"{host}: model path(s) not found: {', '.join(missing)} "
                            f"(models {', '.join(m['name'] for m in gone)})")
        if models_dir:
            problems += [f"{host}: model path {path} is a link to {real}, outside the models directory {models_dir} "
                         f"({real_dir}): the native chroot and the container see the models directory only; put "
                         f"the model itself under it" for path, real, real_dir in
                         linked_outside(out.get("stdout", ""), paths, models_dir)]
        if problems:
            result.update(failed=True, msg="; ".join(problems))
        return result
