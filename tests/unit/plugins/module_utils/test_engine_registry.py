"""A built-in engine is one entry of serving.ENGINES (issue 34: one home per concept): the campaign's checks, the
estimate, the planning and the host's launch, version command and KV parser all read that table, so an engine
registered there (here with monkeypatch) is known to every layer at once."""

from __future__ import annotations

import string

import pytest

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.engines import serving
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.serving_kv import (
    KV_LOGS,
    parse_kv,
)
from ansible_collections.sparkfleet.bench.plugins.plugin_utils import estimate, planning, settings
from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import CampaignError, resolve

MODEL = {"name": "qwen", "path": "/var/lib/sparkfleet/models/Qwen3-8B"}
PROFILE = {"depth": [0], "concurrency": [1, 4], "pp": [512], "tg": [64]}


def _fake_argv(workload: dict, model: dict, port: int, served: str, extra: list) -> list:
    return ["fake-server", "--model", str(model["path"]), "--port", str(port), "--name", served] + extra


@pytest.fixture
def fake_engines(monkeypatch):
    monkeypatch.setitem(serving.ENGINES, "fake-serve", serving.serving_engine(
        _fake_argv, port=9000, kv_log="vllm", owns=((("--port",), serving.SETS_PORT),), abbrev=False,
        version=(["fake-server", "--version"], "fake-server --version"), start_s=42.0))
    monkeypatch.setitem(serving.ENGINES, "fake-job", serving.job_engine(cpu=True, run_s=7.0))


def campaign(*workloads, **over) -> dict:
    return resolve({"name": "c", "models": [MODEL], "environments": ["native"], "iterations": 1,
                    "workloads": list(workloads), **over})


def test_a_new_serving_engine_is_one_entry(fake_engines):
    c = campaign({"name": "w", "engine": "fake-serve", "profile": PROFILE})
    workload = c["workloads"][0]
    assert serving.is_serving(workload) and workload["runs"] == 3  # a serving workload, with the serving defaults
    assert planning.gpu_engines(c) == ["fake-serve"]
    vllm = {**workload, "engine": "vllm"}
    assert estimate.serving_run_s(workload) - estimate.serving_run_s(vllm) == pytest.approx(42.0 - 300.0)
    assert serving.server_argv(workload, MODEL) == ["fake-server", "--model", MODEL["path"], "--port", "9000",
                                                    "--name", "qwen"]
    assert serving.ready_url(workload) == "http://127.0.0.1:9000/health"
    assert serving.version_command(workload) == (["fake-server", "--version"], "fake-server --version")
    assert serving.kv_log(workload) == "vllm" and parse_kv(serving.kv_log(workload), "")["engine"] == "vllm"
    assert [field for field, _ in serving.overriding_args({**workload, "server_args": ["--port", "1"]})] == [
        "server_args"]
    crossed = campaign({"name": "x", "profile": PROFILE}, factors={"engine": ["fake-serve", "vllm"]})
    assert [w["engine"] for w in crossed["workloads"]] == ["fake-serve", "vllm"]
    with pytest.raises(CampaignError) as err:
        campaign({"name": "w", "engine": "llama.cpp", "profile": PROFILE},
                 engines={"Fake-Serve": {"command": ["x", "--port", "{port}"]}})
    assert any("would shadow the built-in engine 'fake-serve'" in p for p in err.value.problems)


def test_a_new_job_engine_is_one_entry(fake_engines):
    c = campaign({"name": "j", "engine": "fake-job"})
    assert not serving.is_serving(c["workloads"][0]) and planning.gpu_engines(c) == []
    assert estimate.nominal_run_s("fake-job") == 7.0 and "fake-job 7 s" in estimate.estimate_text(c)
    with pytest.raises(CampaignError) as err:
        campaign({"name": "j", "engine": "fake-job", "runs": 2})
    assert err.value.problems == ["campaign.workloads[0].runs: only a serving workload (llama.cpp, vllm, sglang, "
                                  "trtllm-serve, external, fake-serve) takes it, not engine fake-job"]


