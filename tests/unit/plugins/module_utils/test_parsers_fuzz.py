"""The parsers never raise: garbage, every truncation of every fixture, random mutations.

Each parser is also called directly (outside ``parse_log``'s safety net), so a bug shows up as a failure
here instead of hiding behind the "internal parser error" warning. Every parser in sparkfleet_host/parsers/
is fuzzed: the trtllm-bench report and memory lines, --report_json, matmul, hf-generate, vllm, the
probe lines, kind detection and parse_file. Together with tests/unit/test_hf_generate.py the default run
tries at least MIN_FUZZ_CASES cases (test_fuzz_budget prints the count).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from pathlib import Path

import pytest
from _shared import OWN_FIXTURE_FILES, SHARED_TRTLLM_FIXTURES, own_fixture, trtllm_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parsers_misc import MATMUL_OUTPUT

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import METRICS
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers import (
    INTERNAL_ERROR,
    ParseResult,
    detect_kind,
    parse_file,
    parse_hf_generate,
    parse_log,
    parse_matmul,
    parse_memory_lines,
    parse_probe,
    parse_report_json,
    parse_report_text,
    parse_vllm,
)
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.parsers.probe import PROBE_PREFIX

DIRECT_PARSERS = (parse_report_text, parse_memory_lines, parse_matmul, parse_vllm, parse_report_json,
                  parse_hf_generate)
KINDS = {"report_json", "matmul", "hf-generate", "vllm", "trtllm", "unknown"}
MIN_FUZZ_CASES = 10_000
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def all_fixture_texts() -> dict[str, str]:
    texts = {name: trtllm_fixture(name).read_text() for name in SHARED_TRTLLM_FIXTURES}
    texts |= {name: own_fixture(name).read_text() for name in OWN_FIXTURE_FILES}
    texts["matmul"] = MATMUL_OUTPUT
    texts["hf-generate"] = own_fixture("hf_generate/cpu-llama-tiny-transformers-5.23.0.log").read_text()
    return texts


TEXTS = all_fixture_texts()
#: Lines that appear in real logs; mutations splice them in so the parsers see plausible noise too.
REAL_LINES = sorted({line for text in TEXTS.values() for line in text.splitlines()})


def check(result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    assert not [w for w in result.warnings if w.startswith(INTERNAL_ERROR)], result.warnings
    assert set(result.metrics) <= set(METRICS)
    assert set(result.sources) == set(result.metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in result.metrics.values())
    assert all(isinstance(m, str) for m in result.missing)
    json.dumps(result.to_dict())  # plain data, ready for record.json


def check_probe(probe: dict) -> None:
    assert isinstance(probe, dict)
    assert all(isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", k) for k in probe)
    assert all(isinstance(v, str) and "\n" not in v and v == v.rstrip() for v in probe.values())


def check_everything(text: str | bytes) -> ParseResult:
    for parser in DIRECT_PARSERS:
        check(
            parser(text)
            if parser is parse_report_json or isinstance(text, str)
            else parser(text.decode("utf-8", "replace"))
        )
    as_text = text if isinstance(text, str) else text.decode("utf-8", "replace")
    check_probe(parse_probe(as_text))
    assert detect_kind(as_text) in KINDS
    result = parse_log(text)
    check(result)
    return result


@settings(FUZZ, max_examples=600)
@given(st.text(max_size=3000))
def test_garbage_text(text):
    check_everything(text)


@settings(FUZZ, max_examples=400)
@given(st.binary(max_size=3000))
def test_garbage_bytes(data):
    check_everything(data)


@settings(FUZZ, max_examples=500)
@given(st.lists(st.sampled_from(REAL_LINES) | st.text(max_size=80), max_size=60))
def test_shuffled_real_lines(lines):
    check_everything("\n".join(lines))


def mutate(data: st.DataObject, text: str) -> str:
    """Up to five random edits: cut, insert garbage or a real line, duplicate/swap lines, flip a char."""
    for _ in range(data.draw(st.integers(1, 5))):
        n = len(text)
        op = data.draw(st.sampled_from(["cut", "delete", "insert", "real", "dup", "swap", "flip"]))
        at = data.draw(st.integers(0, n))
        if op == "cut":
            text = text[:at]
        elif op == "delete":
            text = text[:at] + text[at + data.draw(st.integers(0, 40)) :]
        elif op == "insert":
            text = text[:at] + data.draw(st.text(max_size=30)) + text[at:]
        elif op == "real":
            text = text[:at] + "\n" + data.draw(st.sampled_from(REAL_LINES)) + "\n" + text[at:]
        elif op in ("dup", "swap"):
            lines = text.splitlines()
            if lines:
                i, j = data.draw(st.integers(0, len(lines) - 1)), data.draw(st.integers(0, len(lines) - 1))
                if op == "dup":
                    lines.insert(j, lines[i])
                else:
                    lines[i], lines[j] = lines[j], lines[i]
                text = "\n".join(lines)
        elif op == "flip" and n:
            at = min(at, n - 1)
            text = text[:at] + data.draw(st.characters()) + text[at + 1 :]
    return text


@settings(FUZZ, max_examples=1500)
@given(st.sampled_from(sorted(TEXTS)), st.data())
def test_random_mutations_of_fixtures(name, data):
    check_everything(mutate(data, TEXTS[name]))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
report_keys = st.sampled_from(
    [
        "engine",
        "machine",
        "world_info",
        "request_info",
        "performance",
        "streaming_metrics",
        "dataset",
        "model",
        "version",
        "kv_cache_percentage",
        "request_latency_percentiles_ms",
        "p50",
        "average",
        "memory.total",
        "system_output_throughput_tok_s",
        "avg_ttft_ms",
        "backend",
    ]
)


@settings(FUZZ, max_examples=1000)
@given(st.recursive(json_values, lambda inner: st.dictionaries(report_keys, inner, max_size=6), max_leaves=30))
def test_report_json_of_any_shape(document):
    check(parse_report_json(document if isinstance(document, dict) else {"engine": document}))
    text = json.dumps(document, allow_nan=True)
    check(parse_report_json(text))
    check(parse_log("trtllm-bench log\n", text))


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_line_truncation_keeps_a_subset_of_the_full_figures(name):
    """Cut after each line: never raises, and what is found agrees with the full parse."""
    lines = TEXTS[name].splitlines(keepends=True)
    full = check_everything(TEXTS[name])
    for k in range(len(lines) + 1):
        part = check_everything("".join(lines[:k]))
        if full.kind != "report_json":  # a cut JSON document is simply invalid
            for metric, value in part.metrics.items():
                assert full.metrics.get(metric) == value, (name, k, metric)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_every_character_truncation(name):
    text = TEXTS[name]
    for k in range(0, len(text) + 1, 1 if len(text) < 6000 else 3):
        check(parse_log(text[:k]))


# --------------------------------------------------------------------------------------------------------------
# Parser-aware fuzzing: real lines with hostile numbers, grammar-built blocks, probe lines, kind detection,
# parse_file. Cheap per case, so they carry most of the case budget.

#: Numbers as a log might (mis)print them: huge, tiny, signed, NaN/inf spellings, thousands separators,
#: Unicode digits (Python's float() and \d accept them), empty, half a number.
WEIRD_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-320", "-0", "0", "0.0",
                     "1,234.5", "1_000", "", ".", "-", "+", "1e", "1.2.3", "0x1F", "１２", "١٢٣", "²"]),
    st.text(alphabet="0123456789.eE+-,_ ", max_size=12),
)
#: An integer beyond float range. In a JSON report it trips a product bug (test_report_json_with_a_huge_integer),
#: so the fuzzing puts it only into text logs; add it back for JSON once that test passes.
GIANT = "9" * 400
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@settings(FUZZ, max_examples=1200)
@given(st.sampled_from(sorted(TEXTS)), st.data())
def test_real_logs_with_hostile_numbers(name, data):
    """Every parser on a real log whose numbers were swapped, a few at a time, for hostile spellings."""
    text = TEXTS[name]
    spans = [m.span() for m in _NUMBER.finditer(text)]
    if spans:
        picks = sorted(set(data.draw(st.lists(st.integers(0, len(spans) - 1), min_size=1, max_size=8))),
                       reverse=True)
        for i in picks:
            start, end = spans[i]
            numbers = WEIRD_NUMBERS | st.just(GIANT)
            text = text[:start] + data.draw(numbers) + text[end:]
    check_everything(text)


def test_report_json_with_a_huge_integer():
    """An integer beyond float range is dropped as garbage; the report's other figures stay."""
    report = json.dumps({"performance": {"request_throughput_req_s": 1.5, "system_output_throughput_tok_s": 12.5,
                                         "total_latency_ms": int(GIANT)}})
    check(parse_report_json(report))
    result = parse_log("trtllm-bench log\n", report)
    check(result)
    assert result.metrics.get("output_tok_s") == 12.5


