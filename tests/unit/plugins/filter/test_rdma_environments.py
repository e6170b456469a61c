"""The rdma_environments filter: the environments whose RDMA the pair preflight checks on a node, a container's
docker flags resolved as its runs get them, and none for a cluster whose runs do not go over NCCL."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.filter.cluster import FilterModule, rdma_environments

DOCKER = {"flags": ["--gpus", "all", "--ulimit", "memlock=-1", "--device=/dev/infiniband"],
          "variants": {"study": {}, "no-rdma": {"remove_flags": ["--device=/dev/infiniband"]}}, "variant": "study"}
ENVIRONMENTS = [{"name": "bare", "kind": "bare"}, {"name": "chroot", "kind": "native"},
                {"name": "ngc", "kind": "container", "docker_flags": None, "variant": "no-rdma"},
                {"name": "own", "kind": "container", "docker_flags": ["--privileged"]}]


def _campaign(engine: str, topology: str, cluster: str = "pair") -> dict:
    return {"environments": ENVIRONMENTS,
            "workloads": [{"name": "w", "engine": engine, "topology": topology, "cluster": cluster}]}


def test_each_container_and_native_environment_with_its_resolved_flags():
    assert rdma_environments(_campaign("vllm", "tensor"), "pair", DOCKER) == [
        {"name": "chroot", "kind": "native", "docker_flags": None},
        {"name": "ngc", "kind": "container", "docker_flags": ["--gpus", "all", "--ulimit", "memlock=-1"]},
        {"name": "own", "kind": "container", "docker_flags": ["--privileged"]}]
    assert FilterModule().filters()["rdma_environments"] is rdma_environments


def test_none_for_tcp_layers_replicas_or_another_cluster():
    assert rdma_environments(_campaign("llama.cpp", "layers"), "pair", DOCKER) == []
    assert rdma_environments(_campaign("vllm", "replicas"), "pair", DOCKER) == []
    assert rdma_environments(_campaign("vllm", "tensor", cluster="other"), "pair", DOCKER) == []


def test_nccl_environments_plans_the_in_image_test_from_every_node_s_rdma_check():
    from ansible_collections.sparkfleet.bench.plugins.filter.cluster import nccl_environments

    environments = rdma_environments(_campaign("vllm", "tensor"), "pair", DOCKER)
    seen = {"environments": [{"environment": "own", "kind": "container", "judged": True, "pass": True},
                             {"environment": "ngc", "kind": "container", "judged": True, "pass": False}]}
    planned = {e["name"]: e for e in nccl_environments(environments, [seen, seen])}
    assert planned["own"]["run"] and planned["own"]["docker_flags"] == ["--privileged"]
    assert not planned["ngc"]["run"] and not planned["chroot"]["run"]
    assert FilterModule().filters()["nccl_environments"] is nccl_environments
