"""The one definition of sparkfleet's settings (plugin_utils/settings.py) and the drifts it replaced (issue 14).

Each setting, cooldown field, status, Docker flag set and the work-dir default is defined once; what is
derived from it (the README table, each host's plan, thermal_wait's options) is checked here, and a test fails
when a setting gets a default in a second place or a role reads a setting instead of the host's plan.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from _ansible_modules import load_module, run_module

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import fields, record
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.health import thermal
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import campaign, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import setting_problems as problems
from sparkfleet import settings_doc

REPO = Path(__file__).resolve().parents[4]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "main.yml").exists())


# ------------------------------------------------------------------------------------ generated files


@pytest.mark.parametrize("path", list(settings_doc.generated()), ids=lambda p: str(p.relative_to(REPO)))
def test_generated_files_are_up_to_date(path):
    assert path.read_text() == settings_doc.generated()[path], (
        f"{path.relative_to(REPO)} is stale: run python -m sparkfleet.settings_doc --write")


#: A name that may be a sparkfleet_* setting.
_SETTING_REF = re.compile(r"\b(sparkfleet_[a-z0-9_]+)")


@pytest.mark.parametrize("role", [r for r in ROLES if r not in ("settings", "collect")])
def test_roles_read_the_plan_and_no_setting(role):
    """A role reads sparkfleet_plan (validate.yml, or host_plan.yml for a stage run alone), never a sparkfleet_*
    setting or a prefixed copy of one: the defaults are applied once, on the controller."""
    found = []
    for path in sorted((REPO / "roles" / role).glob("*/*.yml")):
        if path.parent.name not in ("defaults", "tasks", "vars", "handlers"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            found += [f"{path.relative_to(REPO)}:{n}: {name}" for name in _SETTING_REF.findall(code)
                      if name in settings.SETTINGS_BY_NAME]
    assert not found, "roles reading a setting instead of sparkfleet_plan:\n" + "\n".join(found)
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    assert "sparkfleet.bench.settings" not in str(meta.get("dependencies"))


def test_every_setting_a_role_needs_is_in_the_plan():
    from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning  # noqa: PLC0415

    grouped = {f"sparkfleet_plan.{group}.{key}" for group, keys in planning.PLAN_GROUPS.items() for key in keys}
    grouped |= {f"sparkfleet_plan.paths.{k}" for k in ("models_dir", "results_root", "results_dir")}
    grouped |= {"sparkfleet_plan.image.ref"}
    grouped |= {f"sparkfleet_plan.nvml.{k}" for k in ("package", "version", "sha256")}  # the pin, gpu.py's
    grouped |= {"sparkfleet_plan.serving.install"}  # the clients the role installs, serving_client.DRIVERS' pins
    used = set()
    for path in [*(REPO / "roles").glob("*/*/*.yml"), *(REPO / "playbooks").glob("*.yml")]:
        used |= set(re.findall(r"sparkfleet_plan\.(?:paths|workload|image|rootfs|docker|gpu_state|preflight|"
                               r"reproducibility|serving|nvml|readiness)\.[a-z0-9_]+", path.read_text()))
    assert used and used <= grouped, used - grouped


# ------------------------------------------------------------------------------ defined in one place

_DEFAULTED = re.compile(r"\b(sparkfleet_[a-z0-9_]+)\s*\|\s*default\((?!omit\))")
_SOURCES = [*sorted((REPO / "roles").glob("*/defaults/*.yml")), *sorted((REPO / "roles").glob("*/tasks/*.yml")),
            *sorted((REPO / "playbooks").glob("*.yml")), REPO / "bench.yml"]


def test_no_setting_gets_a_default_outside_the_registry():
    """`sparkfleet_X | default(...)` in a role or playbook is a second definition of X's default."""
    found = []
    for path in _SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{n}: {name}" for name in _DEFAULTED.findall(line)
                      if name in settings.SETTINGS_BY_NAME]
    assert not found, "settings given a default outside plugin_utils/settings.py:\n" + "\n".join(found)


