"""The nvml role (issue 35) on localhost, with a stand-in nvidia-smi, a device node in a temporary directory and a
Python whose pip is faked: the pinned nvidia-ml-py goes under the work directory only where a GPU is, once (a
second run changes nothing), from the wheel the inventory names without pip, and a failed install is a note that
bench_run's records repeat, never a failed host."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml
from _ansible_modules import STANDINS, sparkfleet_gpu
from _fake_nvml import make_bindings
from playrecap import play_recap

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning, settings

REPO = Path(__file__).resolve().parents[2]
VERSION = sparkfleet_gpu.NVML_VERSION
SPEC = f"nvidia-ml-py=={VERSION}"

#: A Python whose ``-m pip`` is faked: logs its argv (one JSON line), installs the stand-in bindings with
#: ``install --target DIR``, or fails as pip does when it reaches no index (an ``--index-url`` naming
#: ``unreachable``); anything else is the real Python (``-m zipfile`` unpacks the wheel).
FAKE_PYTHON = f'''#!{sys.executable}
import json, os, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
with open(os.environ["FAKE_PY_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["-m", "pip"]:
    if any("unreachable" in arg for arg in sys.argv):
        sys.stderr.write("ERROR: Could not find a version that satisfies the requirement {SPEC}\\n"
                         "ERROR: No matching distribution found for {SPEC}\\n")
        sys.exit(1)
    from pathlib import Path
    from _fake_nvml import make_bindings
    args = sys.argv[4:]
    make_bindings(Path(args[args.index("--target") + 1]), args[-1].split("==")[1])
    sys.exit(0)
os.execv({sys.executable!r}, [{sys.executable!r}] + sys.argv[1:])
'''


class Host:
    """localhost as a host of the role: a work directory, a device node, the fake Python and its log."""

    def __init__(self, tmp_path: Path, ansible_env: dict[str, str]) -> None:
        self.tmp, self.env = tmp_path, dict(ansible_env)
        self.work = tmp_path / "work"
        self.device = tmp_path / "dev" / "nvidia0"
        self.device.parent.mkdir(parents=True, exist_ok=True)
        self.device.write_text("")
        self.python = tmp_path / "python"
        self.python.write_text(FAKE_PYTHON)
        self.python.chmod(0o755)
        self.log = tmp_path / "python.log"
        self.env.update(FAKE_PY_LOG=str(self.log), SPARKFLEET_FAKE_GPU_STATE=str(tmp_path / "gpu.json"))
        self.dir = self.work / "clients" / f"nvidia-ml-py-{VERSION}"

    def plan(self, **variables) -> dict:
        return planning.host_settings("localhost", {"sparkfleet_work_dir": str(self.work), **variables})

    def play(self, *invocations: dict) -> tuple[list[dict], dict[str, int]]:
        """Run the role once per invocation (role variables, and the host's plan, over this host's stand-ins and
        the default plan): each one's nvml_bindings, and the play's recap. One ansible-playbook for them all."""
        tasks = []
        for n, extra in enumerate(invocations or ({},)):
            tasks += [{"ansible.builtin.include_role": {"name": "sparkfleet.bench.nvml"},
                       "vars": {"sparkfleet_plan": self.plan(), "nvml_python": str(self.python),
                                "nvml_device": str(self.device), "nvml_nvidia_smi": str(STANDINS / "nvidia-smi"),
                                **extra}},
                      {"ansible.builtin.copy": {"content": "{{ nvml_bindings | to_json }}", "mode": "0644",
                                                "dest": str(self.tmp / f"bindings-{n}.json")}}]
        playbook = self.tmp / "play.yml"
        playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook)], cwd=REPO,
                              env=self.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return ([json.loads((self.tmp / f"bindings-{n}.json").read_text()) for n in range(len(invocations) or 1)],
                play_recap(proc.stdout)["localhost"])

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def test_a_gpu_host_gets_the_pinned_release_with_pip_once(tmp_path, ansible_env):
    host = Host(tmp_path, ansible_env)
    (bindings,), _ = host.play()
    assert bindings == {"path": str(host.dir), "note": ""}
    (pip,) = host.calls()
    assert pip[:3] == ["-m", "pip", "install"] and pip[-1] == SPEC
    assert pip[pip.index("--target") + 1] == str(host.dir)
    assert {"--no-deps", "--only-binary=:all:"} <= set(pip) and "--index-url" not in pip  # pip's own configuration
    assert (host.dir / "pynvml.py").is_file() and (host.dir / f"nvidia_ml_py-{VERSION}.dist-info").is_dir()
    # idempotent: the installed release is left as it is, pip is not asked again
    (again,), recap = host.play()
    assert again == bindings and recap["changed"] == 0 and recap["failed"] == 0
    assert len(host.calls()) == 1


def test_no_gpu_nvml_off_no_index_or_no_pinned_wheel_install_nothing_and_say_why(tmp_path, ansible_env):
    host = Host(tmp_path, ansible_env)
    wheel = _wheel(tmp_path)  # its sha256 is not the pin's
    missing = tmp_path / "nowhere" / sparkfleet_gpu.NVML_WHEEL
    (no_smi, no_device, off, no_index, wrong_wheel, no_wheel), recap = host.play(
        {"nvml_nvidia_smi": str(tmp_path / "no-nvidia-smi")},
        {"nvml_device": str(tmp_path / "no-device")},  # a stand-in nvidia-smi is no GPU
        {"sparkfleet_plan": host.plan(sparkfleet_nvml=False)},
        {"sparkfleet_plan": host.plan(sparkfleet_nvml_index_url="http://unreachable.example/simple")},
        {"sparkfleet_plan": host.plan(sparkfleet_nvml_wheel=str(wheel))},
        {"sparkfleet_plan": host.plan(sparkfleet_nvml_wheel=str(missing))})
    assert recap["failed"] == 0  # never fatal: the runs read nvidia-smi there, their records say why
    assert no_smi == {"path": "", "note": "no GPU on this host: nvidia-smi lists none"}
    assert no_device == {"path": "", "note": f"no GPU on this host: no {tmp_path / 'no-device'}"}
    assert off["path"] == "" and "turns the NVML bindings off" in off["note"]
    assert no_index == {"path": "", "note": f"pip could not install {SPEC} (ERROR: No matching distribution found "
                                            f"for {SPEC}): nothing installed"}
    assert wrong_wheel["path"] == "" and "is not the pinned release" in wrong_wheel["note"]
    assert sparkfleet_gpu.NVML_WHEEL_SHA256 in wrong_wheel["note"]
    assert no_wheel == {"path": "", "note": f"the wheel {missing} is not a file on the controller: nothing installed"}
    # pip was asked once, with the index setting; nothing else ran and nothing was installed
    (pip,) = host.calls()
    assert pip[pip.index("--index-url") + 1] == "http://unreachable.example/simple" and pip[-1] == SPEC
    assert not (host.dir / "pynvml.py").exists()


def _wheel(tmp_path: Path) -> Path:
    """A wheel of the pinned release's name holding the stand-in bindings (what pip download leaves, in shape)."""
    tree = make_bindings(tmp_path / "tree")
    wheel = tmp_path / "controller" / sparkfleet_gpu.NVML_WHEEL
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(tree).as_posix())
    return wheel


