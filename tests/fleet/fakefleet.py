#!/usr/bin/env python3
"""A fake fleet of real hosts for end-to-end tests: network namespaces with their own sshd.

Each host is a network namespace with a veth on a private bridge, its own sshd (key auth, generated
host keys) and its own work dir. Ansible reaches them over real SSH with host-key checking on, using a
known_hosts file written here. The namespaces share this machine's filesystem, so each host gets its
own work dir and its own GPU stand-in state; the stand-ins (``tests/fleet/standins``) are put on the
PATH of SSH sessions into the test hosts only (sshd ``SetEnv``), never on the controller's PATH.

Used as a library (``FakeFleet``, the pytest fixtures in ``tests/conftest.py``) and by hand::

    sudo .venv/bin/python tests/fleet/fakefleet.py up --hosts 3 --dir /tmp/fleet
    ansible -i /tmp/fleet/inventory.ini all -m ping
    sudo .venv/bin/python tests/fleet/fakefleet.py down --dir /tmp/fleet

Addresses come from 10.213.<k>.0/24 with <k> picked free on this machine; nothing here sends traffic
anywhere but to those namespaces.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
# Stand-ins that live on the host: the driver's tools, and the RDMA and NCCL tests the pair preflight runs.
HOST_TOOLS = ("nvidia-smi", "ib_write_bw", "ib_write_lat", "ibv_devinfo", "ibdev2netdev", "all_reduce_perf")
SUBNET_PREFIX = "10.213"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
STATE_FILE = "fleet.json"


class FleetError(RuntimeError):
    """The harness could not build or reach the fleet; the message names the step."""


def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise FleetError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass
class FakeHost:
    name: str
    netns: str
    address: str
    veth: str
    dir: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def work_dir(self) -> str:
        return f"{self.dir}/work"

    @property
    def pidfile(self) -> str:
        return f"{self.dir}/sshd.pid"

    def sshd_pid(self) -> int | None:
        try:
            return int(Path(self.pidfile).read_text().strip())
        except (OSError, ValueError):
            return None


#: A healthy pair on the fake fleet's one rail (the stand-ins' HCA on each host's eth0), as the cluster tests give it:
#: one rail, so the summed RDMA floor is one rail's; NCCL's test over 8 MiB..2 GiB on one GPU a rank.
PAIR_RAIL = {"hca": "rocep1s0f0", "netdev": "eth0"}


def pair_vars(workload_env: dict[str, str] | None = None) -> dict:
    """The cluster settings of a pair named ``pair`` on the fake fleet (``-e @file``)."""
    # the fake hosts share this machine's /dev and its memlock limit (no RDMA to see): the RDMA check in the run's
    # environment is left out here, and has tests of its own (test_rdma_env_container.py, test_rdma_env.py)
    return {"sparkfleet_cluster": "pair", "sparkfleet_fabric": [PAIR_RAIL], "sparkfleet_pair_rdma_sum_gbps_min": 85.0,
            "sparkfleet_pair_rdma_env_check": False,
            "sparkfleet_pair_nccl_command": ["all_reduce_perf", "-b", "8M", "-e", "2G", "-f", "2", "-g", "1"],
            "sparkfleet_workload_env": {"SPARKFLEET_FAKE_NCCL_HCAS": "rocep1s0f0"} if workload_env is None
            else workload_env}


#: What bench.yml on the fake fleet relaxes: its hosts share this machine's load, memory and disk, and build no image.
BENCH_VARS = ("sparkfleet_image_offline=true", "sparkfleet_preflight_max_load_per_cpu=100",
              "sparkfleet_preflight_min_free_memory_gib=0.5", "sparkfleet_preflight_min_free_disk_gib=1")


@dataclass
class FakeFleet:
    """Create with ``FakeFleet.up(...)``; tear down with ``down()`` (idempotent, also after failures)."""

    dir: str
    subnet: int
    bridge: str
    hosts: list[FakeHost]
    key: str
    known_hosts: str
    inventory: str

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def up(
        cls,
        n: int,
        base_dir: str | os.PathLike[str],
        host_env: dict[str, dict[str, str]] | None = None,
        group: str = "sparks",
        extra_vars: dict[str, str] | None = None,
        host_vars: dict[str, dict[str, str]] | None = None,
    ) -> FakeFleet:
        if os.geteuid() != 0:
            raise FleetError("the fake fleet needs root (network namespaces, veth, sshd on port 22)")
        if not 1 <= n <= 64:
            raise FleetError(f"hosts must be between 1 and 64, got {n}")
        base = Path(base_dir).resolve()
        base.mkdir(parents=True, exist_ok=True)
        with _host_lock():  # fleets built in parallel (pytest-xdist) must not pick the same subnet
            subnet = _free_subnet()
            _run(["ip", "link", "add", f"sfbr{subnet}", "type", "bridge"])
        fleet = cls(
            dir=str(base),
            subnet=subnet,
            bridge=f"sfbr{subnet}",
            hosts=[],
            key=str(base / "id_ed25519"),
            known_hosts=str(base / "known_hosts"),
            inventory=str(base / "inventory.ini"),
        )
        fleet._save()  # saved before anything is created so `down` can always find what to remove
        try:
            fleet._make_bridge()
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkfleet-test", "-f", fleet.key])
            Path(base / "authorized_keys").write_text(Path(fleet.key + ".pub").read_text())
            fleet._write_host_ssh()
            Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation dir
            for i in range(1, n + 1):
                name = f"spark{i}"
                host = FakeHost(
                    name=name,
                    netns=f"sf{subnet}-{name}",
                    address=f"{SUBNET_PREFIX}.{subnet}.{10 + i}",
                    veth=f"sfv{subnet}h{i}",
                    dir=str(base / "hosts" / name),
                    env=dict((host_env or {}).get(name, {})),
                )
                fleet.hosts.append(host)
                fleet._save()
                fleet._make_host(host)
            fleet._wait_ssh()
            fleet._write_known_hosts()
            fleet._write_inventory(group, extra_vars or {}, host_vars or {})
            fleet._save()
        except BaseException:
            fleet.down()
            raise
        return fleet

    @classmethod
    def load(cls, base_dir: str | os.PathLike[str]) -> FakeFleet:
        data = json.loads((Path(base_dir) / STATE_FILE).read_text())
        data["hosts"] = [FakeHost(**h) for h in data["hosts"]]
        return cls(**data)

    def _save(self) -> None:
        Path(self.dir, STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    @property
    def host_ssh(self) -> str:
        """The SSH command a host reaches the others with: the fleet's key and known hosts, never a prompt."""
        return f"{self.dir}/host-ssh"

    def _write_host_ssh(self) -> None:
        # Host to host SSH, set up as an owner sets up passwordless SSH between two Sparks for mpirun (the key is
        # the one every host accepts). ssh reads ~/.ssh of the passwd entry's home, this machine's /root: so a
        # command of its own, named to OpenMPI by OMPI_MCA_plm_rsh_agent in every session (_sshd_config).
        Path(self.host_ssh).write_text(
            "#!/bin/sh\n"
            f'exec ssh -i {self.key} -o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes '
            '-o BatchMode=yes "$@"\n')
        os.chmod(self.host_ssh, 0o755)

    def _make_bridge(self) -> None:
        _run(["ip", "addr", "add", f"{SUBNET_PREFIX}.{self.subnet}.1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        # Host to host across the bridge (the pair preflight): with br_netfilter, bridged frames go through
        # iptables' FORWARD chain, whose policy Docker sets to DROP. Accept this bridge's own traffic, nothing else;
        # down() removes the rule.
        if shutil.which("iptables"):
            _run(["iptables", "-I", "FORWARD", *self._forward_rule()], check=False)

    def _forward_rule(self) -> list[str]:
        return ["-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT", "-m", "comment", "--comment",
                f"sparkfleet fake fleet {self.bridge}"]

    def _make_host(self, host: FakeHost) -> None:
        hdir = Path(host.dir)
        (hdir / "work").mkdir(parents=True, exist_ok=True)
        (hdir / "bin").mkdir(exist_ok=True)
        (hdir / "home").mkdir(exist_ok=True)
        for tool in HOST_TOOLS:
            src = STANDINS / tool
            if src.exists():
                dst = hdir / "bin" / tool
                dst.unlink(missing_ok=True)
                dst.symlink_to(src)
        _run(["ip", "netns", "add", host.netns])
        _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
        _run(["ip", "link", "set", host.veth, "master", self.bridge])
        _run(["ip", "link", "set", host.veth, "up"])
        ns = ["ip", "netns", "exec", host.netns]
        _run([*ns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run([*ns, "ip", "link", "set", "eth0", "up"])
        _run([*ns, "ip", "link", "set", "lo", "up"])
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hdir / "ssh_host_ed25519_key")])
        (hdir / "sshd_config").write_text(self._sshd_config(host))
        self.start_sshd(host)

    def _sshd_config(self, host: FakeHost) -> str:
        path = ":".join([f"{host.dir}/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                         "/sbin", "/bin"])
        env = {
            "PATH": path,
            # Each machine has its own home: ~/.ansible and ~/.ansible_async stay per host, and sessions do
            # not source this machine's /root/.bashrc (a pyenv rehash lock there, orphaned when a test
            # kills a host, stalled every later SSH command by 60 s).
            "HOME": f"{host.dir}/home",
            "SPARKFLEET_FAKE_GPU_STATE": f"{host.dir}/gpu-state.json",
            "SPARKFLEET_FAKE_GPU_LOAD": f"{host.dir}/gpu-load",
            "OMPI_MCA_plm_rsh_agent": self.host_ssh,  # mpirun's remote launch (trtllm-serve across nodes)
            **host.env,
        }
        setenv = " ".join(f'{k}="{v}"' for k, v in env.items())
        return "\n".join([
            "Port 22",
            f"ListenAddress {host.address}",
            f"HostKey {host.dir}/ssh_host_ed25519_key",
            f"PidFile {host.pidfile}",
            f"AuthorizedKeysFile {self.dir}/authorized_keys",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            "MaxStartups 200:30:400",
            "MaxSessions 100",
            "LogLevel ERROR",
            f"SetEnv {setenv}",
            "Subsystem sftp internal-sftp",
            "",
        ])

    def start_sshd(self, host: FakeHost) -> None:
        """(Re)start a host's sshd; it daemonises and writes its pid file.

        `ip netns exec` mounts a fresh sysfs for the namespace, which hides /sys/fs/cgroup; the cgroup memory
        hierarchy is mounted again there (the same hierarchy), so a host sees its containers' cgroups as a real
        machine does."""
        script = _cgroup_mount_script() + 'exec "$@"'
        _run(["ip", "netns", "exec", host.netns, "sh", "-c", script, "sshd", SSHD, "-f", f"{host.dir}/sshd_config",
              "-E", f"{host.dir}/sshd.log"])
        _wait(lambda: host.sshd_pid() is not None, 10, f"sshd of {host.name} did not write its pid file")

    def stop_sshd(self, host: FakeHost) -> None:
        """Make a host unreachable the way a dead machine is: its sshd is gone."""
        pid = host.sshd_pid()
        if pid:
            _kill(pid)
        Path(host.pidfile).unlink(missing_ok=True)

    def set_mtu(self, mtu: int) -> None:
        """Every link of the fleet's network (bridge, veths, the hosts' eth0) at this MTU: jumbo frames cross."""
        for host in self.hosts:
            _run(["ip", "link", "set", host.veth, "mtu", str(mtu)])
            _run(["ip", "netns", "exec", host.netns, "ip", "link", "set", "eth0", "mtu", str(mtu)])
        _run(["ip", "link", "set", self.bridge, "mtu", str(mtu)])

    def cut_network(self, host: FakeHost) -> None:
        """Unplug the host's cable: established SSH sessions hang, new ones time out (a lost host)."""
        _run(["ip", "link", "set", host.veth, "down"])

    def restore_network(self, host: FakeHost) -> None:
        _run(["ip", "link", "set", host.veth, "up"])
        _run(["ip", "link", "set", host.veth, "master", self.bridge])
        _wait(lambda: _port_open(host.address, 22), 15, f"{host.name} did not come back")

    def _wait_ssh(self) -> None:
        for host in self.hosts:
            _wait(lambda h=host: _port_open(h.address, 22), 15, f"sshd of {host.name} not reachable")

    def _write_known_hosts(self) -> None:
        lines = []
        for host in self.hosts:
            pub = Path(host.dir, "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"{host.address} {pub[0]} {pub[1]}")
        Path(self.known_hosts).write_text("\n".join(lines) + "\n")

    def _write_inventory(self, group: str, extra_vars: dict[str, str], host_vars: dict[str, dict[str, str]]) -> None:
        rows = [f"[{group}]"]
        for host in self.hosts:
            more = "".join(f" {k}={v}" for k, v in host_vars.get(host.name, {}).items())
            rows.append(f"{host.name} ansible_host={host.address} sparkfleet_work_dir={host.work_dir}{more}")
        ssh_args = (f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
                    "-o ControlMaster=auto -o ControlPersist=60s")
        rows += ["", f"[{group}:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={self.key}",
                 f"ansible_ssh_common_args='{ssh_args}'", "ansible_python_interpreter=/usr/bin/python3"]
        rows += [f"{k}={v}" for k, v in extra_vars.items()]
        Path(self.inventory).write_text("\n".join(rows) + "\n")

    def bench_argv(self, *var_files: Path, models: Path, results: Path, client: Path) -> list[str]:
        """``ansible-playbook bench.yml`` on this fleet's inventory with ``var_files`` (``-e @file``), the models
        and results directories, the serving client, and BENCH_VARS."""
        argv = ["ansible-playbook", "-i", self.inventory, "bench.yml"]
        for value in (*(f"@{f}" for f in var_files), f"sparkfleet_models_dir={models}",
                      f"sparkfleet_results_dir={results}", *BENCH_VARS, f"sparkfleet_serving_client={client}"):
            argv += ["-e", value]
        return argv

    # ---- teardown -----------------------------------------------------------------------------
    def down(self) -> None:
        """Remove everything ``up`` made. Safe to call twice and after a half-built fleet."""
        for host in self.hosts:
            self.stop_sshd(host)
            _unmount_under(host.dir)
            for pid in _run(["ip", "netns", "pids", host.netns], check=False).stdout.split():
                _kill(int(pid))
            _run(["ip", "link", "del", host.veth], check=False)
            _run(["ip", "netns", "del", host.netns], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        if shutil.which("iptables"):
            while _run(["iptables", "-D", "FORWARD", *self._forward_rule()], check=False).returncode == 0:
                pass  # inserted once per up(); a second up() of the same directory would have added another
        _unmount_under(self.dir)


@contextlib.contextmanager
def _host_lock(name: str = "/run/sparkfleet-fakefleet.lock"):
    import fcntl

    with open(name, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _free_subnet() -> int:
    used = _run(["ip", "-o", "-4", "addr"]).stdout
    links = _run(["ip", "-o", "link"]).stdout
    for k in range(10, 250):
        if f" {SUBNET_PREFIX}.{k}." not in used and f" sfbr{k}:" not in links:
            return k
    raise FleetError(f"no free {SUBNET_PREFIX}.K.0/24 subnet left on this machine")


def _cgroup_mount_script() -> str:
    """Shell commands that mount this machine's cgroup v2 tree, or its v1 memory hierarchy, on /sys/fs/cgroup
    (errors ignored: without them a host just sees no cgroups)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        mount_point, fstype = fields[4], fields[fields.index("-") + 1]
        if mount_point == "/sys/fs/cgroup" and fstype == "cgroup2":
            return "mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null; "
    for line in lines:
        fields = line.split()
        sep = fields.index("-")
        mount_point, fstype, options = fields[4], fields[sep + 1], fields[sep + 3]
        if fstype == "cgroup" and "memory" in options.split(",") and mount_point.startswith("/sys/fs/cgroup/"):
            return (f"{{ mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup && mkdir -p {mount_point} && "
                    f"mount -t cgroup -o memory cgroup {mount_point}; }} 2>/dev/null; ")
    return ""


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait(predicate, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise FleetError(message)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _unmount_under(path: str) -> None:
    """Unmount anything a test left mounted below ``path``, deepest first."""
    prefix = str(Path(path).resolve()).rstrip("/") + "/"
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].encode().decode("unicode_escape")
        if target.startswith(prefix):
            mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        _run(["umount", "-l", target], check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create N hosts and print the inventory path")
    up.add_argument("--hosts", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--image", action="store_true", help="also start dockerd and build the test image")
    down = sub.add_parser("down", help="tear a fleet down")
    down.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            fleet = FakeFleet.up(args.hosts, args.dir)
            if args.image:
                from testimage import ensure_dockerd, ensure_test_image  # noqa: PLC0415

                ensure_dockerd()
                print(f"image: {ensure_test_image()}")
            print(fleet.inventory)
        else:
            FakeFleet.load(args.dir).down()
    except FleetError as exc:
        print(f"fakefleet: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
