"""The one definition of sparkfleet's settings (sparkfleet_host/settings.py) and the drifts it replaced (issue 14).

Each setting, cooldown field, status, Docker flag set and the work-dir default is defined once; what is
derived from it (the settings role, the README table, argument_specs, thermal_wait's options) is checked
here, and a test fails when a setting gets a default in a second place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from _ansible_modules import load_module, run_module

from sparkfleet import campaign, settings_doc
from sparkfleet.hostvars import problems
from sparkfleet_host import ledger, record, settings, thermal

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "main.yml").exists())


# ------------------------------------------------------------------------------------ generated files


@pytest.mark.parametrize("path", list(settings_doc.generated()), ids=lambda p: str(p.relative_to(REPO)))
def test_generated_files_are_up_to_date(path):
    assert path.read_text() == settings_doc.generated()[path], (
        f"{path.relative_to(REPO)} is stale: run python -m sparkfleet.settings_doc --write")


def test_settings_role_argument_specs_cover_every_setting_with_its_type_and_default():
    spec = yaml.safe_load(settings_doc.ARGSPEC_FILE.read_text())["argument_specs"]["main"]["options"]
    assert list(spec) == [f.name for f in settings.SETTINGS]
    for f in settings.SETTINGS:
        assert spec[f.name]["type"] == f.to_ansible_type()
        if f.default is not None and "{{" not in str(f.default):
            assert spec[f.name]["default"] == f.default


def test_settings_role_defaults_are_the_registry_defaults():
    defaults = yaml.safe_load(settings_doc.DEFAULTS_FILE.read_text())
    assert defaults == {f.name: f.default for f in settings.SETTINGS}


@pytest.mark.parametrize("role", [r for r in ROLES if r != "settings"])
def test_every_role_depends_on_the_settings_role(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    assert {"role": "sparkfleet.bench.settings"} in meta["dependencies"] or \
        "sparkfleet.bench.settings" in meta["dependencies"]


def _role_defaults(role: str) -> dict:
    path = REPO / "roles" / role / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


_COMPATIBLE = {("float", "int"), ("path", "str"), ("str", "path"), ("raw", "str")}


@pytest.mark.parametrize("role", [r for r in ROLES if r != "settings"])
def test_role_options_copied_from_a_setting_have_its_type(role):
    """A role option whose default is a sparkfleet_* setting takes the setting's type in its argument_specs."""
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {k: v for entry in specs.values() for k, v in (entry.get("options") or {}).items()}
    checked = 0
    for option, value in _role_defaults(role).items():
        m = re.fullmatch(r"\{\{ (sparkfleet_\w+)( \| bool)? \}\}", str(value).strip())
        if not m or m.group(1) not in settings.SETTINGS_BY_NAME:
            continue
        f = settings.SETTINGS_BY_NAME[m.group(1)]
        assert option in options, f"{role}: {option} is not in meta/argument_specs.yml"
        want, got = f.to_ansible_type(), options[option]["type"]
        assert want == got or (want, got) in _COMPATIBLE, f"{role}: {option} is {got}, {f.name} is {want}"
        assert f.name in options[option].get("description", ""), f"{role}: {option} does not name {f.name}"
        checked += 1
    assert checked or role in ("collect",), role


# ------------------------------------------------------------------------------ defined in one place

_DEFAULTED = re.compile(r"\b(sparkfleet_[a-z0-9_]+)\s*\|\s*default\(")
_SOURCES = [*sorted((REPO / "roles").glob("*/defaults/*.yml")), *sorted((REPO / "roles").glob("*/tasks/*.yml")),
            *sorted((REPO / "playbooks").glob("*.yml")), REPO / "bench.yml"]


def test_no_setting_gets_a_default_outside_the_registry():
    """`sparkfleet_X | default(...)` in a role or playbook is a second definition of X's default."""
    found = []
    for path in _SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{n}: {name}" for name in _DEFAULTED.findall(line)
                      if name in settings.SETTINGS_BY_NAME]
    assert not found, "settings given a default outside sparkfleet_host/settings.py:\n" + "\n".join(found)


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
            if "roles/settings/" not in str(path) and path.is_file():
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
        if path.name == "settings.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _COOLDOWN_LITERAL.search(line) and "EXAMPLES" not in line and not line.lstrip().startswith("#"):
                places.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not places, places