def test_the_wheel_setting_installs_without_pip_or_index_once(tmp_path, ansible_env):
    wheel = _wheel(tmp_path)
    host = Host(tmp_path, ansible_env)
    plan = host.plan(sparkfleet_nvml_wheel=str(wheel))
    plan["nvml"]["sha256"] = hashlib.sha256(wheel.read_bytes()).hexdigest()  # the stand-in's, for the pin's
    (bindings,), _ = host.play({"sparkfleet_plan": plan})
    assert bindings == {"path": str(host.dir), "note": ""}
    assert [call[:2] for call in host.calls()] == [["-m", "zipfile"]]  # unpacked: no pip
    assert (host.work / "clients" / wheel.name).read_bytes() == wheel.read_bytes()  # copied to the host
    assert (host.dir / "pynvml.py").read_text() == (tmp_path / "tree" / "pynvml.py").read_text()
    (again,), recap = host.play({"sparkfleet_plan": plan})
    assert again == bindings and recap["changed"] == 0 and len(host.calls()) == 1


def test_the_settings_refuse_a_wheel_of_another_release():
    older = "/srv/nvidia_ml_py-12.575.51-py3-none-any.whl"
    errors, _ = settings.setting_problems("h1", {"sparkfleet_nvml_wheel": older})
    assert len(errors) == 1 and f"must be the pinned nvidia-ml-py {VERSION} wheel" in errors[0], errors
    assert settings.setting_problems("h1", {"sparkfleet_nvml_wheel": f"/srv/{sparkfleet_gpu.NVML_WHEEL}"})[0] == []
    assert settings.setting_problems("h1", {"sparkfleet_nvml_wheel": sparkfleet_gpu.NVML_WHEEL})[0]  # not absolute
    assert settings.setting_problems("h1", {"sparkfleet_nvml_index_url": "http://a b"})[0]


def test_the_matrix_hands_the_bindings_to_bench_run_and_the_play_installs_them_before_the_runs():
    job = yaml.safe_load((REPO / "roles" / "matrix" / "tasks" / "job.yml").read_text())  # main.yml's and cluster_run's
    (start,) = [t for t in job if "sparkfleet.bench.bench_run" in t]
    assert "nvml_bindings" in start["sparkfleet.bench.bench_run"]["nvml"]
    play = yaml.safe_load((REPO / "playbooks" / "matrix.yml").read_text())
    (block,) = [t["block"] for t in play[0]["tasks"] if "block" in t]
    roles = [t["ansible.builtin.include_role"]["name"] for t in block if "ansible.builtin.include_role" in t]
    assert roles.index("sparkfleet.bench.nvml") < roles.index("sparkfleet.bench.matrix")
