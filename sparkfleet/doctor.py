"""`sparkfleet doctor`: a fast parallel pre-check of every host in an inventory, over SSH with paramiko.

Per host, on one SSH connection: reachable (with host-key checking: unknown keys are rejected), sudo
works (``sudo -n true``; skipped for root), Docker present (``docker info``), GPU visible
(``nvidia-smi -L``), disk free under the work dir (``df -Pk``; the filesystem holding the nearest existing
parent of ``sparkfleet_work_dir``, default: its registry default) against the preflight's own limit
(``sparkfleet_preflight_min_free_disk_gib``, the same setting and default preflight_check gates on) and clock skew
(remote ``date +%s.%N`` against the local clock at the midpoint of the round trip). Hosts with
``ansible_connection=local`` are checked on this machine without SSH.

The GPU is checked against the campaign the host would run (``--campaign``, else its ``sparkfleet_campaign``, else
the default for its groups: the study for ``sparks``, the sanity campaign elsewhere): a host without a GPU is ready
for "CPU workloads only" when that campaign needs no GPU (planning.gpu_engines), and not ready when it does.

Only the fixed command strings in ``COMMANDS`` are ever sent to a shell; inventory values (paths, names)
are never interpolated into one: the work dir is matched against ``df -Pk``'s mount points here.

Ansible itself connects with OpenSSH; paramiko serves only this check (ansible-core 2.21 removed its
paramiko connection plugin).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.plugin_utils import planning
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.settings import SETTINGS_BY_NAME
from sparkfleet.runner import resolve_inventory

DEFAULT_WORK_DIR = SETTINGS_BY_NAME["sparkfleet_work_dir"].default  # defined once (plugin_utils/settings.py)
#: The least free disk under the work dir: the preflight's free_disk gate's setting (gates.LIMIT_FIELDS), one
#: threshold for doctor and preflight_check; a host's own value of the setting wins, as in preflight.
MIN_FREE_DISK_SETTING = "sparkfleet_preflight_min_free_disk_gib"
DEFAULT_MIN_FREE_GIB = float(SETTINGS_BY_NAME[MIN_FREE_DISK_SETTING].default)
SYSTEM_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "~/.ssh/known_hosts")

# The only strings ever run on a host.
COMMANDS = {
    "uid": "id -u",
    "sudo": "sudo -n true",
    "docker": "docker info --format '{{.ServerVersion}}'",
    "docker_sudo": "sudo -n docker info --format '{{.ServerVersion}}'",
    "gpu": "nvidia-smi -L",
    "df": "df -Pk",
    # The shell says it is ready (empty line), then prints the time each time it is sent a line: each
    # sample's round trip is one network round trip plus starting `date`, without SSH channel set-up.
    "clock": "echo; read x; date +%s.%N; read x; date +%s.%N; read x; date +%s.%N",
}
CLOCK_SAMPLES = 3


@dataclass
class Target:
    """One inventory host, resolved the way Ansible would connect to it."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    known_hosts: list[str] = field(default_factory=list)
    local: bool = False
    work_dir: str = DEFAULT_WORK_DIR
    #: The host's sparkfleet_preflight_min_free_disk_gib (its registry default when unset).
    min_free_gib: float = field(default=DEFAULT_MIN_FREE_GIB, compare=False)
    #: The campaign the host would run (its name) and the engines of it that need a GPU ([]: none; None: not
    #: known, so a GPU is required).
    campaign: str | None = field(default=None, compare=False)
    gpu_engines: list[str] | None = field(default=None, compare=False)


@dataclass
class HostReport:
    host: str
    address: str
    reachable: bool = False
    sudo: str | None = None          # "root", "yes", "no"
    docker: str | None = None        # server version, or None
    gpus: int | None = None
    #: No GPU seen, and the campaign needs none: ready for CPU workloads only (the reason in ``notes``).
    cpu_only: bool = False
    campaign: str | None = None
    notes: list[str] = field(default_factory=list)
    disk_free_gib: float | None = None
    disk_path: str | None = None     # the mount point holding the work dir
    clock_skew_s: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


