"""The standalone matmul workload, run on the CPU with a small size and parsed back."""

from __future__ import annotations

import ast
import os
import subprocess

import pytest
from _shared import MATMUL, PYTHON

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import parse_log

pytest.importorskip("numpy", reason="the CPU path of matmul.py needs numpy")


def run_matmul(*args: str, env: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKFLEET_")} | (env or {})
    return subprocess.run(
        [PYTHON, str(MATMUL), *args], capture_output=True, text=True, env=full_env, timeout=120, cwd=cwd
    )


def test_small_cpu_run_parses_back_exactly(tmp_path):
    proc = run_matmul(
        "--backend",
        "numpy",
        "--size",
        "64",
        "--iterations",
        "4",
        "--warmup",
        "2",
        "--model",
        "meta-llama/Llama-3.1-8B",
        env={"SPARKFLEET_ENV_PROBE": "native"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = parse_log(proc.stdout)
    assert result.kind == "matmul"
    assert result.model == "meta-llama/Llama-3.1-8B"
    assert result.backend == "numpy"
    assert result.missing == [] and result.warnings == []
    assert result.extra["size"] == 64 and result.extra["warmup"] == 2 and result.extra["iterations"] == 4
    assert result.extra["dtype"] == "float32"
    timings = result.extra["iteration_s"]
    assert len(timings) == 4
    mean = result.metrics["matmul_s_mean"]
    assert mean == pytest.approx(sum(timings) / 4, abs=2e-9)
    assert result.metrics["gflops"] == pytest.approx(2 * 64**3 / mean / 1e9, rel=1e-3, abs=1e-3)
    lines = proc.stdout.splitlines()
    assert f"mean_s: {mean:.9f}" in lines
    assert result.probe["env_probe"] == "native"
    assert result.probe["root_dev_ino"] == f"{os.stat('/').st_dev}:{os.stat('/').st_ino}"
    assert result.probe["hostname"] == os.uname().nodename


def test_defaults_are_ten_iterations_and_unset_probe(tmp_path):
    proc = run_matmul("--backend", "numpy", "--size", "32", cwd=tmp_path)
    result = parse_log(proc.stdout)
    assert result.extra["iterations"] == 10 and result.extra["warmup"] == 1
    assert len(result.extra["iteration_s"]) == 10
    assert result.model is None and "model" in result.missing  # --model not given: echoed empty
    assert result.probe["env_probe"] == "(unset)"


def test_without_numpy_it_fails_clearly(tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    for name in ("numpy", "torch", "cupy"):
        (blocker / f"{name}.py").write_text("raise ImportError('blocked for the test')\n")
    proc = run_matmul("--size", "8", env={"PYTHONPATH": str(blocker)}, cwd=tmp_path)
    assert proc.returncode == 3
    assert "no usable array library" in proc.stderr


@pytest.mark.parametrize("args", [["--size", "0"], ["--iterations", "0"], ["--backend", "fortran"]])
def test_bad_arguments_exit_2(args, tmp_path):
    proc = run_matmul(*args, cwd=tmp_path)
    assert proc.returncode == 2


def test_script_is_standalone():
    """It runs in a chroot/container without sparkfleet: only stdlib and its sibling probe module at top level."""
    tree = ast.parse(MATMUL.read_text())
    top_level = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top_level.add(node.module.split(".")[0])
    assert top_level <= {"__future__", "argparse", "os", "socket", "sys", "time", "collections", "sparkfleet_probe"}
    probe = ast.parse((MATMUL.parent / "sparkfleet_probe.py").read_text())
    assert {n.names[0].name for n in probe.body if isinstance(n, ast.Import)} <= {"os", "socket"}
    assert "sparkfleet" not in {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