MEMORY_TEMPLATES = [
    "Peak memory during memory usage profiling (torch + non-torch): {n} {u}",
    "available KV cache memory when calculating max tokens: {n} {u}, fraction is set {n}, kv size is {n}",
    "device total memory {n} {u}, tmp kv_mem {n} {u}",
    "[MemUsageChange] Allocated {n} {u} for max tokens in paged KV cache ({n}).",
    "Estimated max memory in KV cache : {n} {u}",
    "Memory usage when calculating max tokens in paged kv cache: total: {n} {u}, available: {n} {u}",
    "max_seq_len={n}, max_num_requests={n}, max_num_tokens={n}, max_batch_size={n}",
    "Memory used after loading model weights (inside torch) in memory usage profiling: {n} {u}",
    "Memory used after loading model weights (outside torch) in memory usage profiling: {n} {u}",
    "Memory dynamically allocated during inference (inside torch) in memory usage profiling: {n} {u}",
    "Memory used outside torch (e.g., NCCL and CUDA graphs) in memory usage profiling: {n} {u}",
]
UNITS = st.sampled_from(["GiB", "GB", "MiB", "MB", "KiB", "KB", "gib", "TiB", "", "B", "GiBs"])
LOG_PREFIXES = st.sampled_from(["", "[TensorRT-LLM][INFO] ", "[11/21/2025-06:30:00] [TRT-LLM] [I] ", "  ", "\t"])