# ---- inventory ------------------------------------------------------------------------------------
def known_hosts_from_args(*args: str | None) -> list[str]:
    """``UserKnownHostsFile`` paths from ssh option strings (``-o UserKnownHostsFile=F``, ``-oK=V``, ``-o "K V"``)."""
    files: list[str] = []
    for arg in args:
        try:
            words = shlex.split(str(arg or ""))
        except ValueError:
            continue
        for word, after in zip(words, [*words[1:], ""], strict=False):
            option = after if word == "-o" else word[2:] if word.startswith("-o") else ""
            key, _, value = option.replace("=", " ", 1).partition(" ")
            if key.strip().lower() == "userknownhostsfile":
                files += [f for f in value.split() if f.lower() != "none"]
    return files


def host_campaign(given: dict[str, Any] | None, hostvar: Any,
                  group_names: list[str]) -> tuple[str | None, list[str] | None]:
    """(name, engines needing a GPU) of the campaign a host would run: ``given`` (resolved, from --campaign), else
    its ``sparkfleet_campaign`` variable, else the default for its groups (planning.default_campaign). One that
    does not resolve (the validate stage will say why) counts as needing a GPU."""
    try:
        campaign = given or resolve(planning.plain(hostvar) if hostvar is not None else
                                    planning.default_campaign(group_names, "campaign"), source="sparkfleet_campaign")
    except (CampaignError, TypeError, ValueError):  # not plain data, or not a campaign
        return None, None
    return campaign.get("name"), planning.gpu_engines(campaign)


