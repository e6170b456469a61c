"""The decode bandwidth roofline (issue 24): expectations computed by hand (the arithmetic is in the
comments), not by calling the formula under test."""

from __future__ import annotations

import math

import pytest

from sparkfleet import roofline


def test_bytes_per_parameter():
    assert roofline.dtype_bytes("bf16") == 2 and roofline.dtype_bytes("torch.float16") == 2
    assert roofline.dtype_bytes("FP8") == 1 and roofline.dtype_bytes("fp32") == 4
    assert roofline.dtype_bytes("nvfp4") == 0.5625  # 4 bits + one 8-bit scale per 16 values = 4.5 bits
    assert roofline.dtype_bytes("mxfp4") == 0.53125  # 4 bits + one 8-bit scale per 32 values = 4.25 bits
    with pytest.raises(roofline.RooflineError, match="dtype: unknown 'fp5'"):
        roofline.dtype_bytes("fp5")


def test_weight_bytes():
    assert roofline.weight_bytes(1.235e9, "bf16") == pytest.approx(2.47e9)
    assert roofline.weight_bytes(8e9, "fp8") == 8e9
    assert roofline.weight_bytes(8e9, "nvfp4") == pytest.approx(4.5e9)  # 8e9 x 0.5625
    assert roofline.weight_bytes(1e9, "fp32") == 4e9


def test_the_issue_example_bf16_weights_at_3_tb_s():
    # 3.0e12 B/s / 2.47e9 B per token = 1,214.57 tok/s
    assert roofline.decode_roofline_tok_s(3.0e12, 2.47e9) == pytest.approx(1214.57, abs=0.01)
    # with the KV cache: 2.47e9 + 32,768 x 191.5 = 2,476,275,072 B per token -> 1,211.50 tok/s
    assert roofline.decode_roofline_tok_s(3.0e12, 2.47e9, 32768, 191.5) == pytest.approx(1211.50, abs=0.01)


def test_batch_reads_the_weights_once_per_step():
    # batch 8, no KV: 8 tokens per 2.47e9 B step = 9,716.6 tok/s aggregate
    assert roofline.decode_roofline_tok_s(3.0e12, 2.47e9, batch=8) == pytest.approx(9716.60, abs=0.01)
    # batch 8 at 1,000 tokens of context: 2.47e9 + 8 x 32,768 x 1,000 = 2,732,144,000 B -> 8,784.31 tok/s
    assert roofline.decode_roofline_tok_s(3.0e12, 2.47e9, 32768, 1000, batch=8) == pytest.approx(8784.31, abs=0.01)
    assert roofline.bytes_per_step(2.47e9, 32768, 1000, batch=8) == 2_732_144_000


def test_percent_of_roofline_for_the_hf_generate_figures():
    # eager decoding, 60 tok/s: 60 / 1,214.57 = 4.94%; the compiled sketch, 414 tok/s: 34.09%
    eager = roofline.assess(60, 3.0e12, 2.47e9)
    assert eager["percent_of_roofline"] == pytest.approx(4.94, abs=0.005) and eager["implausible"] is False
    compiled = roofline.assess(414, 3.0e12, 2.47e9)
    assert compiled["percent_of_roofline"] == pytest.approx(34.09, abs=0.005)
    assert compiled["batch"] == 1 and compiled["bytes_per_step"] == 2.47e9
    assert roofline.assess(None, 3.0e12, 2.47e9)["percent_of_roofline"] is None


def test_above_the_roofline_is_implausible():
    # the study's Qwen2.5-72B at 119.33 tok/s on a GB10: 72.7e9 x 2 B = 145.4e9 B at 273 GB/s -> 1.878 tok/s
    result = roofline.assess(119.33, 273e9, roofline.weight_bytes(72.7e9, "bf16"))
    assert result["roofline_tok_s"] == pytest.approx(1.878, abs=0.001)
    assert result["percent_of_roofline"] == pytest.approx(6355.5, abs=0.1)
    assert result["implausible"] is True
    # just over 100% is flagged too, exactly 100% is not
    assert roofline.assess(1215, 3.0e12, 2.47e9)["implausible"] is True
    assert roofline.assess(1000, 1e12, 1e9)["implausible"] is False
    # speculative decoding emits several tokens per weight read: percentage kept, no flag
    spec = roofline.assess(1500, 3.0e12, 2.47e9, speculative=True)
    assert spec["implausible"] is False and spec["percent_of_roofline"] > 100


@pytest.mark.parametrize("call, field", [
    (lambda: roofline.weight_bytes(-1, "bf16"), "params"),
    (lambda: roofline.weight_bytes(math.nan, "bf16"), "params"),
    (lambda: roofline.decode_roofline_tok_s(0, 2.47e9), "bandwidth_bytes_s"),
    (lambda: roofline.decode_roofline_tok_s(3e12, 0), "weight_bytes"),
    (lambda: roofline.decode_roofline_tok_s(3e12, 2.47e9, batch=0), "batch"),
    (lambda: roofline.decode_roofline_tok_s(3e12, 2.47e9, -1, 10), "kv_bytes_per_token"),
    (lambda: roofline.assess(-3, 3e12, 2.47e9), "measured_tok_s"),
])
def test_bad_arguments_name_the_field(call, field):
    with pytest.raises(roofline.RooflineError, match=field):
        call()
