"""`sparkfleet doctor` pieces that need no fleet: inventory resolution, parsing, clock skew, the table."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sparkfleet import cli, doctor
from sparkfleet.doctor import HostReport, Limits, Target

REPO = Path(__file__).resolve().parents[3]


def test_known_hosts_files_from_ssh_args():
    f = doctor.known_hosts_from_args
    assert f("-o UserKnownHostsFile=/a/kh -o StrictHostKeyChecking=yes") == ["/a/kh"]
    assert f("-oUserKnownHostsFile=/b") == ["/b"]
    assert f('-o "UserKnownHostsFile /c /d"') == ["/c", "/d"]
    assert f("-o userknownhostsfile=/e", "-o UserKnownHostsFile=/f") == ["/e", "/f"]
    assert f("-o UserKnownHostsFile=/dev/null") == ["/dev/null"]
    assert f(None, "", "-o ControlMaster=auto", "'unbalanced") == []


DF = """Filesystem     1024-blocks      Used Available Capacity Mounted on
/dev/vda         263174212  30000000 100000000      23% /
tmpfs              1000000         0   1000000       0% /dev/shm
/dev/vdb         500000000         0 400000000       0% /var/lib
/dev/vdc         500000000         0 300000000       0% /var/lib/sparkfleet-other
/dev/vdd         100       0     50       0% /mnt/with space
"""


def test_free_space_is_read_for_the_nearest_mount():
    assert doctor.free_under(DF, "/var/lib/sparkfleet/work") == ("/var/lib", 400000000)
    assert doctor.free_under(DF, "/var/lib") == ("/var/lib", 400000000)
    assert doctor.free_under(DF, "/var/lib/sparkfleet-other/x/") == ("/var/lib/sparkfleet-other", 300000000)
    assert doctor.free_under(DF, "/home/x") == ("/", 100000000)
    assert doctor.free_under(DF, "/mnt/with space/w") == ("/mnt/with space", 50)
    assert doctor.free_under(DF, "relative/path") is None
    assert doctor.free_under("", "/x") is None


def test_clock_skew_uses_the_shortest_round_trip():
    samples = [(100.0, 100.4, "101.0"), (200.0, 200.002, "201.001"), (300.0, 300.1, "garbage")]
    assert doctor.clock_skew(samples) == 1.0
    assert doctor.clock_skew([(0.0, 1.0, "x")]) is None
    assert doctor.clock_skew([]) is None


def test_targets_resolved_like_ansible(tmp_path):
    inv = tmp_path / "sparks.ini"
    inv.write_text("""
[sparks]
s1 ansible_host=10.0.0.1 ansible_port=2222 sparkfleet_work_dir="/data/{{ inventory_hostname }}"
s2
here ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"
here2 ansible_connection=ansible.builtin.local

[sparks:vars]
ansible_user=bench
ansible_ssh_private_key_file=/keys/id
ansible_ssh_common_args='-o UserKnownHostsFile=/kh/known_hosts -o StrictHostKeyChecking=yes'
""")
    targets = {t.name: t for t in doctor.load_targets(str(inv))}
    assert targets["s1"] == Target(name="s1", address="10.0.0.1", port=2222, user="bench", key_file="/keys/id",
                                   known_hosts=["/kh/known_hosts"], local=False, work_dir="/data/s1")
    assert targets["s2"].address == "s2" and targets["s2"].port == 22
    assert targets["s2"].work_dir == doctor.DEFAULT_WORK_DIR
    assert targets["here"].local is True and targets["here2"].local is True


def test_yaml_directory_group_vars_host_vars_and_ranges_as_ansible_reads_them(tmp_path, monkeypatch):
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "hosts.yml").write_text("""
all:
  children:
    sparks:
      hosts:
        spark[1:3]:
      vars:
        ansible_ssh_extra_args: -o UserKnownHostsFile=/kh/extra
    old:
      hosts:
        legacy: {ansible_ssh_host: 10.0.0.9, ansible_ssh_port: 2200, ansible_ssh_user: admin}
