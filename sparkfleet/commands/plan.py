"""`sparkfleet plan CAMPAIGN.yml`: every run's exact command lines, native and container, offline.

What a careful owner reads before a 14-hour campaign: for each planned run (in the host's order), each step
as the host would execute it - the chroot argv of a native run, the ``docker run`` argv of a container run,
``env -C`` of a bare one - built by the same functions bench_run uses (sparkfleet_host.run.runexec, trtllm_cli,
run_launch.run_env for the environment), secrets redacted. Nothing is touched: no host, no image, no network.
What only the host knows (the image's ID, Entrypoint and Env, recorded when the rootfs is extracted) is shown
as a placeholder and said so in the header; the TensorRT-LLM version is --trtllm-version, else the one the
image tag names, and the trtllm commands are built against the captured trtllm-bench surface that covers it (else
the nearest below it, the newest past every capture; trtllm_cli.resolve says which). A serving run shows its
server (in its environment) and its client's command for the first point of the run's order, with the points per
run, the requests and a rough estimate of its duration.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from typing import Any

import yaml

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import (
    serving,
    serving_client,
    trtllm_cli,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.rootfs.chroot import MARKER
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.run import run_launch, runexec
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import engine_model, load, plan
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.errors import UsageError

HOST = "HOST"
ENTRYPOINT = "<image-entrypoint>"  # the image's Entrypoint, recorded in the rootfs marker on the host
CORPUS_URL = "http://127.0.0.1:<port>/corpus.txt"  # the loopback server of sparkfleet_serving_corpus (a free port)
HOST_PATH = "<the host's PATH>"  # a bare run's PATH: the login shell's, the module's, ~/.local/bin, the system dirs


def register(sub) -> None:
    p = sub.add_parser("plan", help="print every run's exact command lines (native and container), offline")
    p.add_argument("campaign", metavar="CAMPAIGN.yml")
    p.add_argument("--trtllm-version", metavar="V",
                   help="TensorRT-LLM version whose captured trtllm-bench surface the trtllm commands are built "
                        "against (default: the image tag's); on the host the image's own CLI decides")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_host_options(p)
    p.add_argument("--host", default=HOST, help=f"host name in the run ids and paths (default {HOST})")
    p.set_defaults(func=run)


def add_host_options(p) -> None:
    """--vars and -e: the host's sparkfleet_* settings (plan and validate)."""
    p.add_argument("--vars", metavar="FILE.yml", action="append", default=[],
                   help="sparkfleet_* settings of the host (a group_vars/host_vars file); repeatable")
    p.add_argument("-e", "--extra-var", metavar="NAME=VALUE", action="append", default=[],
                   help="one sparkfleet_* setting (VALUE read as YAML); repeatable, wins over --vars")


def host_variables(args, host: str = HOST) -> dict[str, Any]:
    """The sparkfleet_* variables of --vars and -e, checked as the validate stage checks a host's (UsageError)."""
    variables: dict[str, Any] = {}
    for path in args.vars:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise UsageError(f"{path}: must be a mapping of sparkfleet_* settings")
        variables.update({k: v for k, v in data.items() if str(k).startswith("sparkfleet_")})
    for item in args.extra_var:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("sparkfleet_"):
            raise UsageError(f"-e {item!r}: give sparkfleet_NAME=VALUE")
        variables[name] = yaml.safe_load(value)
    errors, _ = settings.setting_problems(host, variables)
    if errors:
        raise UsageError("; ".join(errors))
    return variables