def test_inventory_group_vars_do_not_restate_a_registry_default():
    found = []
    for path in sorted((REPO / "inventory").rglob("*.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            f = settings.SETTINGS_BY_NAME.get(name)
            if f is not None and value == f.default:
                found.append(f"{path.relative_to(REPO)}: {name}: {value!r}")
    assert not found, found


def _files(*patterns):
    for pattern in patterns:
        for path in sorted(REPO.glob(pattern)):
            if path.is_file():
                yield path


@pytest.mark.parametrize(("literal", "what"), [
    ("/var/lib/sparkfleet", "the work-dir default"),
    ("--shm-size=60g", "the study's Docker flags"),
])
def test_a_default_literal_appears_only_in_the_registry(literal, what):
    places = [str(p.relative_to(REPO)) for p in _files("roles/**/*.yml", "roles/*/README.md", "playbooks/*.yml",
                                                        "sparkfleet/**/*.py", "plugins/filter/*.py",
                                                        "plugins/action/*.py", "plugins/callback/*.py")
              if literal in p.read_text()]
    assert not places, f"{what} ({literal}) restated in {places}"


_NAMES = "threshold_c|settle_band_c|settle_window_s|min_wait_s|max_wait_s|poll_interval_s"
#: A default supplied in code: .get("max_wait_s", 900), max_wait_s | default(900), max_wait_s=900 in a signature.
_COOLDOWN_LITERAL = re.compile(rf"""get\(\s*["']({_NAMES})["']\s*,\s*[0-9]|({_NAMES})\s*\|\s*default\(\s*[0-9]"""
                               rf"""|\b({_NAMES})\s*(?::\s*float\s*)?=\s*[0-9]""")


def test_cooldown_defaults_are_not_restated():
    places = []
    for path in _files("sparkfleet/**/*.py", "plugins/modules/*.py", "plugins/action/*.py", "roles/**/*.yml",
                       "playbooks/*.yml", "plugins/module_utils/sparkfleet_host/*.py"):
        if path.name == "thermal.py":  # the cooldown fields
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _COOLDOWN_LITERAL.search(line) and "EXAMPLES" not in line and not line.lstrip().startswith("#"):
                places.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not places, places


def test_every_table_names_each_field_once():
    for table in (settings.SETTINGS, settings.CAMPAIGN_FIELDS, thermal.COOLDOWN_FIELDS, settings.MODEL_FIELDS,
                  settings.ENVIRONMENT_FIELDS, settings.WORKLOAD_FIELDS, settings.IMAGE_BUILD_FIELDS):
        names = [f.name for f in table]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_number_has_a_physical_range():
    for table in (settings.SETTINGS, settings.CAMPAIGN_FIELDS, thermal.COOLDOWN_FIELDS, settings.WORKLOAD_FIELDS):
        for f in table:
            if f.kind in ("int", "float"):
                assert f.low is not None and f.high is not None, f"{f.name}: no physical range"
                assert f.doc, f.name


# ------------------------------------------------------------------------------------------- drifts


def test_one_cooldown_definition_for_campaign_thermal_wait_and_bench_run():
    assert campaign.COOLDOWN_DEFAULTS == fields.defaults(thermal.COOLDOWN_FIELDS) == thermal.Cooldown().to_dict()
    by_option = {f.option: f.default for f in thermal.COOLDOWN_FIELDS if f.option}
    assert {k: thermal.COOLDOWN_DEFAULTS[k] for k in by_option} == by_option
    doc = yaml.safe_load(load_module("thermal_wait").DOCUMENTATION)["options"]
    assert {k: doc[k]["default"] for k in by_option} == by_option  # the module's documented defaults


def test_a_settle_window_longer_than_max_wait_is_refused_by_validate_and_by_the_host_alike():
    cooldown = {"settle_window_s": 120, "max_wait_s": 60}
    with pytest.raises(campaign.CampaignError, match=r"campaign\.cooldown\.settle_window_s: 120 is above max_wait_s"):
        campaign.resolve({"name": "c", "models": ["m"], "environments": ["bare"], "workloads": ["matmul"],
                          "cooldown": cooldown})
    assert thermal.validate_cooldown_options({"settle_window": 120, "max_wait": 60})
    with pytest.raises(ValueError, match="settle_window_s"):
        thermal.Cooldown.from_mapping(cooldown)


def test_bench_run_refuses_a_bad_cooldown_before_any_run_instead_of_raising(tmp_path):
    run = {"run_id": record.run_id("c1", "h1", "m", "bare", "mm", 1), "order_index": 0, "model": {"name": "m"},
           "environment": {"name": "bare", "kind": "bare"}, "workload": {"name": "mm", "engine": "matmul"},
           "iteration": 1, "warmup": False}
    out = run_module(load_module("bench_run"), {
        "runs": [run], "campaign": "c1", "host": "h1", "results_root": str(tmp_path / "results"),
        "cooldown": {"settle_window_s": 120, "max_wait_s": 60, "threshold_c": float("nan")}})
    assert out.get("failed") and "settle_window_s" in out["msg"] and "threshold_c" in out["msg"], out
    assert not (tmp_path / "results" / "c1" / "h1" / "ledger.jsonl").exists()  # no run started


def test_follower_settings_are_settings_not_typos():
    assert problems("h", {"sparkfleet_poll_interval_s": 2, "sparkfleet_report_after_s": 60}) == ([], [])


def test_the_resume_choice_is_the_settings_choice():
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import resume

    assert tuple(settings.SETTINGS_BY_NAME["sparkfleet_campaign_on_change"].choices) == tuple(resume.ON_CHANGE)


def test_docker_flags_resolve_from_the_one_definition():
    env = {"name": "c", "kind": "container", "docker_flags": None, "variant": None}
    assert settings.resolve_docker_flags(env, {}) == settings.STUDY_DOCKER_FLAGS
    no_shm = settings.resolve_docker_flags({**env, "variant": "no-shm-size"}, {})
    assert no_shm == [f for f in settings.STUDY_DOCKER_FLAGS if not f.startswith("--shm-size=")]
    assert settings.resolve_docker_flags({**env, "docker_flags": ["--ipc=host"]}, {}) == ["--ipc=host"]
    assert settings.resolve_docker_flags(env, {"sparkfleet_docker_flags": ["--x"]}) == ["--x"]
    with pytest.raises(ValueError, match="unknown Docker environment variant 'nope'"):
        settings.resolve_docker_flags({**env, "variant": "nope"}, {})


@pytest.mark.parametrize(("change", "message"), [
    ({"timeout_s": float("inf")}, "timeout_s: must be a finite number"),
    ({"cooldown": {"threshold_c": -300}}, "cooldown.threshold_c: must not be negative"),
])
def test_bench_run_checks_each_planned_runs_timeout_and_cooldown(tmp_path, change, message):
    """A planned run's timeout and cooldown (bench_run's own options' rules; the workload is the campaign's, checked
    on the controller) are checked before any run starts."""
    run = {"run_id": record.run_id("c1", "h1", "m", "bare", "mm", 1), "order_index": 0, "model": {"name": "m"},
           "environment": {"name": "bare", "kind": "bare"}, "workload": {"name": "mm", "engine": "matmul"},
           "iteration": 1, "warmup": False, **change}
    out = run_module(load_module("bench_run"), {"runs": [run], "campaign": "c1", "host": "h1",
                                                "results_root": str(tmp_path / "results")})
    assert out.get("failed") and message in out["msg"], out
    assert not (tmp_path / "results" / "c1" / "h1" / "ledger.jsonl").exists()


def test_bench_run_refuses_a_nan_timeout_option(tmp_path):
    out = run_module(load_module("bench_run"), {"runs": [], "campaign": "c1", "host": "h1", "timeout_s": "nan",
                                                "results_root": str(tmp_path / "results")})
    assert out.get("failed") and "timeout_s: must be a finite number" in out["msg"], out
