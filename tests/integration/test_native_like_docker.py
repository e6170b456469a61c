"""Native = the container's process tree minus namespaces and cgroups (issue 21), with a real Docker image.

The image is built here, offline, FROM the project's cached test image, laid out like NVIDIA's TensorRT-LLM
images:

* ENTRYPOINT ``/opt/nvidia/nvidia_entrypoint.sh``, a bash script that prints a banner and ``exec "$@"``
  (NVIDIA's, as published in triton-inference-server/server nvidia_entrypoint.sh @0794865d);
* ``ENV BASH_ENV=/etc/bash.bashrc`` and ``ENV ENV=/etc/shinit_v2``, the bashrc starting with
  ``test -f ${ENV} && source ${ENV}`` and shinit_v2 exporting the library paths, as TensorRT-LLM's
  docker/common/install_base.sh @000a01de (set_bash_env, ``echo 'export LD_LIBRARY_PATH=/usr/local/cuda/lib64:
  $LD_LIBRARY_PATH' >> "${ENV}"``) and install_tensorrt.sh (``/usr/local/tensorrt/lib``) make them;
  shinit_v2 also exports a marker variable;
* a stand-in CUDA runtime ``/usr/local/cuda/lib64/libcudart.so.12.9.79`` (a copy of the image's own libz: any
  loadable shared object) that Python loads by its bare name at start-up (a ``.pth`` hook), the way the
  frameworks dlopen CUDA libraries: it is found only through the ``LD_LIBRARY_PATH`` shinit_v2 builds.

One campaign runs a small matmul natively (chroot) and in Docker. Both runs must have seen the same
environment - the marker variable, the same ``LD_LIBRARY_PATH`` - and have the same fingerprint (the same
libraries mapped), and the report shows no "not like for like" caveat. Then a container environment whose
docker flags make bash skip the ENV file (``--env BASH_ENV=/dev/null``) gets another library path and no
libcudart: the report's verdict for that cell carries the caveat.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import validate
from sparkfleet.cli import main as sparkfleet_main

pytestmark = [pytest.mark.root, pytest.mark.fleet, pytest.mark.docker, pytest.mark.slow]

FAST_COOLDOWN = {"threshold_c": 90, "settle_band_c": 3, "settle_window_s": 1, "min_wait_s": 0, "max_wait_s": 5,
                 "poll_interval_s": 0.5, "on_timeout": "continue"}
CONFIG_LD = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
SHINIT_LD = f"/usr/local/tensorrt/lib:/usr/local/cuda/lib64:{CONFIG_LD}"

ENTRYPOINT = r"""#!/bin/bash
# Stand-in for NGC's /opt/nvidia/nvidia_entrypoint.sh (triton-inference-server/server @0794865d): banner, then
# the command. bash sources $BASH_ENV before this line runs.
set -e
cat <<BANNER

== sparkfleet test image (TensorRT-LLM layout) ==
BANNER