def test_every_built_in_server_has_what_the_layers_read():
    assert settings.ENGINES == serving.engine_names() == (*settings.JOB_ENGINES, *settings.SERVING_ENGINES,
                                                          settings.EXTERNAL_ENGINE)
    assert serving.engine_names(serves=True, managed=False) == (settings.EXTERNAL_ENGINE,)  # issue 37: no argv
    for name in settings.SERVING_ENGINES:
        row = serving.ENGINES[name]
        assert row["kv_log"] in KV_LOGS and row["version"] and row["start_s"] > 0
        for topology, spec in (row["launcher"] or {}).items():  # spans nodes by its own runtime, per topology
            assert topology in serving.TOPOLOGIES and topology != "replicas"
            if spec["refused"]:  # the registry says why sparkfleet cannot launch it
                assert spec["worker"] is None and spec["head"] is None
                continue
            assert spec["head"]
            if spec["worker"] is None:  # nothing started on a worker: rank 0's head argv launches every rank
                assert serving.SERVER_ARGV in spec["head"] and spec["worker_port"] is spec["port"] is None
            else:
                assert spec["worker"] and 0 < spec["port"] < 65536
                assert spec["worker_port"] is None or 0 < spec["worker_port"] < 65536
            fields = {f for arg in (spec["worker"] or []) + spec["head"]
                      for _, f, _, _ in string.Formatter().parse(arg) if f}
            assert fields <= set(serving.LAUNCHER_PLACEHOLDERS) | {"server", "forwarded_env"}
    assert serving.launcher_engines() == ("llama.cpp", "vllm", "sglang", "trtllm-serve")
    assert serving.launcher_engines("layers") == ("llama.cpp",)
    assert serving.launcher_engines("tensor") == serving.launcher_engines("pipeline") == (
        "vllm", "sglang", "trtllm-serve")
    assert all(serving.ENGINES[name]["run_s"] > 0 for name in settings.JOB_ENGINES)


def test_the_topology_field_reads_the_registry():
    assert settings.WORKLOAD_BY_NAME["topology"].choices == serving.TOPOLOGIES == (
        "layers", "tensor", "pipeline", "replicas")
    assert "vllm, sglang" in settings.WORKLOAD_BY_NAME["cluster"].doc  # the engines launched across nodes
    # a cluster run without a topology gets its engine's first
    assert [serving.topology({"engine": e, "cluster": "pair"}) for e in ("llama.cpp", "vllm", "sglang")] == [
        "layers", "tensor", "tensor"]


def test_a_multi_node_run_by_topology():
    """layers: llama.cpp's RPC (tools/rpc/README.md), ggml-rpc-server on each worker, llama-server --rpc on rank 0;
    replicas: the engine's own server on each worker's address, rank 0's on loopback."""
    workload = {"name": "w", "engine": "llama.cpp", "profile": {"depth": [0], "concurrency": [1], "pp": [16],
                                                                "tg": [8]}, "cluster": "pair"}
    model = {"name": "m", "path": "/models/m.gguf"}
    assert serving.worker_spec(workload, model, "10.0.0.2") == {
        "argv": ["ggml-rpc-server", "--host", "10.0.0.2", "--port", "50052"], "port": 50052, "ready_url": None}
    head = serving.head_argv(workload, model, ["10.0.0.2", "10.0.0.3"])
    assert head[:1] == ["llama-server"] and head[-2:] == ["--rpc", "10.0.0.2:50052,10.0.0.3:50052"]
    assert [f for f, _ in serving.overriding_args({**workload, "server_args": ["--rpc", "x:1"]})] == ["server_args"]
    assert serving.overriding_args({**workload, "cluster": None, "server_args": ["--rpc", "x:1"]}) == []

    replicas = {**workload, "topology": "replicas"}
    spec = serving.worker_spec(replicas, model, "10.0.0.2")
    assert spec["argv"][spec["argv"].index("--host") + 1] == "10.0.0.2" and spec["port"] == 8080
    assert spec["ready_url"] == "http://10.0.0.2:8080/health"
    assert serving.head_argv(replicas, model, ["10.0.0.2"]) == serving.server_argv(replicas, model)
    assert serving.replica_urls(replicas, ["10.0.0.2"]) == ["http://127.0.0.1:8080", "http://10.0.0.2:8080"]
    # vLLM has no layers launcher (llama.cpp's RPC only): refused naming who has one; replicas takes any engine
    assert serving.cluster_problem({**workload, "engine": "vllm", "topology": "layers"}) == (
        "engine vllm cannot spread one model over several nodes as topology layers in sparkfleet (layers: "
        "llama.cpp; topology replicas takes any serving engine)")
    assert serving.cluster_problem({**replicas, "engine": "vllm"}) is None