""")
    (inv / "group_vars" / "sparks.yml").write_text(
        "ansible_user: bench\nansible_host: '10.0.0.{{ inventory_hostname[-1] }}'\n")
    (inv / "host_vars" / "spark2.yml").write_text("ansible_port: 2022\nsparkfleet_work_dir: /big/sparkfleet\n")
    monkeypatch.setenv("ANSIBLE_PRIVATE_KEY_FILE", "/keys/from-env")  # as ansible-playbook reads it
    targets = {t.name: t for t in doctor.load_targets(str(inv))}
    assert sorted(targets) == ["legacy", "spark1", "spark2", "spark3"]
    assert targets["spark2"] == Target(name="spark2", address="10.0.0.2", port=2022, user="bench",
                                       key_file="/keys/from-env", known_hosts=["/kh/extra"], work_dir="/big/sparkfleet")
    assert (targets["spark3"].address, targets["spark3"].port) == ("10.0.0.3", 22)
    assert targets["spark3"].work_dir == doctor.DEFAULT_WORK_DIR
    assert (targets["legacy"].address, targets["legacy"].port, targets["legacy"].user) == ("10.0.0.9", 2200, "admin")
    assert targets["legacy"].known_hosts == []


def test_a_port_ansible_refuses_is_a_usage_error(tmp_path, capsys):
    inv = tmp_path / "i.ini"
    inv.write_text("s1 ansible_port=twenty-two\n")
    assert cli.main(["doctor", "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "s1" in err and "port" in err and len(err.strip().splitlines()) == 1


def test_missing_or_empty_inventory_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["doctor", "-i", str(tmp_path / "nope.ini")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    empty = tmp_path / "empty.ini"
    empty.write_text("[sparks]\n")
    assert cli.main(["doctor", "-i", str(empty)]) == 2
    assert "no hosts" in capsys.readouterr().err


def test_closed_port_is_reported_unreachable():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = doctor.check_host(Target(name="x", address="127.0.0.1", port=port, key_file="/nonexistent"),
                               Limits(timeout=3))
    assert not report.reachable and not report.ok
    assert report.problems == [f"unreachable: cannot connect to 127.0.0.1:{port}: Connection refused"]


def test_local_host_is_checked_without_ssh(tmp_path):
    report = doctor.check_host(Target(name="me", address="me", local=True, work_dir=str(tmp_path / "a" / "b")),
                               Limits(timeout=10, min_free_gib=0))
    assert report.reachable and report.address == "local"
    assert report.sudo in ("root", "yes", "no")
    assert report.clock_skew_s is not None and abs(report.clock_skew_s) < 0.5
    assert report.disk_free_gib is not None and report.disk_path
    # whatever this machine lacks (Docker, a GPU) is named, not raised
    assert all(p.split(":")[0] in ("docker", "gpu", "sudo") for p in report.problems)


def test_table_and_exit_code(monkeypatch, tmp_path, capsys):
    good = HostReport(host="spark1", address="10.0.0.1:22", reachable=True, sudo="root", docker="27.5.1", gpus=1,
                      disk_free_gib=812.3, disk_path="/", clock_skew_s=0.0021)
    bad = HostReport(host="spark2", address="10.0.0.2:22",
                     problems=["unreachable: cannot connect to 10.0.0.2:22: Connection refused"])
    text = doctor.render_table([good, bad])
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == list(doctor.HEADERS)
    assert [c.strip() for c in lines[2].split("|")] == ["spark1", "yes", "root", "27.5.1", "1 GPU", "812.3 GiB (/)",
                                                        "+0.002s", "ok"]
    assert [c.strip() for c in lines[3].split("|")][:2] == ["spark2", "NO"]
    assert lines[-1] == "1/2 hosts ready; not ready: spark2"

    inv = tmp_path / "i.ini"
    inv.write_text("spark1\nspark2\n")
    monkeypatch.setattr(doctor, "check_fleet", lambda targets, limits: [good, bad])
    assert cli.main(["doctor", "-i", str(inv)]) == 1
    assert "not ready: spark2" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "check_fleet", lambda targets, limits: [good])
    assert cli.main(["doctor", "-i", str(inv), "--json"]) == 0
    assert '"ok": true' in capsys.readouterr().out


def test_only_fixed_commands_are_sent():
    # Nothing from the inventory may reach a shell: every command is a constant without placeholders
    # other than date's and docker's own format strings.
    for cmd in doctor.COMMANDS.values():
        assert "{" not in cmd.replace("{{.ServerVersion}}", "")


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_timeout_must_be_positive(tmp_path, bad, capsys):
    inv = tmp_path / "i.ini"
    inv.write_text("a\n")
    assert cli.main(["doctor", "-i", str(inv), "--timeout", bad]) == 2


# ---- one threshold with preflight; a host without a GPU (issue 33) -----------------------------------------------
def _df(free_gib: float) -> str:
    return ("Filesystem 1024-blocks Used Available Capacity Mounted on\n"
            f"/dev/vda 999999999 0 {int(free_gib * 1024 ** 2)} 1% /\n")


class FakeHost:
    """A host's answers to doctor's fixed commands (key -> (rc, stdout, stderr)); the clock agrees."""

    answers: dict = {}

    def __init__(self, timeout: float):
        pass

    def run(self, key: str):
        return self.answers[key]

    def clock(self):
        import time
        now = time.time()
        return [(now, now, f"{now:.4f}")]

    def close(self):
        pass


def _host(gpu=(0, "GPU 0: NVIDIA GB10 (UUID: GPU-x)\n", ""), free_gib=500.0):
    return {"uid": (0, "0\n", ""), "docker": (0, "28.1.1\n", ""), "gpu": gpu, "df": (0, _df(free_gib), "")}


NO_SMI = (127, "", "sh: 1: nvidia-smi: not found")
NO_DEVICE = (6, "No devices were found\n", "")


def test_doctor_and_preflight_share_the_free_disk_threshold(monkeypatch):
    from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.gates import LIMIT_DEFAULTS

    assert LIMIT_DEFAULTS["min_free_disk_gib"] == doctor.DEFAULT_MIN_FREE_GIB
    assert Target(name="t", address="t").min_free_gib == LIMIT_DEFAULTS["min_free_disk_gib"]
    monkeypatch.setattr(doctor, "_Local", FakeHost)
    limit = LIMIT_DEFAULTS["min_free_disk_gib"]
    # (free GiB, the host's own setting or None, --min-free-gib or None) -> whether the disk passes
    cases = [(limit + 1, None, None, True), (limit - 1, None, None, False),
             (limit - 1, limit - 2, None, True), (5.0, 8.0, None, False), (5.0, None, 4.0, True)]
    for free, own, flag, passes in cases:
        FakeHost.answers = _host(free_gib=free)
        target = Target(name="t", address="t", local=True, work_dir="/var/lib/sparkfleet", gpu_engines=[],
                        **({} if own is None else {"min_free_gib": own}))
        report = doctor.check_host(target, Limits(min_free_gib=flag))
        assert report.ok is passes, (free, own, flag, report.problems)


def test_the_hosts_own_preflight_disk_setting_is_read_from_the_inventory(tmp_path):
    inv = tmp_path / "i.ini"
    inv.write_text("a sparkfleet_preflight_min_free_disk_gib=50\nb\n")
    targets = {t.name: t for t in doctor.load_targets(str(inv))}
    assert targets["a"].min_free_gib == 50.0 and targets["b"].min_free_gib == doctor.DEFAULT_MIN_FREE_GIB


# (the host's GPU answer, engines of its campaign that need a GPU) -> (ready, CPU workloads only)
GPU_CASES = [
    (NO_SMI, [], True, True),
    (NO_DEVICE, [], True, True),
    (NO_SMI, ["trtllm"], False, False),
    (NO_SMI, None, False, False),  # campaign not known: a GPU is required
    (_host()["gpu"], [], True, False),
    (_host()["gpu"], ["trtllm"], True, False),
]


@pytest.mark.parametrize(("gpu", "engines", "ready", "cpu_only"), GPU_CASES)
def test_a_host_without_a_gpu_is_ready_for_cpu_workloads_only(monkeypatch, gpu, engines, ready, cpu_only):
    monkeypatch.setattr(doctor, "_Local", FakeHost)
    FakeHost.answers = _host(gpu=gpu)
    report = doctor.check_host(Target(name="t", address="t", local=True, campaign="c", gpu_engines=engines),
                               Limits())
    assert (report.ok, report.cpu_only) == (ready, cpu_only), report.problems
    if not ready:
        assert [p for p in report.problems if p.startswith("gpu:")]


def test_each_host_is_checked_against_the_campaign_it_would_run(tmp_path):
    inv = tmp_path / "i.ini"
    inv.write_text("[sparks]\nspark1\n[other]\nbox\n")
    targets = {t.name: t for t in doctor.load_targets(str(inv))}
    assert (targets["spark1"].campaign, targets["spark1"].gpu_engines) == ("study", ["trtllm"])
    assert (targets["box"].campaign, targets["box"].gpu_engines) == ("sanity", [])
    local = doctor.load_targets(str(REPO / "inventory" / "local.ini"))
    assert [(t.campaign, t.gpu_engines) for t in local] == [("sanity", [])]


def test_doctor_on_the_default_inventory_without_a_gpu(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(doctor, "_Local", FakeHost)
    FakeHost.answers = _host(gpu=NO_SMI)
    local = str(REPO / "inventory" / "local.ini")
    assert cli.main(["doctor", "-i", local]) == 0
    out = capsys.readouterr().out
    assert "1/1 hosts ready" in out and "CPU workloads only" in out
    gpu_campaign = tmp_path / "c.yml"
    gpu_campaign.write_text("name: t\nmodels: [{name: m, path: /var/lib/sparkfleet/models/m}]\n"
                            "environments: [native]\nworkloads: [T1]\n")
    assert cli.main(["doctor", "-i", local, "--campaign", str(gpu_campaign)]) == 1
    assert "0/1 hosts ready" in capsys.readouterr().out
    assert cli.main(["doctor", "-i", local, "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["hosts"][0]
    assert host["ok"] and host["cpu_only"] and host["campaign"] == "sanity"


def test_a_hosts_own_campaign_variable_decides_and_a_bad_one_requires_a_gpu(tmp_path):
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    (inv / "hosts.ini").write_text("[sparks]\ncpu\nbad\n")
    (inv / "host_vars" / "cpu.yml").write_text(
        "sparkfleet_campaign: {name: mm, models: [{name: m}], environments: [native], workloads: [matmul]}\n")
    (inv / "host_vars" / "bad.yml").write_text("sparkfleet_campaign: {name: x, iterations: 0}\n")
    targets = {t.name: t for t in doctor.load_targets(str(inv))}
    assert (targets["cpu"].campaign, targets["cpu"].gpu_engines) == ("mm", [])
    assert (targets["bad"].campaign, targets["bad"].gpu_engines) == (None, None)