if [[ $# -eq 0 ]]; then
  exec "/bin/bash"
else
  exec "$@"
fi
"""
BASHRC = """test -f /etc/shinit_v2 && source /etc/shinit_v2
# (Debian's bash.bashrc follows in the real images; a non-interactive shell stops here)
[ -z "$PS1" ] && return
"""
SHINIT = """export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
export LD_LIBRARY_PATH=/usr/local/tensorrt/lib:$LD_LIBRARY_PATH
export SPARKFLEET_SHINIT=sourced
"""
FAKECUDA = '''"""Loads the CUDA runtime by its bare name, as torch and tensorrt_llm do: LD_LIBRARY_PATH finds it."""
import ctypes

try:
    ctypes.CDLL("libcudart.so.12.9.79")
except OSError:
    pass
'''


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kw)


@pytest.fixture(scope="module")
def ngc_like_image(test_image, tmp_path_factory) -> str:
    ctx = tmp_path_factory.mktemp("ngc-like")
    libz = _run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", test_image, "-c",
                 "readlink -f /lib/*-linux-gnu/libz.so.1 /usr/lib/*-linux-gnu/libz.so.1 | head -1"]).stdout.strip()
    cid = _run(["docker", "create", test_image]).stdout.strip()
    try:
        _run(["docker", "cp", f"{cid}:{libz}", str(ctx / "libcudart.so.12.9.79")])
    finally:
        _run(["docker", "rm", "-f", cid])
    (ctx / "nvidia_entrypoint.sh").write_text(ENTRYPOINT)
    (ctx / "nvidia_entrypoint.sh").chmod(0o755)
    (ctx / "bash.bashrc").write_text(BASHRC)
    (ctx / "shinit_v2").write_text(SHINIT)
    (ctx / "sparkfleet_fakecuda.py").write_text(FAKECUDA)
    (ctx / "sparkfleet_fakecuda.pth").write_text("import sparkfleet_fakecuda\n")
    site = "/usr/local/lib/python3.11/dist-packages"
    (ctx / "Dockerfile").write_text(f"""FROM {test_image}
COPY nvidia_entrypoint.sh /opt/nvidia/nvidia_entrypoint.sh
COPY bash.bashrc /etc/bash.bashrc
COPY shinit_v2 /etc/shinit_v2
COPY libcudart.so.12.9.79 /usr/local/cuda/lib64/libcudart.so.12.9.79
COPY sparkfleet_fakecuda.py sparkfleet_fakecuda.pth {site}/
ENV LD_LIBRARY_PATH={CONFIG_LD}
ENV BASH_ENV=/etc/bash.bashrc
ENV ENV=/etc/shinit_v2
WORKDIR /workspace
ENTRYPOINT ["/opt/nvidia/nvidia_entrypoint.sh"]
""")
    tag = "sparkfleet-test/ngc-like:" + test_image.rsplit(":", 1)[-1][:20]
    _run(["docker", "build", "--network", "none", "-q", "-t", tag, str(ctx)], timeout=600)
    config = json.loads(_run(["docker", "image", "inspect", "--format", "{{json .Config}}", tag]).stdout)
    assert config["Entrypoint"] == ["/opt/nvidia/nvidia_entrypoint.sh"] and config["WorkingDir"] == "/workspace"
    return tag


def _campaign(tmp_path: Path, image: str, name: str, container_flags: list[str]) -> Path:
    campaign = {
        "name": name,
        "image": image,
        "models": [{"name": "matmul-fp32"}],
        "environments": ["native", {"name": "container", "kind": "container", "docker_flags": container_flags}],
        # Long enough (a few seconds) for the fingerprint sampler to see the process at work.
        "workloads": [{"name": "mm", "engine": "matmul", "size": 384, "iterations": 40, "warmup": 1}],
        "iterations": 1,
        "warmup_runs": 0,
        "order": "interleaved",
        "cooldown": FAST_COOLDOWN,
        "timeout_s": 300,
    }
    path = tmp_path / f"campaign-{name}.yml"
    path.write_text(yaml.safe_dump({"sparkfleet_campaign": campaign}))
    return path


def _bench(repo, env, inventory, campaign, results) -> subprocess.CompletedProcess:
    cmd = ["ansible-playbook", "-i", inventory, "bench.yml", "-e", f"@{campaign}",
           "-e", f"sparkfleet_results_dir={results}", "-e", "sparkfleet_image_offline=true",
           "-e", "sparkfleet_preflight_max_load_per_cpu=100", "-e", "sparkfleet_preflight_min_free_memory_gib=0.5",
           "-e", "sparkfleet_preflight_min_free_disk_gib=1"]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1500)


def _records(root: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(root.glob("*/runs/*/record.json")):
        rec = json.loads(path.read_text())
        out[rec["environment"]] = rec
    return out


def _environment_caveats(results: Path) -> list[str]:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert sparkfleet_main(["report", str(results), "--json"]) == 0
    out = json.loads(buffer.getvalue())
    lines = [v for v in out["verdicts"] if v["question"] == "environment"]
    assert lines, out["verdicts"]
    return [c for line in lines for c in line["caveats"]]


def test_native_runs_what_docker_runs_and_the_fingerprints_agree(
        fleet_factory, ngc_like_image, ansible_env, repo, tmp_path):
    fleet = fleet_factory(1)
    results = tmp_path / "results"
    proc = _bench(repo, ansible_env, fleet.inventory, _campaign(tmp_path, ngc_like_image, "alike", ["--ipc=host"]),
                  results)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    recs = _records(results / "alike")
    assert sorted(recs) == ["container", "native"]
    prints = {}
    for env, rec in recs.items():
        assert validate(rec) == [] and rec["status"] == "ok", (env, rec["reason"])
        fp = rec["fingerprint"]
        assert fp and "missing" not in fp, (env, fp)
        prints[env] = fp
        # What shinit_v2 exported reached the benchmark process, through the entrypoint's bash.
        assert fp["env"]["LD_LIBRARY_PATH"] == SHINIT_LD, (env, fp["env"])
        assert "SPARKFLEET_SHINIT" in fp["env_names"] and fp["env"]["BASH_ENV"] == "/etc/bash.bashrc"
        assert fp["comm"].startswith("python") and fp["python"] == "3.11"
        assert fp["packages"]["tensorrt_llm"]  # the test image's package, read under the process's own root
        libs = {lib["name"]: lib for lib in fp["libraries"]}
        assert libs["libcudart"] == {"name": "libcudart", "version": "12.9.79", "source": "image",
                                     "path": "/usr/local/cuda/lib64/libcudart.so.12.9.79"}, (env, fp["libraries"])
        # The entrypoint's banner is in the log in both environments: the same program ran.
        assert "== sparkfleet test image (TensorRT-LLM layout) ==" in Path(
            results / "alike" / rec["host"] / "runs" / rec["run_id"] / "bench.log").read_text()
    native, container = prints["native"], prints["container"]
    assert native["chroot"] and native["launch"]["through_entrypoint"]
    assert native["launch"]["entrypoint"] == ["/opt/nvidia/nvidia_entrypoint.sh"]
    assert native["ldcache_refreshed"] and native["cuda_compat"]["enabled"] is False
    assert [(x["name"], x["version"], x["source"]) for x in native["libraries"]] == \
        [(x["name"], x["version"], x["source"]) for x in container["libraries"]]
    assert _environment_caveats(results / "alike") == []

    # The same image, but the container's docker flags make bash skip the ENV file: not like for like.
    other = tmp_path / "results-unlike"
    proc = _bench(repo, ansible_env, fleet.inventory,
                  _campaign(tmp_path, ngc_like_image, "unlike", ["--ipc=host", "--env", "BASH_ENV=/dev/null"]),
                  other)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    recs = _records(other / "unlike")
    assert recs["container"]["fingerprint"]["env"]["LD_LIBRARY_PATH"] == CONFIG_LD
    assert "libcudart" not in {lib["name"] for lib in recs["container"]["fingerprint"]["libraries"]}
    (caveat,) = _environment_caveats(other / "unlike")
    assert caveat.startswith("not like for like: native loaded libcudart 12.9.79 from the image, container did not")
    assert f"LD_LIBRARY_PATH differs: native '{SHINIT_LD}', container '{CONFIG_LD}'" in caveat