@st.composite
def memory_logs(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 14))):
        template = draw(st.sampled_from(MEMORY_TEMPLATES))
        while "{n}" in template or "{u}" in template:
            template = template.replace("{n}", draw(WEIRD_NUMBERS), 1).replace("{u}", draw(UNITS), 1)
        lines.append(draw(LOG_PREFIXES) + template)
    return "\n".join(lines)


@settings(FUZZ, max_examples=900)
@given(memory_logs())
def test_memory_lines_grammar(text):
    check(parse_memory_lines(text))
    check(parse_log(text))


BLOCK_KEYS = {
    "matmul": ["model", "backend", "backend_version", "device", "dtype", "size", "warmup", "iterations", "mean_s",
               "gflops", "iteration 1/10", "iteration 2/2"],
    "hf-generate": ["engine", "engine_version", "model", "batch", "input_len", "output_len", "iterations",
                    "output_tokens_per_iteration", "output_tok_s", "total_tok_s", "req_s", "latency_ms_avg",
                    "latency_ms_p50", "latency_ms_p99", "ttft_ms", "tpot_ms", "peak_memory_gib",
                    "peak_memory_source", "kv_cache_gib", "kv_cache_bytes", "device_total_gib", "status",
                    "iteration 1/2"],
}
MARKERS = {"matmul": ("=== sparkfleet matmul ===", "=== end sparkfleet matmul ==="),
           "hf-generate": ("=== sparkfleet hf-generate ===", "=== end sparkfleet hf-generate ===")}


