"""The CLI contract: every trtllm argv the planner can produce, checked against each captured version's
``trtllm-bench`` command tree (tests/data/trtllm-cli/<version>.json, transcribed from the upstream source
with file and commit). Any unknown command or option, a bad value or a missing required option fails.
The trees are the tests' data: the product's captured surfaces (trtllm_surfaces) are generated from them, and
what the product reads from an image (trtllm_cli.detect) must give back the tree the image was written from.

The argv come from the real planner (campaign.resolve + campaign.plan) and the real builder
(runexec.engine_steps): every workload preset of the settings registry, in both modes, crossed with the
memory factors, in every environment kind, and the shipped default campaigns. The check is the one the
e2e stand-in makes (click's parsing rules), so what passes here is what the stand-in accepts."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import trtllm_cli
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import runexec
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import campaign as camp
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import settings

REPO = Path(__file__).resolve().parents[4]
TREES = REPO / "tests" / "data" / "trtllm-cli"
STANDIN = REPO / "tests" / "fleet" / "standins" / "trtllm-bench"
#: Each captured version (1.3.0rcN by two of its members), and 1.3.0, past every capture (the newest is used).
VERSIONS = ["1.1.0rc3", "1.2.0rc6", "1.2.0rc8", "1.2.1", "1.3.0rc5", "1.3.0rc13", "1.3.0rc20", "1.3.0rc29", "1.3.0"]


def _standin():
    loader = importlib.machinery.SourceFileLoader("trtllm_bench_standin_contract", str(STANDIN))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


CLICK = _standin()


def tree_for(version: str) -> dict:
    """The tree of the captured surface the product builds ``version``'s commands against offline."""
    surface, how = trtllm_cli.captured_for(version)
    assert how in ("covers", "newest"), (version, how)
    data = json.loads((REPO / surface["data"]).read_text())
    assert how != "covers" or re_full(data["applies_to"].get("pattern"), version)
    return data


def re_full(pattern, version):
    import re

    return bool(pattern) and re.fullmatch(pattern, version) is not None


def check(version: str, argv: list[str]):
    """click's verdict for one step's argv: None when it parses."""
    programs = tree_for(version)["programs"]
    if argv[0] == "trtllm-bench":
        return CLICK.check_cli(programs["trtllm-bench"], "trtllm-bench", argv[1:])
    script = programs.get("prepare_dataset.py")
    if argv[:2] == [script and script["interpreter"], script and script["path"]]:
        return CLICK.check_cli(script, "prepare_dataset.py", argv[2:])
    return f"{version}: no such program in the image: {argv[:2]}"


def _campaigns() -> list[dict]:
    """Campaigns that together produce every argv the planner can build for trtllm."""
    presets = [name for name, p in settings.WORKLOAD_PRESETS.items() if p.get("engine") == "trtllm"]
    workloads = [{"name": f"{p}-{mode}", "preset": p, "mode": mode} for p in presets
                 for mode in ("throughput", "latency")]
    workloads += [{"name": "knobs", "preset": "T4", "concurrency": 8, "requests": 7, "backend": "pytorch"},
                  {"name": "knobs-lat", "preset": "T2", "mode": "latency", "concurrency": 2}]
    models = [{"name": "full", "hf_id": "meta-llama/Llama-3.1-8B", "path": "/models/meta-llama/Llama-3.1-8B"},
              {"name": "pathonly", "path": "/models/local/tiny"}]
    environments = ["native", "bare", {"name": "container", "kind": "container", "docker_flags": ["--ipc=host"]}]
    out = [camp.resolve({"name": "cross", "models": models, "environments": environments, "workloads": workloads,
                         "iterations": 1, "factors": {"kv_fraction": [0.9, 0.5], "drop_caches": [False, True]}}),
           camp.resolve({"name": "memstudy", "preset": "memory-study", "models": models[:1]})]
    return out + [camp.resolve(value, name) for name, value in settings.CAMPAIGNS.items()]  # the catalogue's


def _argvs():
    """(campaign, run, environment kind, steps) for every planned trtllm run and every version."""
    runs = [(c["name"], run) for c in _campaigns() for run in camp.plan(c, host="HOST")
            if run.workload.get("engine") == "trtllm"]
    assert runs
    return runs


RUNS = _argvs()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_planned_argv_parses_in_the_versions_tree(version):
    seen, problems = set(), []
    for campaign_name, run in RUNS:
        model = dict(run.model)
        if not model.get("path"):  # a run without a local model is refused at setup (test_trtllm_cli.py)
            model["path"] = "/models/" + model["name"]
        steps = runexec.engine_steps("trtllm", run.workload, model, "/results/c/h/runs/r", "/w",
                                     trtllm={"version": version})
        for name, argv, _stdout in steps:
            key = tuple(argv)
            if key in seen:
                continue
            seen.add(key)
            problem = check(version, argv)
            if problem:
                problems.append(f"{campaign_name} {run.run_id} step {name}: {' '.join(argv)}\n{problem}")
            if run.environment["kind"] == "container":  # the environment wraps the argv, never changes it
                cmd = runexec.container_command("docker", "sf", "img", run.environment["docker_flags"], argv,
                                                {}, "/r", [], {})
                assert cmd[-len(argv):] == argv
    assert len(seen) > 50
    assert not problems, "\n\n".join(problems[:5])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_detected_surface_of_the_test_image_builds_the_same_argv(version, tmp_path):
    """What engine_probe reads from an image of that version leads to commands its tree accepts."""
    import tarfile

    import testimage  # noqa: PLC0415

    image_version = trtllm_cli.captured_for(version)[0]["example"]
    overlay = tmp_path / "o.tar"
    testimage._overlay_tar(overlay, image_version)
    with tarfile.open(overlay) as tar:
        tar.extractall(tmp_path / "root", filter="data")
    found = trtllm_cli.detect(str(tmp_path / "root"))
    assert trtllm_cli.resolve(found)["profile"] == "image"  # the image's own CLI, read from its sources
    for _, run in RUNS[:200]:
        model = {**run.model, "path": run.model.get("path") or "/m"}
        for _, argv, _ in runexec.engine_steps("trtllm", run.workload, model, "/r", "/w", trtllm=found):
            assert check(image_version, argv) is None, argv