def _settings(args, campaign: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sparkfleet_* variables given, the host's plan settings made of them as validate.yml makes them:
    paths, image, workload env, ...; planning.host_settings)."""
    variables = host_variables(args, args.host)
    return variables, planning.host_settings(args.host, variables, campaign)


def _trtllm(args, host: dict[str, Any]) -> tuple[dict[str, Any], str]:
    if args.trtllm_version:
        version, how = args.trtllm_version, "--trtllm-version"
    else:
        version, how = trtllm_cli.version_from_image(host["image"]["ref"])
        if version is None:
            raise UsageError(f"{how}: give --trtllm-version")
    detection = {"version": version, "unknown_version": host["workload"]["trtllm_unknown_version"],
                 "hf_cache_dir": host["paths"]["hf_cache_dir"]}
    try:
        resolved = trtllm_cli.resolve(detection)
    except trtllm_cli.TrtllmCliError as exc:
        raise UsageError(str(exc)) from None
    return {**detection, "resolved": resolved}, how


def _placeholder_rootfs(tmp: str) -> str:
    """A rootfs directory for runexec.native_command: its marker records an Entrypoint placeholder."""
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
        json.dump({"digest": "sha256:offline", "schema": 2, "entrypoint": [ENTRYPOINT], "cmd": [], "env": [],
                   "working_dir": "", "user": ""}, fh)
    return tmp


def _client_path(host: dict[str, Any], driver) -> str:
    """The serving client on the host: llama-benchy's sparkfleet_serving_client, else the one the serving_client
    role installs under the work directory (roles/serving_client: <work_dir>/clients/<name>/bin/<executable>)."""
    given = host["serving"].get({"llama-benchy": "client", "aiperf": "aiperf"}.get(driver.name, ""))
    return given or f"{host['paths']['work_dir']}/clients/{driver.name}/bin/{driver.EXECUTABLE}"


def _client_step(run, host: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """The client's command for the run's first point (of its seeded shuffled order), as the Launcher runs it
    on the host (run_launch.Launcher.run_points); the other points differ in --pp/--tg/--depth/--concurrency."""
    workload, model = run.workload, run.model
    points, seed = serving.shuffled_points(workload, run.run_id)
    driver = serving_client.driver(workload.get("client"))
    first = points[0]
    argv = driver.point_argv(_client_path(host, driver), first, serving.base_url(workload),
                             serving.served_name(workload, model), serving.tokenizer_shown(model),
                             int(workload["runs"]), bool(workload["prefix_caching"]),
                             CORPUS_URL if host["serving"]["corpus"] else None,
                             f"{run_dir}/points/{driver.raw_name(first['point'])}", workload.get("client_args"),
                             skip_coherence=bool(model.get("random_weights")), seed=seed)
    cmd = runexec.redact([run_launch.ENV_BIN, "-C", run_dir]
                         + [f"{k}={v}" for k, v in serving_client.client_env(run_dir, driver).items()] + argv)
    return {"name": "client", "argv": cmd, "stdout": None, "line": shlex.join(cmd),
            "points": len(points), "point_order_seed": seed, "first_point": first["point"]}


def _commands(campaign, host, trtllm, runs, rootfs_tmp):
    paths = host["paths"]
    results_root, models_dir = paths["results_root"], paths["models_dir"]
    rootfs_shown = f"{paths['work_dir']}/rootfs/<sha256-image-id>"
    out = []
    for run in runs:
        run_dir = f"{paths['results_dir']}/runs/{run.run_id}"
        kind = run.environment.get("kind", "native")
        env = run_launch.run_env(host["workload"]["env"], run.workload, run.environment, trtllm,
                                 results_root=results_root)
        try:
            steps = runexec.engine_steps(run.workload.get("engine", "trtllm"), run.workload, run.model, run_dir,
                                         f"{results_root}/{runexec.WORKLOADS_SUBDIR}", trtllm=trtllm,
                                         hf_cache=bool(trtllm.get("hf_cache_dir")))
        except runexec.RunSetupError as exc:
            out.append({"run_id": run.run_id, "environment": run.environment["name"], "kind": kind,
                        "warmup": run.warmup, "error": f"setup: {exc}", "steps": []})
            continue
        shown = []
        for name, argv, stdout in steps:
            if kind == "bare":  # the host's PATH is known there only
                cmd = runexec.bare_command(argv, env, run_dir, path=HOST_PATH, check=False)
            elif kind == "native":
                cmd = runexec.native_command(rootfs_tmp, {}, argv, env, run_dir)
                cmd = [rootfs_shown if a == rootfs_tmp else a for a in cmd]
            else:
                binds = [(results_root, results_root, False), (models_dir, models_dir, True)]
                if trtllm.get("hf_cache_dir") and run.workload.get("engine", "trtllm") == "trtllm":
                    binds.append((trtllm["hf_cache_dir"], trtllm_cli.HF_CACHE_TARGET, False))
                labels = {"sparkfleet.run_id": run.run_id, "sparkfleet.campaign": campaign["name"],
                          "sparkfleet.step": name}
                flags = run.environment.get("docker_flags") or []
                if serving.is_serving(run.workload):  # the client on the host reaches the server's loopback
                    flags, _ = serving.with_host_network(flags)
                cmd = runexec.container_command("docker", ("sf-" + run.run_id)[:120], host["image"]["ref"],
                                                flags, argv, env, run_dir, binds, labels)
            cmd = runexec.redact(cmd)
            line = shlex.join(cmd) + (f" > {shlex.quote(stdout)}" if stdout else "")
            shown.append({"name": name, "argv": cmd, "stdout": stdout, "line": line})
        row = {"run_id": run.run_id, "environment": run.environment["name"], "kind": kind,
               "warmup": run.warmup, "timeout_s": run.timeout_s, "steps": shown}
        if serving.is_serving(run.workload):
            shown.append(_client_step(run, host, run_dir))
            row["serving"] = estimate.serving_summary(campaign, run.workload)
        out.append(row)
    return out


#: Where a serving run's server runs, per environment kind (the plan's header names the kinds the campaign uses).
_SERVER_WHERE = {"bare": "bare: on the host", "native": "native: in the chroot, on the host's network",
                 "container": "container: on the host's network"}


def _where_servers(campaign: dict[str, Any]) -> str:
    kinds = dict.fromkeys(e.get("kind") or e.get("name") for e in campaign["environments"])
    return "; ".join(_SERVER_WHERE.get(str(k), str(k)) for k in kinds)


def _serving_notes(campaign: dict[str, Any], host: dict[str, Any]) -> list[str]:
    """What the header says of the serving workloads: each one's points, requests and estimate; the client."""
    loads = [w for w in campaign["workloads"] if serving.is_serving(w)]
    if not loads:
        return []
    corpus = host["serving"]["corpus"]
    shipped = os.path.normpath(settings.DEFAULT_SERVING_CORPUS.replace("{{ sparkfleet_work_dir }}",
                                                                       host["paths"]["work_dir"]))
    notes = [f"serving {estimate.serving_text(campaign, w)}" for w in loads] + [
        f"serving: the server runs in the run's environment ({_where_servers(campaign)}), the client on the host: "
        + ", ".join(_client_path(host, d) for d in dict.fromkeys(serving_client.driver(w.get("client")) for w in loads))
        + ("" if host["serving"]["client"] else " (installed by the serving_client role)")
        + "; the client step shows the first point of the run's shuffled order, once per point on the host; prompts "
        + f"from {corpus}"
        + (" (the collection's public-domain corpus, installed by the serving_client role)" if corpus == shipped
           else " (sparkfleet_serving_corpus)") + f", served at {CORPUS_URL}; nothing is downloaded"]
    shown = {serving.tokenizer_shown(engine_model(m, w)) for m in campaign["models"] for w in loads}
    gguf_tokenizers = sorted(t for t in shown if t.startswith("<tokenizer of "))
    if gguf_tokenizers:
        notes.append(f"serving: {', '.join(gguf_tokenizers)}: on the host, the tokenizer.json beside the GGUF when its "
                     f"vocabulary is the GGUF's, else one derived from the GGUF's own vocabulary, once, under "
                     f"{host['paths']['results_root']}/{serving.TOKENIZER_CACHE}/ (give the model's tokenizer to "
                     f"choose it)")
    randoms = [m["name"] for m in campaign["models"] if m.get("random_weights")]
    if randoms:
        notes.append(f"serving: random_weights ({', '.join(randoms)}): the client skips its coherence check "
                     f"(--skip-coherence)")
    return notes