def load_targets(inventory: str, campaign: dict[str, Any] | None = None) -> list[Target]:
    """Every host of an inventory (any source Ansible reads: ini, yaml, a directory with group_vars and
    host_vars, host ranges), with the connection settings ansible-playbook would use for it. ``campaign``: the
    resolved campaign every host is checked against (default: each host's own, see :func:`host_campaign`).

    Ansible resolves everything: its inventory and variable managers read the inventory and each host's
    variables, and its configuration resolves the options of its ``ssh`` connection plugin from them (the
    same variable names, aliases and precedence, ansible.cfg and ``ANSIBLE_*`` environment variables).
    """
    from ansible import constants
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import connection_loader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[resolve_inventory(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    hosts = manager.get_hosts()
    if not hosts:
        raise UsageError(f"inventory {inventory}: no hosts (see Ansible's warnings above if it could not be parsed)")
    connection_loader.get("ssh", class_only=True)  # registers the ssh plugin's options with the configuration
    ssh_vars = constants.config.get_plugin_vars("connection", "ssh")
    targets = []
    for host in hosts:
        hostvars = variables.get_vars(host=host)
        templar = Templar(loader=loader, variables=hostvars)

        def value(name: str, hostvars=hostvars, templar=templar) -> Any:
            """A host variable's value, templated by Ansible; None where it is unset or its template fails."""
            try:
                return None if hostvars.get(name) is None else templar.template(hostvars[name])
            except Exception:  # an undefined or failing template: the value is not usable here
                return None

        ssh_options = {name: v for name in ssh_vars if (v := value(name)) is not None}

        def ssh(option: str, host=host, ssh_options=ssh_options) -> Any:
            try:
                return constants.config.get_config_value(option, plugin_type="connection", plugin_name="ssh",
                                                         variables=ssh_options)
            except Exception as exc:  # e.g. ansible_port=x: Ansible refuses it as an integer
                raise UsageError(f"{host.name}: ssh option {option}: {exc}") from exc

        min_free = value(MIN_FREE_DISK_SETTING)
        try:
            min_free = DEFAULT_MIN_FREE_GIB if min_free is None else float(min_free)
        except (TypeError, ValueError):
            raise UsageError(f"{host.name}: {MIN_FREE_DISK_SETTING}: not a number: {min_free!r}") from None
        name, needs = host_campaign(campaign, value("sparkfleet_campaign"),
                                    [g.name for g in host.get_groups() if g.name != "all"])
        targets.append(Target(
            name=host.name,
            address=str(ssh("host") or host.name),
            port=ssh("port") or 22,
            user=ssh("remote_user") or None,
            key_file=ssh("private_key_file") or None,
            known_hosts=known_hosts_from_args(ssh("ssh_args"), ssh("ssh_common_args"), ssh("ssh_extra_args")),
            local=(value("ansible_connection") or constants.DEFAULT_TRANSPORT) in ("local", "ansible.builtin.local"),
            work_dir=str(value("sparkfleet_work_dir") or DEFAULT_WORK_DIR),
            min_free_gib=min_free, campaign=name, gpu_engines=needs,
        ))
    return targets


# ---- running the fixed commands -------------------------------------------------------------------
class _Local:
    def __init__(self, timeout: float):
        self.timeout = timeout

    def run(self, key: str) -> tuple[int, str, str]:
        try:
            proc = subprocess.run(["/bin/sh", "-c", COMMANDS[key]], capture_output=True, text=True,
                                  errors="replace", timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {self.timeout:g}s"
        return proc.returncode, proc.stdout, proc.stderr

    def clock(self) -> list[tuple[float, float, str]]:
        proc = subprocess.Popen(["/bin/sh", "-c", COMMANDS["clock"]], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            return _clock_samples(proc.stdout.readline, lambda: (proc.stdin.write(b"\n"), proc.stdin.flush()))
        finally:
            proc.kill()
            proc.communicate()

    def close(self) -> None:
        pass


class _Remote:
    def __init__(self, client, timeout: float):
        self.client = client
        self.timeout = timeout

    def run(self, key: str) -> tuple[int, str, str]:
        try:
            _stdin, stdout, stderr = self.client.exec_command(COMMANDS[key], timeout=self.timeout)
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            return stdout.channel.recv_exit_status(), out, err
        except TimeoutError:
            return 124, "", f"timed out after {self.timeout:g}s"

    def clock(self) -> list[tuple[float, float, str]]:
        chan = self.client.get_transport().open_session(timeout=self.timeout)
        try:
            chan.settimeout(self.timeout)
            chan.exec_command(COMMANDS["clock"])
            out = chan.makefile("rb")
            return _clock_samples(out.readline, lambda: chan.sendall(b"\n"))
        finally:
            chan.close()

    def close(self) -> None:
        self.client.close()


def _clock_samples(readline, send) -> list[tuple[float, float, str]]:
    """(sent, received, remote time text) for each sample of the ``clock`` command."""
    readline()  # the shell is up
    samples = []
    for _ in range(CLOCK_SAMPLES):
        t0 = time.time()
        send()
        line = readline()
        t1 = time.time()
        samples.append((t0, t1, line.decode(errors="replace").strip()))
    return samples


def clock_skew(samples: list[tuple[float, float, str]]) -> float | None:
    """Remote minus local time, from the sample with the shortest round trip (its midpoint is the local
    time the remote clock was most likely read at)."""
    best = None
    for t0, t1, text in samples:
        try:
            remote = float(text)
        except ValueError:
            continue
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, remote - (t0 + t1) / 2)
    return None if best is None else round(best[1], 4)


def connect(target: Target, timeout: float):
    """A paramiko client with host-key checking on; raises ``_Unreachable`` with a clear message."""
    import paramiko

    client = paramiko.SSHClient()
    files = [*SYSTEM_KNOWN_HOSTS, *target.known_hosts]
    loaded = []
    for path in map(os.path.expanduser, files):
        if os.path.isfile(path):
            with contextlib.suppress(OSError, paramiko.SSHException):
                client.load_system_host_keys(path)
                loaded.append(path)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    where = f"{target.address}:{target.port}"
    try:
        client.connect(target.address, port=target.port, username=target.user, key_filename=target.key_file,
                       timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                       allow_agent=target.key_file is None, look_for_keys=target.key_file is None)
    except paramiko.BadHostKeyException as exc:
        files = ", ".join(loaded) or "none loaded"
        raise _Unreachable(f"host key rejected: HOST KEY MISMATCH for {where}: the server's "
                           f"{exc.key.get_name()} key is not the one in known_hosts ({files}); possible "
                           "man-in-the-middle or a reinstalled host") from exc
    except paramiko.AuthenticationException as exc:
        who = target.user or "the default user"
        raise _Unreachable(f"login refused: authentication failed for {who}@{where}: {exc}") from exc
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise _Unreachable(f"host key rejected: the key of {where} is unknown: not in known_hosts "
                               f"({', '.join(loaded) or 'none found'}); host key checking is on: verify the "
                               "fingerprint and add it (ssh-keyscan) to known_hosts") from exc
        raise _Unreachable(f"unreachable: SSH error with {where}: {exc}") from exc
    except paramiko.ssh_exception.NoValidConnectionsError as exc:  # refused on every address
        reasons = sorted({e.strerror or str(e) for e in exc.errors.values()}) or [str(exc)]
        raise _Unreachable(f"unreachable: cannot connect to {where}: {', '.join(reasons)}") from exc
    except (OSError, EOFError) as exc:  # no route, timeout, connection reset
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
        raise _Unreachable(f"unreachable: cannot connect to {where}: {reason}") from exc
    return client


class _Unreachable(Exception):
    pass


# ---- checks -------------------------------------------------------------------------------------
@dataclass
class Limits:
    timeout: float = 10.0
    #: None: each host's own limit (Target.min_free_gib: the preflight's setting); a number: this one for all.
    min_free_gib: float | None = None
    max_skew_s: float = 1.0


def check_host(target: Target, limits: Limits) -> HostReport:
    report = HostReport(host=target.name, address="local" if target.local else f"{target.address}:{target.port}",
                        campaign=target.campaign)
    try:
        session = _Local(limits.timeout) if target.local else _Remote(connect(target, limits.timeout),
                                                                         limits.timeout)
    except Exception as exc:  # a check must report, not crash the whole table
        report.problems.append(str(exc) if isinstance(exc, _Unreachable) else
                               f"unreachable: {type(exc).__name__}: {exc}")
        return report
    report.reachable = True
    try:
        _run_checks(session, target, limits, report)
    except Exception as exc:  # report it in the table
        report.problems.append(f"check aborted: {type(exc).__name__}: {exc}")
    finally:
        session.close()
    return report


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _run_checks(session, target: Target, limits: Limits, report: HostReport) -> None:
    try:
        samples = session.clock()
    except (OSError, EOFError) as exc:
        samples = []
        report.problems.append(f"clock: could not read the remote time ({exc or type(exc).__name__})")
    report.clock_skew_s = clock_skew(samples)
    if report.clock_skew_s is None:
        if samples:
            report.problems.append(f"clock: `date +%s.%N` gave {samples[0][2]!r}")
    elif abs(report.clock_skew_s) > limits.max_skew_s:
        report.problems.append(f"clock skew {report.clock_skew_s:+.3f}s exceeds {limits.max_skew_s:g}s "
                               "(run NTP/chrony on every host)")

    rc, out, err = session.run("uid")
    if rc == 0 and out.strip() == "0":
        report.sudo = "root"
    else:
        rc, out, err = session.run("sudo")
        report.sudo = "yes" if rc == 0 else "no"
        if rc != 0:
            report.problems.append(f"sudo: passwordless sudo does not work ({_first_line(err) or f'rc={rc}'})")

    rc, out, err = session.run("docker")
    if rc != 0 and report.sudo == "yes" and (retry := session.run("docker_sudo"))[0] == 0:
        rc, out, err = retry
    if rc == 0 and out.strip():
        report.docker = out.strip().splitlines()[0]
    else:
        why = "not installed" if rc == 127 else (_first_line(err) or _first_line(out) or f"rc={rc}")
        report.problems.append(f"docker: {why}")

    rc, out, err = session.run("gpu")
    gpus = [line for line in out.splitlines() if line.startswith("GPU ")]
    if rc == 0 and gpus:
        report.gpus = len(gpus)
    else:
        why = "nvidia-smi not found" if rc == 127 else (_first_line(err) or _first_line(out) or "no GPU listed")
        campaign = f"campaign {target.campaign!r}" if target.campaign else "the campaign"
        if target.gpu_engines is None:
            report.problems.append(f"gpu: {why}")
        elif target.gpu_engines:
            report.problems.append(f"gpu: {why}; {campaign} needs a GPU ({', '.join(target.gpu_engines)})")
        else:
            report.cpu_only = True
            report.notes.append(f"CPU workloads only: {why}; {campaign} needs no GPU")

    rc, out, err = session.run("df")
    found = free_under(out, target.work_dir)
    if found is None:
        report.problems.append(f"disk: no filesystem for {target.work_dir} in `df -Pk` ({_first_line(err)})")
    else:
        report.disk_path, free_kib = found
        report.disk_free_gib = round(free_kib / 1024**2, 1)
        least = target.min_free_gib if limits.min_free_gib is None else limits.min_free_gib
        if report.disk_free_gib < least:
            report.problems.append(f"disk: {report.disk_free_gib:g} GiB free on {report.disk_path} for "
                                   f"{target.work_dir}, below {least:g} GiB (preflight's free_disk gate)")


def free_under(df_output: str, path: str) -> tuple[str, int] | None:
    """(mount point, free KiB) of the filesystem holding ``path`` (its nearest existing parent), from
    ``df -Pk``: the longest mount point that is ``path`` or one of its parents."""
    if not path.startswith("/"):
        return None
    path = posixpath.normpath(path)
    best: tuple[str, int] | None = None
    for line in df_output.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 6:
            continue
        mount = " ".join(parts[5:])
        try:
            avail = int(parts[3])
        except ValueError:
            continue
        inside = path == mount or mount == "/" or path.startswith(mount.rstrip("/") + "/")
        if inside and (best is None or len(mount) >= len(best[0])):
            best = (mount, avail)
    return best


def check_fleet(targets: list[Target], limits: Limits) -> list[HostReport]:
    workers = max(1, min(32, len(targets)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool:
        return list(pool.map(lambda t: check_host(t, limits), targets))


# ---- output -------------------------------------------------------------------------------------
HEADERS = ("host", "reachable", "sudo", "docker", "gpu", "disk free", "clock skew", "problems")


def table_rows(reports: list[HostReport]) -> list[tuple[str, ...]]:
    rows = []
    for r in reports:
        disk = "-" if r.disk_free_gib is None else f"{r.disk_free_gib:g} GiB ({r.disk_path})"
        rows.append((
            r.host,
            "yes" if r.reachable else "NO",
            r.sudo or "-",
            r.docker or ("NO" if r.reachable else "-"),
            (f"{r.gpus} GPU" + ("s" if r.gpus != 1 else "")) if r.gpus else
            "none (CPU only)" if r.cpu_only else ("NO" if r.reachable else "-"),
            disk,
            "-" if r.clock_skew_s is None else f"{r.clock_skew_s:+.3f}s",
            "; ".join(r.problems) or "; ".join(["ok", *r.notes]),
        ))
    return rows


def render_table(reports: list[HostReport]) -> str:
    rows = [HEADERS, *table_rows(reports)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS) - 1)]
    lines = []
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        lines.append(" | ".join([*cells, row[-1]]))
        if row is HEADERS:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * len(HEADERS[-1]))
    bad = [r.host for r in reports if not r.ok]
    cpu = [r.host for r in reports if r.ok and r.cpu_only]
    lines.append(f"{len(reports) - len(bad)}/{len(reports)} hosts ready"
                 + (f" ({', '.join(cpu)}: CPU workloads only, no GPU)" if cpu else "")
                 + (f"; not ready: {', '.join(bad)}" if bad else ""))
    return "\n".join(lines)