def test_which_multi_node_runs_go_over_nccl():
    """NCCL's tensor and pipeline parallel runs need RDMA in their environment (checked at their start); llama.cpp's
    layers go over its RPC's TCP, replicas share nothing, a single-node workload spans nothing."""
    over = {(e, t): serving.over_nccl({"engine": e, "cluster": "pair", "topology": t})
            for e in ("vllm", "sglang", "trtllm-serve", "llama.cpp") for t in serving.TOPOLOGIES}
    assert {k for k, v in over.items() if v} == {(e, t) for e in ("vllm", "sglang", "trtllm-serve")
                                                 for t in ("tensor", "pipeline")}
    assert serving.over_nccl({"engine": "llama.cpp", "cluster": "pair"}) is False  # its default topology: layers
    assert serving.over_nccl({"engine": "vllm", "cluster": "pair"}) is True  # its default topology: tensor


PROFILE_1 = {"depth": [0], "concurrency": [1], "pp": [16], "tg": [8]}
HF_MODEL = {"name": "qwen", "path": "/models/Qwen3-8B"}
# The multi-node command lines, rank 0's (head) and rank 1's (worker) of a pair, rank 0 at 10.0.0.1, each flag
# checked against the engine's own source:
# - vLLM without Ray (spark-arena/sparkrun src/sparkrun/runtimes/vllm_distributed.py @0041b8f8: "--nnodes %d",
#   "--node-rank %d", "--master-addr %s", "--master-port %d", workers parts.append("--headless")); vllm-project/vllm
#   vllm/config/parallel.py @840e7972: master_addr, master_port: int = 29501, node_rank, nnodes ("for multi-node
#   distributed inference when distributed_executor_backend is mp"); vllm/engine/arg_utils.py's ParallelConfig
#   group: "--tensor-parallel-size", "-tp"; "--pipeline-parallel-size", "-pp"; "--master-addr"; "--master-port";
#   "--nnodes", "-n"; "--node-rank", "-r"; vllm/entrypoints/openai/cli_args.py @789340fb make_arg_parser:
#   "--headless", action="store_true"; vllm/entrypoints/cli/serve.py @00a5fdd2: headless, api_server_count 0,
#   "Run headless workers (for multi-node PP/TP)".
# - SGLang (sparkrun src/sparkrun/runtimes/sglang.py @0041b8f8: "--dist-init-addr %s:%d" % (head_ip, 25000),
#   "--nnodes %d", "--node-rank %d", "--tp-size"/"--pp-size"); sgl-project/sglang
#   docs/advanced_features/server_arguments.md @b36e8e19 (generated from python/sglang/srt/server_args.py):
#   "--tensor-parallel-size<br>--tp-size", "--pipeline-parallel-size<br>--pp-size", "--dist-init-addr sgl-dev-0:50000
#   --nnodes 2 --node-rank 0".
VLLM_SERVER = ["vllm", "serve", "/models/Qwen3-8B", "--host", "127.0.0.1", "--port", "8000", "--served-model-name",
               "qwen"]
SGLANG_SERVER = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-8B", "--host", "127.0.0.1",
                 "--port", "30000", "--served-model-name", "qwen"]