def run(args) -> int:
    campaign = load(args.campaign)  # CampaignError -> one clear message per problem, exit 2
    variables, host = _settings(args, campaign)
    has_trtllm = any(w.get("engine") == "trtllm" for w in campaign["workloads"])
    trtllm, how = _trtllm(args, host) if has_trtllm else ({}, "")
    try:
        runs = plan(campaign, host=args.host, host_settings=variables)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="sparkfleet-plan-") as tmp:
        rows = _commands(campaign, host, {k: v for k, v in trtllm.items() if k != "resolved"}, runs,
                         _placeholder_rootfs(os.path.join(tmp, "rootfs")))
    image = host["image"]["ref"]
    # Only what the campaign uses: a native environment runs the image's rootfs, a container the image; a bare
    # environment neither (a bare-only campaign names no image).
    kinds = {e.get("kind", "native") for e in campaign["environments"]}
    notes = [f"offline: nothing was touched; host {args.host!r}, work dir {host['paths']['work_dir']}"]
    if "native" in kinds:
        notes.append(f"native: {ENTRYPOINT} stands for the image's Entrypoint and <sha256-image-id> for its ID, both "
                     f"recorded on the host when the rootfs is extracted from image {image} (unknown offline); the "
                     f"image's own Env (Config.Env) is added there too, and is not shown")
    if "container" in kinds:
        notes.append(f"container: runs image {image}"
                     + (" (on the host: the ID the native rootfs was extracted from)" if "native" in kinds else ""))
    notes += _serving_notes(campaign, host)
    resolved = trtllm.get("resolved")
    if resolved:
        maker = ("trtllm-bench prepare-dataset" if resolved["dataset"] == "subcommand"
                 else f"{resolved['script_path']} --stdout")
        notes.insert(0, f"TensorRT-LLM {resolved['version']} ({how}; {resolved['profile']} trtllm-bench surface): "
                        f"dataset by {maker}, LLM API options flag {resolved['config_flag']}; on the host the image's "
                        f"own trtllm-bench decides (engine_probe reads its click sources)")
        notes[1:1] = resolved["notes"]
        notes += resolved["warnings"]
        resolved = {**{k: v for k, v in resolved.items() if k != "programs"},
                    "surface_sha256": trtllm_cli.surface_digest(resolved["programs"])}
        hf_cache = trtllm.get("hf_cache_dir")
        notes.append(f"Hugging Face: cache {hf_cache} bound at {trtllm_cli.HF_CACHE_TARGET}" if hf_cache else
                     "Hugging Face: offline (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1); tokenizers from model paths")
    if args.json:
        loads = {w["name"]: estimate.serving_summary(campaign, w) for w in campaign["workloads"]
                 if serving.is_serving(w)}
        print(json.dumps({"campaign": campaign["name"], "config_hash": campaign["config_hash"], "host": args.host,
                          "trtllm": resolved, "notes": notes, "serving": loads, "runs": rows}, indent=2,
                         sort_keys=True))
        return 1 if any(r.get("error") for r in rows) else 0
    lines = [f"# sparkfleet plan: campaign {campaign['name']!r} (config hash {campaign['config_hash']}), "
             f"{len(rows)} runs per host, in the order host {args.host!r} runs them"]
    lines += [f"# {note}" for note in notes]
    for index, row in enumerate(rows, 1):
        lines.append(f"\n## {index}/{len(rows)} {row['run_id']} ({row['kind']}{', warm-up' if row['warmup'] else ''})")
        if row.get("serving"):
            info, client = row["serving"], row["steps"][-1]
            lines.append(f"# {info['points']} points per run, {info['requests']} requests, about "
                         f"{estimate.duration_text(info['estimated_s'])} (rough), timeout "
                         f"{estimate.duration_text(row['timeout_s'])}; client shown for point {client['first_point']}"
                         f" (order seed {client['point_order_seed']})")
        if row.get("error"):
            lines.append(f"!! {row['error']}")
        lines += [f"{step['name']}: {step['line']}" for step in row["steps"]]
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `sparkfleet plan ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if any(r.get("error") for r in rows) else 0
