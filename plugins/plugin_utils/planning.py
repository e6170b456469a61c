"""The validate stage in Python: from a campaign and the inventory to each host's typed plan, once.

Two steps, because the second needs every host's answer to the first (plugins/action/campaign_check.py and
campaign_plan.py run them, in playbooks/validate.yml):

1. :func:`check_host` (per host): the campaign this host gets (given, or the default for its groups),
   resolved and validated; the host's ``sparkfleet_*`` variables checked. The action adds what only the host
   can say: which model paths are missing and which campaign configurations it already keeps.
2. :func:`plan_fleet` (once): every host must get the same campaign; the resume decision is taken for the
   fleet from the controller's ``campaign.json`` *and* each host's kept configuration (a controller whose
   results were deleted cannot let a changed campaign through); then each host's :class:`HostPlan` — its
   runs with their full launch spec, the async limit and how the follower polls — and the ``campaign.json``
   document that records all of it.

The playbooks only pass these results on: no Jinja recomputes anything.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
import urllib.parse
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host import gates
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.cluster import pair
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import resume, textfile
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving, serving_client
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.sensors import gpu
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, config_hash, plan, resolve

#: Which catalogue campaign a host gets without one: kind -> (for the ``sparks`` group or None, for every other host).
DEFAULT_CAMPAIGNS = {"campaign": ("study", "sanity"), "reference": (None, "reference")}
#: The controller's record of a campaign: resolved matrix, config hash, every host's planned runs.
CAMPAIGN_FILE = "campaign.json"
#: An inventory host name that can name a directory and a run id (bench_run's SAFE_NAME): no shell metacharacters.
SAFE_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: Slack on top of the runs' own time budget in the async limit, per run and per job.
ASYNC_SLACK_PER_RUN_S = 120
ASYNC_SLACK_S = 600


def plain(value: Any) -> Any:
    """A value Ansible templated, as plain JSON data (Ansible hands out lazy and tagged containers).
    TypeError for what JSON cannot hold (e.g. an unquoted YAML date)."""
    return json.loads(json.dumps(value))


class PlanningError(CampaignError):
    """A campaign the fleet cannot run as given; the message names the host and what to do."""


def default_campaign(group_names, kind: str) -> dict[str, Any]:
    """The catalogue campaign a host gets when none is given (not resolved): kind ``campaign``: the study's
    matrix for the ``sparks`` group, the sanity campaign otherwise; kind ``reference``: the reproducibility
    check's."""
    if kind not in DEFAULT_CAMPAIGNS:
        raise PlanningError([f"default: must be one of {', '.join(DEFAULT_CAMPAIGNS)}, not {kind!r}"], "campaign")
    sparks, other = DEFAULT_CAMPAIGNS[kind]
    return copy.deepcopy(settings.CAMPAIGNS[sparks if sparks and "sparks" in (group_names or ()) else other])


def gpu_engines(campaign: dict[str, Any]) -> list[str]:
    """The engines of the (resolved) campaign's workloads that need a GPU, sorted; [] when a host without a GPU
    can run it: the engines that run on a CPU too are serving.ENGINES' ``cpu`` ones (the sanity campaign: matmul);
    any other engine (a campaign's own too) needs one."""
    return sorted({str(w.get("engine", "trtllm")) for w in campaign.get("workloads") or []}
                  - set(serving.engine_names(cpu=True)))


@dataclass
class HostCheck:
    """What step 1 learnt about one host. ``kept``: campaign name -> the configuration the host keeps beside
    its results of that campaign (None: none kept)."""

    host: str
    campaign: dict[str, Any]
    settings: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    kept: dict[str, Any] = field(default_factory=dict)
    #: :func:`host_settings`: the paths and knobs the host's plan carries.
    knobs: dict[str, Any] = field(default_factory=dict)
    #: The host's address (ansible_host, else its inventory name): an endpoint's URL may name it.
    address: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, host: str) -> HostCheck:
        if not isinstance(data, dict) or not isinstance(data.get("campaign"), dict):
            raise PlanningError([f"{host}: has no campaign_check result (did the host skip or fail that task?)"],
                                "campaign")
        return cls(host, data["campaign"], dict(data.get("settings") or {}), list(data.get("warnings") or []),
                   dict(data.get("kept") or {}), dict(data.get("knobs") or {}), str(data.get("address") or host))