MULTI_NODE = {
    ("vllm", "tensor"): (
        VLLM_SERVER + ["--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                       "10.0.0.1", "--master-port", "29501"],
        VLLM_SERVER + ["--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                       "10.0.0.1", "--master-port", "29501", "--headless"]),
    ("vllm", "pipeline"): (
        VLLM_SERVER + ["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                       "10.0.0.1", "--master-port", "29501"],
        VLLM_SERVER + ["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                       "10.0.0.1", "--master-port", "29501", "--headless"]),
    ("sglang", "tensor"): (
        SGLANG_SERVER + ["--tp-size", "2", "--dist-init-addr", "10.0.0.1:25000", "--nnodes", "2", "--node-rank", "0"],
        SGLANG_SERVER + ["--tp-size", "2", "--dist-init-addr", "10.0.0.1:25000", "--nnodes", "2", "--node-rank", "1"]),
    ("sglang", "pipeline"): (
        SGLANG_SERVER + ["--pp-size", "2", "--dist-init-addr", "10.0.0.1:25000", "--nnodes", "2", "--node-rank", "0"],
        SGLANG_SERVER + ["--pp-size", "2", "--dist-init-addr", "10.0.0.1:25000", "--nnodes", "2", "--node-rank", "1"]),
}
#: The flags as the engines' parsers define them (quoted from the sources above).
SOURCE_FLAGS = {"vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--nnodes", "--node-rank",
                         "--master-addr", "--master-port", "--headless", "--host", "--port", "--served-model-name"},
                "sglang": {"--model-path", "--tp-size", "--pp-size", "--dist-init-addr", "--nnodes", "--node-rank",
                           "--host", "--port", "--served-model-name"}}


@pytest.mark.parametrize(("engine", "topology"), sorted(MULTI_NODE))
def test_a_multi_node_command_line_per_engine_and_topology(engine, topology):
    workload = {"name": "w", "engine": engine, "profile": PROFILE_1, "cluster": "pair", "topology": topology}
    head, worker = MULTI_NODE[engine, topology]
    assert serving.cluster_problem(workload) is None
    assert serving.head_argv(workload, HF_MODEL, ["10.0.0.2"], "10.0.0.1") == head
    # the worker: the engine's own server with the flags added; no port to probe (it waits for rank 0)
    assert serving.worker_spec(workload, HF_MODEL, "10.0.0.2", 1, 2, "10.0.0.1") == {
        "argv": worker, "port": None, "ready_url": None}
    assert {a for a in head + worker if a.startswith("--")} <= SOURCE_FLAGS[engine]
    # a third node: its rank, and every node counts it
    three = serving.worker_spec(workload, HF_MODEL, "10.0.0.3", 2, 3, "10.0.0.1")["argv"]
    assert three[three.index("--node-rank") + 1] == "2" and three[three.index("--nnodes") + 1] == "3"
    # the workload's server_args reach every node (before the multi-node flags)
    extra = serving.worker_spec({**workload, "server_args": ["--max-model-len", "4096"]}, HF_MODEL, "10.0.0.2", 1, 2,
                                "10.0.0.1")["argv"]
    assert extra == worker[:len(VLLM_SERVER if engine == "vllm" else SGLANG_SERVER)] + [
        "--max-model-len", "4096"] + worker[len(VLLM_SERVER if engine == "vllm" else SGLANG_SERVER):]
    # rank 0's address is what a worker cannot do without
    with pytest.raises(serving.ServingError, match="rank 0's address on the cluster's network is not known"):
        serving.worker_spec(workload, HF_MODEL, "10.0.0.2")


@pytest.mark.parametrize("args", [["--nnodes", "4"], ["--node-rank=1"], ["--tensor-parallel-size", "4"], ["-tp", "4"],
                                  ["--headless"], ["--master-addr", "x"], ["--master_port", "1"], ["-n", "3"]])
def test_vllm_server_args_cannot_set_the_multi_node_flags(args):
    workload = {"name": "w", "engine": "vllm", "profile": PROFILE_1, "cluster": "pair", "topology": "pipeline",
                "server_args": args}
    found = serving.overriding_args(workload)
    assert [f for f, _ in found] == ["server_args"]
    assert "which sparkfleet sets on the vllm server's command line" in found[0][1]
    assert serving.overriding_args({**workload, "cluster": None}) == []  # on one host they are the owner's


@pytest.mark.parametrize("args", [["--dist-init-addr", "h:1"], ["--nccl-init-addr", "h:1"], ["--nnodes", "2"],
                                  ["--node-rank", "1"], ["--tp", "2"], ["--pp-size", "2"]])
def test_sglang_server_args_cannot_set_the_multi_node_flags(args):
    workload = {"name": "w", "engine": "sglang", "profile": PROFILE_1, "cluster": "pair", "topology": "tensor",
                "server_args": args}
    assert [f for f, _ in serving.overriding_args(workload)] == ["server_args"]


# - TensorRT-LLM by mpirun (NVIDIA/dgx-spark-playbooks nvidia/trt-llm/README.md @0db7c141: `mpirun -x HF_TOKEN
#   trtllm-llmapi-launch trtllm-serve $MODEL --tp_size 2 ... --port 8000` on the primary node); NVIDIA/TensorRT-LLM
#   tensorrt_llm/commands/serve.py @00209af1: "--tensor_parallel_size", "--tp_size"; "--pipeline_parallel_size",
#   "--pp_size"; "--host"; "--port"; tensorrt_llm/llmapi/trtllm-llmapi-launch @020c89e6: the wrapped command runs on
#   rank 0 (OMPI_COMM_WORLD_RANK), the other ranks run the MGMN worker node.
TRTLLM_SERVER = ["trtllm-serve", "/models/Qwen3-8B", "--host", "127.0.0.1", "--port", "8000"]
TRTLLM_MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "2", "-H", "10.0.0.1:1,10.0.0.2:1"]


@pytest.mark.parametrize(("topology", "size_flag"), [("tensor", "--tp_size"), ("pipeline", "--pp_size")])
def test_trtllm_serve_across_nodes_is_one_mpirun_on_rank_0(topology, size_flag):
    workload = {"name": "w", "engine": "trtllm-serve", "profile": PROFILE_1, "cluster": "pair", "topology": topology}
    assert serving.cluster_problem(workload) is None
    # rank 0 wraps the server in mpirun; the run's variables reach every rank (-x NAME, their values mpirun's)
    assert serving.head_argv(workload, HF_MODEL, ["10.0.0.2"], "10.0.0.1", ["NCCL_IB_HCA", "HF_TOKEN"]) == (
        TRTLLM_MPIRUN + ["-x", "NCCL_IB_HCA", "-x", "HF_TOKEN", "trtllm-llmapi-launch"] + TRTLLM_SERVER
        + [size_flag, "2"])
    # a worker starts nothing of its own: mpirun reaches it over SSH (checked on rank 0 first: cluster/rsh.py)
    assert serving.worker_spec(workload, HF_MODEL, "10.0.0.2", 1, 2, "10.0.0.1") == {
        "argv": None, "port": None, "ready_url": None}
    assert serving.starts_workers_from_rank_0(workload)
    assert not serving.starts_workers_from_rank_0({**workload, "engine": "vllm"})
    assert not serving.starts_workers_from_rank_0({**workload, "topology": "replicas"})
    # three nodes, rank 0 first (its slot holds rank 0, the server); the server_args before the size flag
    three = serving.head_argv({**workload, "server_args": ["--backend", "pytorch"]}, HF_MODEL,
                              ["10.0.0.2", "10.0.0.3"], "10.0.0.1")
    assert three == ["mpirun", "--allow-run-as-root", "-np", "3", "-H", "10.0.0.1:1,10.0.0.2:1,10.0.0.3:1",
                     "trtllm-llmapi-launch"] + TRTLLM_SERVER + ["--backend", "pytorch", size_flag, "3"]
    with pytest.raises(serving.ServingError, match="rank 0's address on the cluster's network is not known"):
        serving.head_argv(workload, HF_MODEL, ["10.0.0.2"])
    assert "trtllm-serve" in serving.launcher_engines(topology)


@pytest.mark.parametrize("args", [["--tp_size", "4"], ["--tensor_parallel_size=2"], ["--pp_size", "2"],
                                  ["--pipeline_parallel_size", "2"]])
def test_trtllm_serve_server_args_cannot_set_the_parallel_size_on_a_cluster(args):
    workload = {"name": "w", "engine": "trtllm-serve", "profile": PROFILE_1, "cluster": "pair", "topology": "tensor",
                "server_args": args}
    found = serving.overriding_args(workload)
    assert [f for f, _ in found] == ["server_args"] and "the workload's topology on its cluster" in found[0][1]
    assert serving.overriding_args({**workload, "cluster": None}) == []  # on one host they are the owner's
    # click takes exact names only: no abbreviation is refused as one
    assert serving.overriding_args({**workload, "server_args": ["--tp", "2"]}) == []


def test_an_engine_refuses_a_topology_it_has_no_launcher_for():
    assert serving.cluster_problem({"engine": "llama.cpp", "cluster": "pair", "topology": "tensor"}) == (
        "engine llama.cpp cannot spread one model over several nodes as topology tensor in sparkfleet (tensor: "
        "vllm, sglang, trtllm-serve; topology replicas takes any serving engine)")
    assert serving.cluster_problem({"engine": "sglang", "cluster": "pair", "topology": "layers"}).startswith(
        "engine sglang cannot spread one model over several nodes as topology layers")
    assert "topology 'ring' is not one of layers, tensor, pipeline, replicas" in serving.cluster_problem(
        {"engine": "vllm", "cluster": "pair", "topology": "ring"})
