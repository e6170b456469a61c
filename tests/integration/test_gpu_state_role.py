"""gpu_state role on a fake fleet: save -> apply -> verify -> undo, also after a failure; idempotent apply."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from playrecap import play_recap

pytestmark = [pytest.mark.root, pytest.mark.fleet]

# Per-host paths: the namespace hosts share one file system, so the module's /run record and the CPU sysfs
# tree go under each host's own directory (a fake cpufreq tree lets the governor be exercised too).
HOST_VARS = {
    "gpu_state_state_file": "{{ sparkfleet_work_dir }}/run/gpu-state.json",
    "gpu_state_cpu_sysfs_root": "{{ sparkfleet_work_dir }}/../sys-cpu",
    "gpu_state_drop_caches_path": "{{ sparkfleet_work_dir }}/drop_caches",
}
WANT = {
    "sparkfleet_gpu_persistence_mode": True,
    "sparkfleet_gpu_locked_clocks": {"min": 1500, "max": 1500},
    "sparkfleet_cpu_governor": "performance",
}


def _ansible(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)


def _smi(host, *args: str) -> None:
    """Run the host's nvidia-smi stand-in against the host's own state file."""
    env = {"PATH": "/usr/bin:/bin", "SPARKFLEET_FAKE_GPU_STATE": f"{host.dir}/gpu-state.json", **host.env}
    subprocess.run([f"{host.dir}/bin/nvidia-smi", *args], check=True, capture_output=True, env=env)


def _gpu(host) -> dict:
    return json.loads(Path(host.dir, "gpu-state.json").read_text())["gpus"]["0"]


def _governors(host) -> set[str]:
    root = Path(host.dir, "sys-cpu")
    return {p.read_text().strip() for p in root.glob("cpu*/cpufreq/scaling_governor")}


@pytest.fixture
def fleet(fleet_factory):
    fleet = fleet_factory(2, host_env={"spark2": {"SPARKFLEET_FAKE_GPU_MODEL": "h100"}})
    for host in fleet.hosts:
        for cpu in range(2):
            d = Path(host.dir, "sys-cpu", f"cpu{cpu}", "cpufreq")
            d.mkdir(parents=True)
            (d / "scaling_governor").write_text("ondemand\n")
            (d / "scaling_available_governors").write_text("ondemand performance powersave\n")
    return fleet


def test_apply_verify_idempotent_and_undo(fleet, ansible_env, repo, tmp_path):
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({**HOST_VARS, **WANT}))
    base = ["ansible-playbook", "-i", fleet.inventory, "-e", f"@{extra}"]
    # The stand-in starts with persistence on; turn it off first so that "on" is a change.
    for host in fleet.hosts:
        _smi(host, "-pm", "0")
        assert _gpu(host)["persistence"] is False

    check = _ansible([*base, "--check", "--diff", "playbooks/gpu_state.yml"], ansible_env, repo)
    assert check.returncode == 0, check.stdout + check.stderr
    for host in fleet.hosts:  # check mode changed nothing and saved nothing
        assert _gpu(host)["persistence"] is False and _gpu(host)["locked_clocks"] is None
        assert not Path(host.work_dir, "state", "gpu_state_saved.json").exists()
    assert "persistence_mode" in check.stdout  # the diff names the control

    run = _ansible([*base, "playbooks/gpu_state.yml"], ansible_env, repo)
    assert run.returncode == 0, run.stdout + run.stderr
    for host in fleet.hosts:
        gpu = _gpu(host)
        assert gpu["persistence"] is True and gpu["locked_clocks"] == [1500, 1500]
        assert _governors(host) == {"performance"}
        saved = json.loads(Path(host.work_dir, "state", "gpu_state_saved.json").read_text())["saved"]
        assert saved["gpus"][0]["persistence_mode"] is False and saved["cpu_governor"] == "ondemand"
        assert Path(host.work_dir, "drop_caches").read_text().strip() == "3"

    again = _ansible([*base, "-e", "sparkfleet_drop_caches=false", "playbooks/gpu_state.yml"], ansible_env, repo)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {h: r["changed"] for h, r in play_recap(again.stdout).items()} == {"spark1": 0, "spark2": 0}
    for host in fleet.hosts:  # the original state is still the saved one
        saved = json.loads(Path(host.work_dir, "state", "gpu_state_saved.json").read_text())["saved"]
        assert saved["gpus"][0]["persistence_mode"] is False

    undo = tmp_path / "undo.yml"
    undo.write_text(f"""
- name: Plan each host (settings only)
  ansible.builtin.import_playbook: {repo / "playbooks" / "host_plan.yml"}