def usable_checks(results: dict[str, Any]) -> tuple[list[HostCheck], list[str]]:
    """(the checks to plan with, the unreachable hosts among them) from every play host's campaign_check result
    (host -> registered result). A host that could not be reached is planned all the same when the controller's
    part of its check passed (its runs go into campaign.json, and the report names them missing); a host whose
    check failed stops the fleet, before any host is changed (a bad campaign or variable is fixed first)."""
    failed = [f"{h}: {(r or {}).get('msg') or 'its campaign check failed'}" for h, r in results.items()
              if isinstance(r, dict) and r.get("failed") and not r.get("unreachable")]
    if failed:
        raise PlanningError(failed + ["the fleet stops before any host is changed: fix the host(s) named, or leave "
                                      "them out with --limit"], "campaign_check")
    unreachable = [h for h, r in results.items() if isinstance(r, dict) and r.get("unreachable")]
    checks = [HostCheck.from_dict(r, h) for h, r in results.items()
              if not (h in unreachable and not isinstance(r.get("campaign"), dict))]
    if not [c for c in checks if c.host not in unreachable]:
        raise PlanningError(["no reachable host to plan for"], "campaign")
    return checks, [h for h in unreachable if any(c.host == h for c in checks)]


def check_host(host: str, campaign: Any, variables: dict[str, Any]) -> HostCheck:
    """Step 1 on the controller: the resolved campaign and the host's checked ``sparkfleet_*`` variables.
    Raises CampaignError naming every bad campaign field, or every bad variable with its host."""
    if not SAFE_HOST.match(host):
        raise PlanningError([f"{host!r}: not a safe host name: use letters, digits, '.', '_' and '-' only (at most "
                             "128; it names the host's results directory and every run id); rename the inventory "
                             "host and give its address as ansible_host"], "inventory_hostname")
    resolved = resolve(campaign, source="sparkfleet_campaign")
    errors, warnings = settings.setting_problems(host, variables)
    if errors:
        raise PlanningError(errors, "bad inventory variables")
    outside = model_path_problems(resolved, host_models_dir(variables), host)
    outside += pathless_trtllm_models(resolved, settings.setting(variables, "sparkfleet_hf_cache_dir"), host)
    if outside:
        raise PlanningError(outside, "sparkfleet_campaign")
    return HostCheck(host, resolved, plan_settings(variables), warnings,
                     knobs=host_settings(host, variables, resolved))


#: Environment kinds that see the host's files only through the binds: of the host's own directories, only the
#: models directory (sparkfleet_models_dir) and the results are bound into the native chroot and the container.
BOUND_KINDS = ("native", "container")
_WORK_DIR_REF = re.compile(r"\{\{\s*sparkfleet_work_dir\s*\}\}")


def host_models_dir(variables: dict[str, Any]) -> str:
    """The host's models directory: ``sparkfleet_models_dir`` as templated by Ansible, else its registry default
    ``{{ sparkfleet_work_dir }}/models`` with the host's work directory filled in."""
    value = str(settings.setting(variables, "sparkfleet_models_dir"))
    work_dir = str(settings.setting(variables, "sparkfleet_work_dir"))
    return os.path.normpath(_WORK_DIR_REF.sub(lambda _: work_dir, value))