@pytest.mark.parametrize(("version", "argv", "error"), [
    ("1.1.0rc3", ["trtllm-bench", "--model", "m", "prepare-dataset", "--output", "d", "token-norm-dist"],
     "Error: No such command 'prepare-dataset'."),
    ("1.3.0rc13", ["trtllm-bench", "--model", "m", "latency", "--dataset", "d", "--max_batch_size", "4"],
     "Error: No such option: --max_batch_size"),
    ("1.1.0rc3", ["trtllm-bench", "--model", "m", "latency", "--extra_llm_api_options", "x.yaml"],
     "Error: No such option: --extra_llm_api_options"),
    ("1.2.0rc8", ["trtllm-bench", "--model", "m", "throughput", "--config", "x.yaml"],
     "Error: No such option: --config"),
    ("1.2.0rc8", ["trtllm-bench", "--model", "m", "prepare-dataset", "token-norm-dist", "--num-requests", "4"],
     "Error: Missing option '--input-mean'."),
    ("1.2.0rc8", ["trtllm-bench", "throughput"], "Error: Missing option '--model'."),
    ("1.1.0rc3", ["python3", trtllm_cli.SCRIPT_PATH, "--stdout", "token-norm-dist"],
     "Error: Missing option '--tokenizer'."),
    ("1.2.0rc8", ["trtllm-bench", "--model", "m", "throughput", "--num_requests", "many"],
     "Error: Invalid value for '--num_requests': 'many' is not a valid integer."),
    ("1.2.1", ["trtllm-bench", "--model", "m", "throughput", "--config", "x.yaml"],
     "Error: No such option: --config"),
    ("1.3.0rc29", ["trtllm-bench", "--model", "m", "build"], "Error: No such command 'build'."),
    ("1.3.0rc29", ["trtllm-bench", "--model", "m", "latency", "--dataset", "d", "--max_batch_size", "4"],
     "Error: No such option: --max_batch_size"),
])
def test_the_check_has_teeth(version, argv, error):
    """Yesterday's commands (prepare-dataset on 1.1, latency --max_batch_size) fail as click fails them."""
    problem = check(version, argv)
    assert problem and problem.endswith(error), problem


def test_every_tree_cites_its_sources():
    for path in sorted(TREES.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["pinning"], path

        def walk(level, where):
            assert level.get("source", {}).get("file"), where
            for name, sub in (level.get("commands") or {}).items():
                walk(sub, f"{where} {name}")
        for name, program in data["programs"].items():
            walk(program, f"{path.name} {name}")


# ------------------------------------------------------------------ the product's surfaces are these trees


def test_the_shipped_surfaces_are_the_captured_trees():
    """trtllm_surfaces.py is what tests/fleet/trtllm_sources.py generates from the trees, to the byte, and the
    surfaces it rebuilds from its changes are the trees, key order included."""
    from trtllm_sources import render_surfaces_module, shipped  # noqa: PLC0415

    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import trtllm_surfaces

    module = REPO / "plugins/module_utils/sparkfleet_host/engines/trtllm_surfaces.py"
    assert repr(shipped()) == repr(trtllm_surfaces.SURFACES)
    assert module.read_text() == render_surfaces_module(), (
        f"{module} differs from tests/data/trtllm-cli: python tests/fleet/trtllm_sources.py > {module}")
    for surface in trtllm_surfaces.SURFACES:  # each example is covered by its own surface, floors ascend
        assert trtllm_cli.captured_for(surface["example"]) == (surface, "covers")
        assert trtllm_cli.captured_for(surface["floor"])[0] is surface


def _comparable(level):
    if level is None or level.get("options") is None:
        return None if level is None else {"options": None}
    keep = ("type", "aliases", "required", "choices", "nargs", "multiple")
    out = {"options": {n: {k: v for k, v in s.items() if k in keep} for n, s in level["options"].items()}}
    if "commands" in level:
        out["commands"] = {c: _comparable(sub) for c, sub in (level["commands"] or {}).items()}
    return out


@pytest.mark.parametrize("path", sorted(TREES.glob("*.json")), ids=lambda p: p.stem)
def test_reading_an_images_click_sources_gives_back_its_tree(path, tmp_path):
    """detect() on click sources shaped like NVIDIA's (tests/fleet/trtllm_sources.py), written from each tree,
    reads that tree back: every command, option, alias, type, choice and required flag."""
    from trtllm_sources import click_sources, script_sources  # noqa: PLC0415

    tree = json.loads(path.read_text())
    package = tmp_path / "usr/local/lib/python3.12/dist-packages/tensorrt_llm"
    for rel, text in click_sources(tree, tree["applies_to"]["example"]).items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    if "prepare_dataset.py" in tree["programs"]:
        beside = tmp_path / trtllm_cli.SCRIPT_PATH.lstrip("/")
        for rel, text in script_sources(tree).items():
            (beside.parent / rel).parent.mkdir(parents=True, exist_ok=True)
            (beside.parent / rel).write_text(text)
    found = trtllm_cli.detect(str(tmp_path))
    assert found["version"] == tree["applies_to"]["example"]
    assert set(found["surface"]["programs"]) == set(tree["programs"])
    for program, level in tree["programs"].items():
        assert _comparable(found["surface"]["programs"][program]) == _comparable(level), program