def test_every_table_names_each_field_once():
    for table in (settings.SETTINGS, settings.CAMPAIGN_FIELDS, settings.COOLDOWN_FIELDS, settings.MODEL_FIELDS,
                  settings.ENVIRONMENT_FIELDS, settings.WORKLOAD_FIELDS, settings.IMAGE_BUILD_FIELDS):
        names = [f.name for f in table]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_number_has_a_physical_range():
    for table in (settings.SETTINGS, settings.CAMPAIGN_FIELDS, settings.COOLDOWN_FIELDS, settings.WORKLOAD_FIELDS):
        for f in table:
            if f.kind in ("int", "float"):
                assert f.low is not None and f.high is not None, f"{f.name}: no physical range"
                assert f.doc, f.name


# ------------------------------------------------------------------------------------------- drifts


def test_one_cooldown_definition_for_campaign_thermal_wait_and_bench_run():
    assert campaign.COOLDOWN_DEFAULTS == settings.defaults(settings.COOLDOWN_FIELDS) == settings.Cooldown().to_dict()
    by_option = {f.option: f.default for f in settings.COOLDOWN_FIELDS if f.option}
    assert {k: thermal.COOLDOWN_DEFAULTS[k] for k in by_option} == by_option
    doc = yaml.safe_load(load_module("thermal_wait").DOCUMENTATION)["options"]
    assert {k: doc[k]["default"] for k in by_option} == by_option  # the module's documented defaults


def test_statuses_are_defined_once():
    assert ledger.FINAL is settings.STATUSES and record.STATUSES is settings.STATUSES
    follow = (REPO / "plugins" / "action" / "bench_follow.py").read_text()
    assert "FINAL = ledger.FINAL" in follow


def test_a_settle_window_longer_than_max_wait_is_refused_by_validate_and_by_the_host_alike():
    cooldown = {"settle_window_s": 120, "max_wait_s": 60}
    with pytest.raises(campaign.CampaignError, match=r"campaign\.cooldown\.settle_window_s: 120 is above max_wait_s"):
        campaign.resolve({"name": "c", "models": ["m"], "environments": ["bare"], "workloads": ["matmul"],
                          "cooldown": cooldown})
    assert thermal.validate_cooldown_options({"settle_window": 120, "max_wait": 60})
    with pytest.raises(ValueError, match="settle_window_s"):
        settings.Cooldown.from_mapping(cooldown)


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
    from sparkfleet_host import resume

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


def test_the_docker_env_role_resolves_variants_with_the_plans_rule(tmp_path):
    """docker_env's facts come from the same function as a planned run's docker flags (no Jinja copy)."""
    import json
    import os
    import subprocess
    import sys

    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - {ansible.builtin.include_role: {name: sparkfleet.bench.docker_env}}\n"
        "    - {ansible.builtin.copy: {dest: '" + str(tmp_path / "out.json") + "', "
        "content: '{{ {\"all\": docker_env_resolved, \"run\": docker_env_run_flags} | to_json }}'}}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook), "-e", "sparkfleet_docker_variant=no-shm-size",
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    want = {name: settings.docker_variant_flags(settings.STUDY_DOCKER_FLAGS, spec)
            for name, spec in settings.DEFAULT_DOCKER_VARIANTS.items()}
    assert out["all"] == want
    env_ = {"name": "c", "kind": "container", "docker_flags": None, "variant": None}
    assert out["run"] == settings.resolve_docker_flags(env_, {"sparkfleet_docker_variant": "no-shm-size"})


@pytest.mark.parametrize(("change", "message"), [
    ({"workload": {"name": "mm", "engine": "matmul", "size": -5}}, "workload.size: must be between 1 and 65536"),
    ({"workload": {"name": "mm", "engine": "matmul", "iterations": float("nan")}}, "workload.iterations: must be"),
    ({"timeout_s": float("inf")}, "timeout_s: must be a finite number"),
    ({"cooldown": {"threshold_c": -300}}, "cooldown.threshold_c: must not be negative"),
])
def test_bench_run_checks_each_planned_run_with_the_campaigns_rules(tmp_path, change, message):
    """The run executor's rules are the campaign's: a plan that did not come through validate is refused the
    same way, before any run starts."""
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