def path_within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies under it (lexically: '..' resolved, symlinks not)."""
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def model_path_problems(campaign: dict[str, Any], models_dir: str, host: str | None = None) -> list[str]:
    """One problem per model whose ``path`` lies outside ``models_dir``, when the campaign runs a native or
    container environment (where the engine sees that path only through the models directory's bind)."""
    if not any(e.get("kind") in BOUND_KINDS for e in campaign.get("environments") or []):
        return []
    where = f"{host}: " if host else ""
    return [f"{where}model {m['name']}: {key} {m[key]} lies outside the models directory {models_dir} "
            f"(sparkfleet_models_dir), the only host directory bound into the native chroot and the container; "
            f"put the model under it or set sparkfleet_models_dir to a directory that holds it"
            for m in campaign.get("models") or [] for key in ("path", "gguf")
            if m.get(key) and not path_within(m[key], models_dir)]


def pathless_trtllm_models(campaign: dict[str, Any], hf_cache_dir: Any = None, host: str | None = None) -> list[str]:
    """One problem per model without a local ``path`` when a trtllm workload would run it and no Hugging Face
    cache is bound: trtllm reads its tokenizer and weights from the model's directory, offline (trtllm_cli.steps
    refuses the same on the host; here it is refused before any host is changed)."""
    if hf_cache_dir or not any(w.get("engine", "trtllm") == "trtllm" for w in campaign.get("workloads") or []):
        return []
    where = f"{host}: " if host else ""
    return [f"{where}model {m['name']}: no path, but a trtllm workload runs it: trtllm reads the tokenizer and the "
            f"weights from the model's local directory, offline; give models[].path (under the models directory) "
            f"or bind a Hugging Face cache that holds it (sparkfleet_hf_cache_dir)"
            for m in campaign.get("models") or [] if not m.get("path")]


#: The host's settings as its plan carries them: group -> key -> setting (defaults applied from the registry).
PLAN_GROUPS: dict[str, dict[str, str]] = {
    "paths": {"work_dir": "sparkfleet_work_dir", "hf_cache_dir": "sparkfleet_hf_cache_dir"},
    "workload": {"env": "sparkfleet_workload_env", "telemetry_interval_s": "sparkfleet_telemetry_interval_s",
                 "retry_failed": "sparkfleet_retry_failed", "fresh": "sparkfleet_fresh",
                 "trtllm_unknown_version": "sparkfleet_trtllm_unknown_version"},
    "image": {"offline": "sparkfleet_image_offline", "archive": "sparkfleet_image_archive"},
    "rootfs": {"source": "sparkfleet_rootfs_source", "prune": "sparkfleet_rootfs_prune"},
    "docker": {"flags": "sparkfleet_docker_flags", "variants": "sparkfleet_docker_variants",
               "variant": "sparkfleet_docker_variant"},
    "gpu_state": {"gpus": "sparkfleet_gpus", "persistence_mode": "sparkfleet_gpu_persistence_mode",
                  "locked_clocks": "sparkfleet_gpu_locked_clocks", "power_limit": "sparkfleet_gpu_power_limit",
                  "cpu_governor": "sparkfleet_cpu_governor", "drop_caches": "sparkfleet_drop_caches"},
    # each gate's limits, as the gate registry declares them (a new gate is one file: sparkfleet_host/gates/)
    "preflight": {**{f.option: f.name for f in gates.LIMIT_FIELDS},
                  "max_fail_percentage": "sparkfleet_max_fail_percentage"},
    "reproducibility": {"tolerance_pct": "sparkfleet_reproducibility_tolerance_pct",
                        "acknowledge_host_differences": "sparkfleet_acknowledge_host_differences"},
    "serving": {"client": "sparkfleet_serving_client", "aiperf": "sparkfleet_serving_aiperf",
                "corpus": "sparkfleet_serving_corpus"},
    "nvml": {"install": "sparkfleet_nvml", "wheel": "sparkfleet_nvml_wheel", "index_url": "sparkfleet_nvml_index_url"},
    # the cluster the host serves in and its pair preflight's floors (sparkfleet_host/cluster/pair.py)
    "cluster": {f.option: f.name for f in pair.FIELDS},
    "readiness": {"policy": "sparkfleet_readiness_policy", "min_fraction": "sparkfleet_readiness_min_fraction",
                  "expected_clock_mhz": "sparkfleet_readiness_expected_clock_mhz",
                  "probe_s": "sparkfleet_readiness_probe_s",
                  "degraded_bands": "sparkfleet_readiness_degraded_bands"},
}


def host_settings(host: str, variables: dict[str, Any], campaign: dict[str, Any] | None = None) -> dict[str, Any]:
    """The host's paths and knobs, grouped as its plan carries them (``sparkfleet_plan.paths.work_dir``,
    ``sparkfleet_plan.gpu_state.power_limit``, ...), each setting's registry default applied once, here. The
    roles read these and nothing else of the inventory. ``campaign``: the resolved campaign (its name names the
    results directory, its image is the rootfs image unless ``sparkfleet_image`` is given)."""
    out: dict[str, Any] = {group: {key: settings.setting(variables, name) for key, name in keys.items()}
                           for group, keys in PLAN_GROUPS.items()}
    campaign = campaign or {}
    name = campaign.get("name") or "sanity"
    work_dir = os.path.normpath(str(out["paths"]["work_dir"]))
    out["paths"].update(work_dir=work_dir, models_dir=host_models_dir(variables),
                        results_root=os.path.join(work_dir, "results"),
                        results_dir=os.path.join(work_dir, "results", name, host))
    # the default corpus (the collection's, which the serving_client role installs) under this host's work dir
    out["serving"]["corpus"] = os.path.normpath(_WORK_DIR_REF.sub(lambda _: work_dir, str(out["serving"]["corpus"])))
    # the pinned NVML bindings the nvml role installs (gpu.py: one definition of the pin)
    out["nvml"].update(package=gpu.NVML_PACKAGE, version=gpu.NVML_VERSION, sha256=gpu.NVML_WHEEL_SHA256)
    out["campaign"] = name
    out["image"]["ref"] = (settings.setting(variables, "sparkfleet_image") or campaign.get("image")
                           or settings.DEFAULT_IMAGE)
    out["image"]["archive"] = out["image"]["archive"] or ""
    return out


def standalone_plan(host: str, variables: dict[str, Any], groups: list[str] | None = None) -> dict[str, Any]:
    """The plan of a host that a stage playbook runs without validate.yml (provision, restore, gpu_state,
    preflight): its settings, checked, and the campaign given (``sparkfleet_campaign``, else the default for the
    host's ``groups`` when they are given) by name and image only — no runs. CampaignError naming each bad
    variable."""
    known = {k: v for k, v in variables.items() if k in settings.SETTINGS_BY_NAME}
    errors, _ = settings.setting_problems(host, known)
    if errors:
        raise PlanningError(errors, "bad inventory variables")
    campaign = variables.get("sparkfleet_resolved_campaign") or variables.get("sparkfleet_campaign")
    if not isinstance(campaign, dict):
        campaign = default_campaign(groups, "campaign") if groups is not None else {}
    plan_ = host_settings(host, known, {k: campaign.get(k) for k in ("name", "image")})
    plan_.update(host=host, runs=[], total=0, needs_native=False, needs_container=False, needs_serving=False,
                 summary=f"{host}: settings only (validate.yml did not run: no runs planned)")
    return plan_


def plan_settings(variables: dict[str, Any]) -> dict[str, Any]:
    """The host's settings a plan depends on, with their registry defaults."""
    names = ("sparkfleet_docker_flags", "sparkfleet_docker_variants", "sparkfleet_docker_variant",
             "sparkfleet_work_dir", "sparkfleet_poll_interval_s", "sparkfleet_report_after_s",
             "sparkfleet_serving_memory_gib")
    return {name: settings.setting(variables, name) for name in names}


#: The host plan's serving key that gives a client's executable (an inventory setting: PLAN_GROUPS["serving"]).
GIVEN_CLIENT = {"llama-benchy": "client", "aiperf": "aiperf"}


def serving_clients(workloads: list[dict[str, Any]], given: dict[str, Any], work_dir: str) -> list[dict[str, str]]:
    """The load generators the serving workloads use that the serving_client role installs, each {name, package,
    version, path}: the pin of its driver (serving_client.DRIVERS), its executable in <work_dir>/clients/<name>.
    A client the inventory gives (``given``: the plan's serving group, GIVEN_CLIENT) is not installed."""
    names = {serving_client.driver(w.get("client")).name for w in workloads if serving.is_serving(w)}
    return [{"name": d.name, "package": d.PACKAGE, "version": d.PIN,
             "path": os.path.join(work_dir, "clients", d.name, "bin", d.EXECUTABLE)}
            for n, d in serving_client.DRIVERS.items() if n in names and not given.get(GIVEN_CLIENT.get(n, ""))]


def cluster_nodes(checks: list[HostCheck]) -> dict[str, list[str]]:
    """{cluster: its hosts in the inventory's order (rank 0 first)} from each host's sparkfleet_cluster."""
    out: dict[str, list[str]] = {}
    for check in checks:
        name = (check.knobs.get("cluster") or {}).get("name")
        if name:
            out.setdefault(str(name), []).append(check.host)
    return out


def place_cluster_runs(runs: list[dict[str, Any]], host: str,
                       clusters: dict[str, list[str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the host's own runs, its multi-node runs): a run of a workload with a ``cluster`` belongs to the cluster's
    rank 0 only, with ``cluster`` {name, topology, nodes} (rank 0 first); the other hosts do not run it. A cluster
    the inventory lacks, or of one host, is refused naming the hosts that name it."""
    own, multi = [], []
    for run in runs:
        name = run["workload"].get("cluster")
        if not name:
            own.append(run)
            continue
        nodes = clusters.get(name, [])
        if len(nodes) < 2:
            raise PlanningError([f"workload {run['workload']['name']}: cluster {name!r} has "
                                 f"{'only ' + nodes[0] if nodes else 'no host'} in the inventory: give "
                                 f"sparkfleet_cluster={name} to the two or more hosts that serve together"],
                                "campaign.workloads")
        if host == nodes[0]:
            multi.append({**run, "cluster": {"name": name, "nodes": nodes,
                                             "topology": serving.topology(run["workload"])}})
    return own, multi


def endpoint_hosts(campaign: dict[str, Any], checks: list[HostCheck]) -> dict[str, str]:
    """{workload: the one host that runs it} for each unmanaged server's workload (issue 37) whose endpoint is not on
    loopback: every host running its own client against one server at its own pace would load it together and
    measure each other. The inventory host the URL names (by address or name) runs it, so that its state control
    and attestation cover the server, with the client beside it as for a server sparkfleet starts; an endpoint
    outside the inventory is measured from the first host. A loopback endpoint is each host's own server: every
    host runs it."""
    out = {}
    for workload in campaign["workloads"]:
        if serving.managed(workload) or not isinstance(workload.get("endpoint"), dict):
            continue
        name = (urllib.parse.urlsplit(str(workload["endpoint"].get("url"))).hostname or "").lower()
        if name == "localhost" or _is_loopback(name):
            continue
        named = [c.host for c in checks if name in (c.address.lower(), c.host.lower())]
        out[workload["name"]] = named[0] if named else checks[0].host
    return out


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def kept_names(campaign: dict[str, Any]) -> list[str]:
    """The campaign ids whose kept configuration decides a resume: the campaign's own, and the id it would
    get with ``sparkfleet_campaign_on_change=new``."""
    return [campaign["name"], resume.new_campaign_name(campaign["name"], campaign["config_hash"])]


@dataclass(frozen=True)
class HostPlan:
    """One host's part of the plan, as the matrix role passes it on."""

    host: str
    runs: list[dict[str, Any]]
    async_s: int
    follow: dict[str, Any]
    needs_native: bool
    needs_container: bool
    summary: str
    #: :func:`host_settings` (paths, workload, image, rootfs, docker, gpu_state, preflight, ...), for the
    #: campaign actually run (a renamed one's results directory).
    knobs: dict[str, Any] = field(default_factory=dict)
    #: Serving runs are planned: the serving_client role installs the client unless sparkfleet_serving_client
    #: names one.
    needs_serving: bool = False
    #: The multi-node runs this host leads as its cluster's rank 0 (place_cluster_runs): roles/matrix cluster_run.
    cluster_runs: list[dict[str, Any]] = field(default_factory=list)
    #: The host belongs to a cluster the campaign serves on: it keeps its state and lease after its own runs, for
    #: the multi-node runs of matrix.yml's second play, and is restored there.
    cluster_duty: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**self.knobs, "host": self.host, "runs": self.runs, "total": len(self.runs),
                "async_s": self.async_s, "follow": self.follow, "needs_native": self.needs_native,
                "needs_container": self.needs_container, "needs_serving": self.needs_serving,
                "summary": self.summary, "cluster_runs": self.cluster_runs, "cluster_duty": self.cluster_duty,
                "restore_after_own_runs": not self.cluster_duty}


@dataclass
class FleetPlan:
    campaign: dict[str, Any]
    results_dir: str
    hosts: dict[str, HostPlan]
    renamed_from: str | None = None

    def document(self, controller: dict[str, Any]) -> dict[str, Any]:
        """campaign.json: resolved matrix, config hash, order seed, every host's planned runs, the controller; and
        ``acknowledge_host_differences: true`` when every host's plan acknowledges firmware/driver differences."""
        c = self.campaign
        doc = {"campaign": c["name"], "config_hash": c["config_hash"], "order": c["order"], "seed": c["seed"],
               "resolved": c,
               "hosts": {h: {"planned": len(p.runs), "run_ids": [r["run_id"] for r in p.runs]}
                         for h, p in self.hosts.items()},
               "controller": controller}
        # The report reads it (sparkfleet/hostcheck.py acknowledged_in); written only when true, so the campaign.json
        # of every other campaign stays byte for byte what it was.
        if self.hosts and all((p.knobs.get("reproducibility") or {}).get("acknowledge_host_differences") is True
                              for p in self.hosts.values()):
            doc["acknowledge_host_differences"] = True
        return doc

    def to_dict(self) -> dict[str, Any]:
        return {"campaign": self.campaign, "results_dir": self.results_dir, "renamed_from": self.renamed_from,
                "hosts": {h: p.to_dict() for h, p in self.hosts.items()}}


def _same_campaign(checks: list[HostCheck]) -> dict[str, Any]:
    by_hash: dict[str, list[str]] = {}
    for check in checks:
        by_hash.setdefault(check.campaign["config_hash"], []).append(check.host)
    if len(by_hash) > 1:
        name = {c.host: c.campaign["name"] for c in checks}
        groups = "; ".join(f"{', '.join(hosts)}: campaign {name[hosts[0]]} ({digest})"
                           for digest, hosts in by_hash.items())
        raise PlanningError([f"the hosts were given different campaigns ({groups}); one bench.yml run measures "
                             "one campaign: give every host the same sparkfleet_campaign (e.g. with -e @file)"],
                            "sparkfleet_campaign")
    return checks[0].campaign


def _refusal(campaign: dict[str, Any], checks: list[HostCheck], controller_kept: dict[str, Any] | None,
             controller_where: str) -> str | None:
    """Why ``campaign`` must not resume the results kept under its name, or None. The controller's copy is
    asked first, then each host's (a host keeps its own: the controller's may be gone)."""
    now = {"config_hash": campaign["config_hash"], "resolved": campaign}
    if controller_kept is not None and not resume.same_measurement(controller_kept, now):
        return resume.refusal(campaign["name"], controller_where, controller_kept, now)
    for check in checks:
        kept = check.kept.get(campaign["name"])
        if isinstance(kept, dict) and not resume.same_measurement(kept, now):
            return f"{check.host}: " + resume.refusal(campaign["name"], "on this host", kept, now)
    return None


def decide_resume(campaign: dict[str, Any], checks: list[HostCheck], read_controller_kept, results_dir: str,
                  on_change: str) -> tuple[dict[str, Any], str | None]:
    """(the campaign to run, the name it was renamed from or None). Unchanged, or new: the campaign itself.
    Changed: refused naming what changed, or with ``on_change == "new"`` renamed ``<name>-<hash8>`` (which
    is refused in turn if that id holds yet another configuration). ``read_controller_kept(name)``: the
    controller's kept campaign.json of ``name`` or None."""
    if on_change not in resume.ON_CHANGE:
        raise PlanningError([f"{on_change!r} is not one of {', '.join(resume.ON_CHANGE)}"],
                            "sparkfleet_campaign_on_change")

    def where(name: str) -> str:
        return os.path.join(results_dir, name, "campaign.json")

    problem = _refusal(campaign, checks, read_controller_kept(campaign["name"]), where(campaign["name"]))
    if problem is None:
        return campaign, None
    if on_change != "new":
        raise PlanningError([problem], "sparkfleet_campaign")
    renamed = {**campaign, "name": resume.new_campaign_name(campaign["name"], campaign["config_hash"])}
    renamed["config_hash"] = config_hash(renamed)
    again = _refusal(renamed, checks, read_controller_kept(renamed["name"]), where(renamed["name"]))
    if again is not None:
        raise PlanningError([again], "sparkfleet_campaign")
    return renamed, campaign["name"]


def kept_reader(results_dir: str):
    """name -> the controller's campaign.json of that campaign under ``results_dir`` (None: none, or one
    without a configuration to compare, such as an imported study's)."""
    def read(name: str) -> dict[str, Any] | None:
        path = os.path.join(results_dir, name, CAMPAIGN_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PlanningError([f"cannot read the campaign kept there ({exc}); move it aside"], path) from None
        return data if isinstance(data, dict) and "config_hash" in data else None
    return read


def write_campaign_file(fleet: FleetPlan, controller: dict[str, Any], check_mode: bool = False) -> tuple[str, bool]:
    """(path, changed): ``campaign.json`` written atomically unless it already holds exactly this document."""
    path = os.path.join(fleet.results_dir, fleet.campaign["name"], CAMPAIGN_FILE)
    text = json.dumps(fleet.document(controller), indent=4, sort_keys=True) + "\n"
    changed, _ = textfile.write_text_if_changed(path, text, check_mode=check_mode)
    return path, changed


def plan_fleet(checks: list[HostCheck], results_dir: str | None, cwd: str, on_change: str = "refuse",
               check_mode: bool = False) -> FleetPlan:
    """Step 2, once for the fleet: one campaign, one resume decision, each host's plan."""
    if not checks:
        raise PlanningError(["no host to plan for"], "campaign")
    campaign = _same_campaign(checks)
    # sparkfleet_results_dir, else the campaign's results_dir; a relative one is relative to cwd
    out_dir = os.path.join(cwd, results_dir or campaign["results_dir"])
    campaign, renamed_from = decide_resume(campaign, checks, kept_reader(out_dir), out_dir, on_change)
    kinds = {e["kind"] for e in campaign["environments"]}
    clusters = cluster_nodes(checks)
    measured_from = endpoint_hosts(campaign, checks)
    hosts = {}
    for check in checks:
        planned = [run.to_dict() for run in plan(campaign, check.host, check.settings)]
        planned = [r for r in planned if measured_from.get(r["workload"]["name"], check.host) == check.host]
        runs, cluster_runs = place_cluster_runs(planned, check.host, clusters)
        # Ansible's async limit: twice (a job left by a killed controller may run first) each run's timeout and
        # longest cooldown, plus slack. Check mode runs the task in the foreground.
        limit = int(2 * (sum(estimate.upper_s_per_run(campaign, r["workload"]) + ASYNC_SLACK_PER_RUN_S for r in runs)
                         + ASYNC_SLACK_S))
        async_s = 0 if check_mode else limit
        for run in cluster_runs:  # each its own bench_run job (cluster_runs.yml), with the same margins
            run["async_s"] = 0 if check_mode else int(2 * (estimate.upper_s_per_run(campaign, run["workload"])
                                                           + ASYNC_SLACK_PER_RUN_S) + ASYNC_SLACK_S)
        report_after_s = check.settings["sparkfleet_report_after_s"]
        follow = {"poll_interval_s": check.settings["sparkfleet_poll_interval_s"], "report_after_s": report_after_s,
                  # until-retries of bench_follow: one return per finished run (twice, for a resumed job's
                  # skipped runs), one per report interval while nothing finishes, and slack
                  "retries": len(runs) * 2 + int(limit / max(float(report_after_s), 0.1)) + 10}
        summary = (f"campaign {campaign['name']} ({campaign['config_hash']}): {len(runs)} runs planned on "
                   f"{check.host}" + (f" and {len(cluster_runs)} multi-node runs it leads" if cluster_runs else "")
                   + f", order {campaign['order']}"
                   + (f" (renamed from {renamed_from}: its configuration changed)" if renamed_from else "")
                   + f"; {estimate.estimate_text(campaign)}")
        knobs = json.loads(json.dumps(check.knobs))
        if knobs.get("paths"):
            root = knobs["paths"]["results_root"]
            knobs["campaign"] = campaign["name"]
            knobs["paths"]["results_dir"] = os.path.join(root, campaign["name"], check.host)
        needs_serving = any(serving.is_serving(w) for w in campaign["workloads"])
        if knobs.get("serving") is not None:  # the clients the serving_client role installs (none given)
            knobs["serving"]["install"] = serving_clients(campaign["workloads"], knobs["serving"],
                                                          knobs["paths"]["work_dir"])
        hosts[check.host] = HostPlan(check.host, runs, async_s, follow, "native" in kinds, "container" in kinds,
                                     summary, knobs, needs_serving, cluster_runs,
                                     any(check.host in clusters.get(w.get("cluster") or "", [])
                                         for w in campaign["workloads"]))
    return FleetPlan(campaign, out_dir, hosts, renamed_from)