- hosts: all
  gather_facts: false
  tasks:
    - name: Undo
      ansible.builtin.include_role:
        name: sparkfleet.bench.gpu_state
        tasks_from: undo
""")
    restored = _ansible([*base, str(undo)], ansible_env, repo)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    for host in fleet.hosts:
        gpu = _gpu(host)
        assert gpu["persistence"] is False and gpu["locked_clocks"] is None
        assert _governors(host) == {"ondemand"}
        assert not Path(host.work_dir, "state", "gpu_state_saved.json").exists()
    # Safe with nothing saved.
    nothing = _ansible([*base, str(undo)], ansible_env, repo)
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr
    assert "nothing to restore" in nothing.stdout


def test_undo_in_always_after_a_failure(fleet, ansible_env, repo, tmp_path):
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({**HOST_VARS, **WANT, "sparkfleet_gpu_persistence_mode": False}))
    for host in fleet.hosts:
        _smi(host, "-L")
    before = {h.name: _gpu(h) for h in fleet.hosts}
    assert all(g["persistence"] is True and g["locked_clocks"] is None for g in before.values())
    play = tmp_path / "bench.yml"
    play.write_text(f"- name: Plan\n  ansible.builtin.import_playbook: {repo / 'playbooks' / 'host_plan.yml'}\n" + """
- hosts: all
  gather_facts: false
  tasks:
    - name: Tuned section
      block:
        - name: Apply
          ansible.builtin.include_role:
            name: sparkfleet.bench.gpu_state
        - name: Record what the tuned state looked like
          ansible.builtin.copy:
            dest: "{{ sparkfleet_work_dir }}/tuned.json"
            content: "tuned"
            mode: "0644"
        - name: Injected failure
          ansible.builtin.fail:
            msg: injected failure
      always:
        - name: Undo
          ansible.builtin.include_role:
            name: sparkfleet.bench.gpu_state
            tasks_from: undo
""")
    run = _ansible(["ansible-playbook", "-i", fleet.inventory, "-e", f"@{extra}", str(play)], ansible_env, repo)
    assert run.returncode != 0 and "injected failure" in run.stdout, run.stdout + run.stderr
    for host in fleet.hosts:
        assert Path(host.work_dir, "tuned.json").exists()  # the tuned section did run
        gpu = _gpu(host)
        assert gpu["persistence"] is True and gpu["locked_clocks"] is None  # back to before
        assert _governors(host) == {"ondemand"}
        assert not Path(host.work_dir, "state", "gpu_state_saved.json").exists()


def test_a_reboot_between_two_runs_gets_the_controls_applied_again(fleet, ansible_env, repo, tmp_path):
    """A resumed campaign after a reboot: the lock, persistence and governor are gone, and so is the module's /run
    record of its lock. The role (which every bench.yml runs) applies them again and records the new lock;
    the state saved before the first apply stays the one an undo goes back to."""
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps({**HOST_VARS, **WANT, "sparkfleet_drop_caches": False}))
    base = ["ansible-playbook", "-i", fleet.inventory, "-e", f"@{extra}", "playbooks/gpu_state.yml"]
    for host in fleet.hosts:
        _smi(host, "-pm", "0")
    first = _ansible(base, ansible_env, repo)
    assert first.returncode == 0, first.stdout + first.stderr

    for host in fleet.hosts:  # the reboot: the driver's and the kernel's defaults back, /run emptied
        _smi(host, "-rgc")
        _smi(host, "-pm", "0")
        for governor in Path(host.dir, "sys-cpu").glob("cpu*/cpufreq/scaling_governor"):
            governor.write_text("ondemand\n")
        Path(host.work_dir, "run", "gpu-state.json").unlink()
        assert _gpu(host)["locked_clocks"] is None

    second = _ansible(base, ansible_env, repo)
    assert second.returncode == 0, second.stdout + second.stderr
    assert all(r["changed"] > 0 for r in play_recap(second.stdout).values()), second.stdout
    for host in fleet.hosts:
        gpu = _gpu(host)
        assert gpu["persistence"] is True and gpu["locked_clocks"] == [1500, 1500]
        assert _governors(host) == {"performance"}
        record = json.loads(Path(host.work_dir, "run", "gpu-state.json").read_text())["locked_clocks"]
        assert [(r["min"], r["max"]) for r in record.values()] == [(1500, 1500)]  # what the attestation reads
        saved = json.loads(Path(host.work_dir, "state", "gpu_state_saved.json").read_text())["saved"]
        assert saved["gpus"][0]["persistence_mode"] is False and saved["cpu_governor"] == "ondemand"
