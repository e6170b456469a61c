"""The parsers never raise: garbage, every truncation of every fixture, random mutations.

Each parser is also called directly (outside ``parse_log``'s safety net), so a bug shows up as a failure
here instead of hiding behind the "internal parser error" warning.
"""

from __future__ import annotations

import json
import math

import pytest
from _shared import OWN_FIXTURE_FILES, SHARED_TRTLLM_FIXTURES, own_fixture, trtllm_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parsers_misc import MATMUL_OUTPUT

from sparkfleet.parsers import (
    INTERNAL_ERROR,
    ParseResult,
    parse_log,
    parse_matmul,
    parse_memory_lines,
    parse_report_json,
    parse_report_text,
    parse_vllm,
)
from sparkfleet.record import METRICS

DIRECT_PARSERS = (parse_report_text, parse_memory_lines, parse_matmul, parse_vllm, parse_report_json)
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def all_fixture_texts() -> dict[str, str]:
    texts = {name: trtllm_fixture(name).read_text() for name in SHARED_TRTLLM_FIXTURES}
    texts |= {name: own_fixture(name).read_text() for name in OWN_FIXTURE_FILES}
    texts["matmul"] = MATMUL_OUTPUT
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


def check_everything(text: str | bytes) -> ParseResult:
    for parser in DIRECT_PARSERS:
        check(
            parser(text)
            if parser is parse_report_json or isinstance(text, str)
            else parser(text.decode("utf-8", "replace"))
        )
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