@st.composite
def workload_blocks(draw) -> tuple[str, str]:
    kind = draw(st.sampled_from(sorted(MARKERS)))
    begin, end = MARKERS[kind]
    lines = [draw(st.text(max_size=30))] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(1, 2))):  # a retried run prints a second block
        lines.append(begin)
        for _ in range(draw(st.integers(0, 20))):
            key = draw(st.sampled_from(BLOCK_KEYS[kind]) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", max_size=12))
            value = draw(WEIRD_NUMBERS | st.text(max_size=20).filter(lambda v: "\n" not in v and "\r" not in v))
            if key.startswith("iteration") and kind == "matmul":
                value = f"{value} s"
            elif key.startswith("iteration"):
                value = f"latency_ms {draw(WEIRD_NUMBERS)} ttft_ms {draw(WEIRD_NUMBERS)} output_tokens {value}"
            lines.append(f"{key}: {value}")
        if draw(st.booleans()):
            lines.append(end)
    return kind, "\n".join(lines)


@settings(FUZZ, max_examples=600)
@given(workload_blocks())
def test_workload_blocks_grammar(block):
    kind, text = block
    result = parse_matmul(text) if kind == "matmul" else parse_hf_generate(text)
    check(result)
    assert detect_kind(text) == kind
    check(parse_log(text))


PROBE_KEYS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789_.-", min_size=1, max_size=16)
#: str.splitlines() breaks on these; a probe value never holds one (the workloads print one line per key).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
PROBE_VALUES = st.text(max_size=40).filter(lambda v: not any(c in v for c in LINE_BREAKS))


@settings(FUZZ, max_examples=2000)
@given(st.lists(st.tuples(PROBE_KEYS, PROBE_VALUES), max_size=12), st.lists(st.text(max_size=60), max_size=6))
def test_probe_lines_last_value_wins(pairs, noise):
    """Well-formed probe lines are read back (stripped, last one wins), whatever noise is between them."""
    lines = [f"{PROBE_PREFIX} {k}: {v}" for k, v in pairs] + [n for n in noise if PROBE_PREFIX not in n]
    probe = parse_probe("\n".join(lines))
    check_probe(probe)
    # noise lines (stdout of the workload) come after, so they cannot shadow a probe key
    expected = {}
    for k, v in pairs:
        expected[k] = v.rstrip()
    for key, value in expected.items():
        assert probe[key] == value, (key, value, probe.get(key))


@settings(FUZZ, max_examples=1300)
@given(st.lists(st.sampled_from([*REAL_LINES, PROBE_PREFIX, "{", "}", '{"engine": {}}',
                                 "Throughput: 1 requests/s, 2 tokens/s"]) | st.text(max_size=40), max_size=30))
def test_detect_kind_and_the_matching_parser(lines):
    text = "\n".join(lines)
    kind = detect_kind(text)
    assert kind in KINDS
    parser = {"matmul": parse_matmul, "hf-generate": parse_hf_generate, "vllm": parse_vllm,
              "trtllm": parse_report_text, "report_json": parse_report_json}.get(kind)
    if parser:
        check(parser(text))
    check_probe(parse_probe(text))


@settings(FUZZ, max_examples=300)
@given(st.binary(max_size=1500) | st.sampled_from(sorted(TEXTS)).map(lambda n: TEXTS[n].encode()),
       st.none() | st.binary(max_size=600) | json_values.map(lambda v: json.dumps(v).encode()))
def test_parse_file_with_any_log_and_report(log, report):
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp, "bench.log")
        log_path.write_bytes(log)
        report_path = None
        if report is not None:
            report_path = Path(tmp, "report.json")
            report_path.write_bytes(report)
        check(parse_file(log_path, report_path))


def _fuzz_tests(module) -> dict[str, int]:
    out = {}
    for name, fn in vars(module).items():
        configured = getattr(fn, "_hypothesis_internal_use_settings", None)
        if name.startswith("test_") and configured is not None and hasattr(fn, "hypothesis"):
            out[f"{module.__name__}.{name}"] = configured.max_examples
    return out


def test_fuzz_budget(capsys):
    """The default run tries at least MIN_FUZZ_CASES cases across the parser fuzzers (printed with -s)."""
    import test_hf_generate

    counts = _fuzz_tests(sys.modules[__name__]) | _fuzz_tests(test_hf_generate)
    total = sum(counts.values())
    with capsys.disabled():
        print(f"\n[fuzz] {len(counts)} hypothesis fuzz tests, {total} cases in the default run: "
              + ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(counts.items())))
    assert total >= MIN_FUZZ_CASES, counts
    assert any("probe" in k for k in counts) and any("hf_generate" in k for k in counts)
