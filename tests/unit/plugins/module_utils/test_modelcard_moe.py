"""A mixture of experts on the model card (issue 32): config.json's expert counts under the names the real models
use (gpt-oss: num_local_experts + num_experts_per_tok / experts_per_token; Qwen3-MoE: num_experts; DeepSeek V3:
n_routed_experts + n_shared_experts; Hunyuan: moe_topk per layer), and the routed experts' bytes read from real
safetensors headers by tensor name (shared experts and the router are not routed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _ansible_modules import host_util
from modeldirs import write_safetensors

modelcard = host_util("modelcard")

#: Each model family's MoE keys as its published config.json spells them, and what the card must read.
CONFIGS = [
    ({"model_type": "gpt_oss", "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4},
     (128, 4, None)),
    ({"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
     (128, 8, None)),
    ({"model_type": "deepseek_v3", "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1},
     (256, 8, 1)),
    ({"model_type": "hunyuan", "num_experts": 64, "moe_topk": [8, 8, 8]}, (64, 8, None)),
    ({"model_type": "qwen3_5_moe", "text_config": {"num_experts": 256, "num_experts_per_tok": 8}}, (256, 8, None)),
    ({"model_type": "llama"}, (None, None, None)),
]


def model_dir(root: Path, config: dict, tensors: dict[str, tuple[str, list[int]]]) -> str:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": ["X"], "hidden_size": 8, **config}))
    write_safetensors(root / "model.safetensors", tensors)
    return str(root)


@pytest.mark.parametrize(("config", "expected"), CONFIGS)
def test_the_cards_expert_counts(tmp_path: Path, config: dict, expected: tuple) -> None:
    card = modelcard.fingerprint(model_dir(tmp_path / "m", config, {"lm_head.weight": ("BF16", [4, 8])}))
    assert (card["moe_experts"], card["moe_experts_per_token"], card["moe_shared_experts"]) == expected


def test_the_routed_experts_bytes_by_tensor_name(tmp_path: Path) -> None:
    tensors = {
        "model.embed_tokens.weight": ("BF16", [16, 8]),  # 256 bytes
        "model.layers.0.mlp.router.weight": ("BF16", [4, 8]),  # 64: read for every token
        "model.layers.0.mlp.experts.gate_up_proj_blocks": ("F8_E4M3", [4, 16, 8]),  # 512: gpt-oss, one tensor
        "model.layers.1.mlp.experts.0.down_proj.weight": ("BF16", [8, 8]),  # 128: Qwen3 / DeepSeek, per expert
        "model.layers.1.mlp.shared_experts.down_proj.weight": ("BF16", [8, 8]),  # 128: shared, always read
        "model.layers.2.block_sparse_moe.experts.1.w1.weight": ("BF16", [4, 8]),  # 64: Mixtral
    }
    card = modelcard.fingerprint(model_dir(tmp_path / "m", {"num_local_experts": 4, "num_experts_per_tok": 2},
                                           tensors))
    assert card["tensor_bytes"] == 1152 and card["expert_tensor_bytes"] == 704  # 512 + 128 + 64
    assert card["weights_source"] == "safetensors headers"


def test_a_dense_model_has_no_expert_bytes(tmp_path: Path) -> None:
    card = modelcard.fingerprint(model_dir(tmp_path / "m", {}, {"model.layers.0.mlp.up.weight": ("BF16", [8, 8])}))
    assert card["expert_tensor_bytes"] == 0 and card["moe_experts"] is None
