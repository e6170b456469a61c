"""The text report ``trtllm-bench`` prints at the end of a run, versions 0.17 to 1.2+.

Labels changed between versions (``Token Throughput (tokens/sec)`` in 0.17, ``Total Output Throughput
(tokens/sec)`` later; tabs in some releases, trailing spaces in headers in others; ``TensorRT-LLM
Version`` became ``TensorRT LLM Version`` in 1.2), so each line's label is normalised (case, spacing,
hyphens, the bracketed tag and the unit in parentheses split off) and then looked up by meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contract.record import METRICS
from .result import SRC_REPORT_TEXT, ParseResult, compact, to_gib, to_ms, to_number

ENGINE = "trtllm-bench"

#: What a complete report holds; streaming metrics are expected only when the report has them.
REPORT_EXPECTED = (
    "output_tok_s",
    "total_tok_s",
    "req_s",
    "latency_ms_avg",
    "latency_ms_p50",
    "latency_ms_p90",
    "latency_ms_p95",
    "latency_ms_p99",
)
STREAMING_EXPECTED = ("ttft_ms", "tpot_ms")

#: Normalised label -> metric (throughputs need no conversion; *_ms ones go through to_ms).
_LABEL_METRICS: dict[str, str] = {
    "request throughput": "req_s",
    "total output throughput": "output_tok_s",
    "system output throughput": "output_tok_s",
    "output throughput": "output_tok_s",
    # 0.17 and older: total output tokens / total latency, i.e. output throughput.
    "token throughput": "output_tok_s",
    "total token throughput": "total_tok_s",
    "system total throughput": "total_tok_s",
    "average request latency": "latency_ms_avg",
    "average time to first token": "ttft_ms",
    "average time per output token": "tpot_ms",
    # Pre-0.20 streaming block: per-request inter-token latency is what later became TPOT.
    "average inter token latency": "tpot_ms",
}

#: Normalised label -> key in ``extra`` (figures with no record metric, kept for reports).
_LABEL_EXTRA: dict[str, str] = {
    "number of requests": "num_requests",
    "number of concurrent requests": "avg_concurrent_requests",
    "average input length": "avg_input_len",
    "average output length": "avg_output_len",
    "per user output throughput": "per_user_output_tok_s",
    "per gpu output throughput": "per_gpu_output_tok_s",
    "per user output speed": "per_user_output_speed_tok_s",
    "tp size": "tp_size",
    "pp size": "pp_size",
    "ep size": "ep_size",
    "max runtime batch size": "max_batch_size",
    "max runtime tokens": "max_num_tokens",
}

#: Normalised label in the backend section -> key of ``ParseResult.loaded`` (the model it loaded).
_LOADED_LABELS: dict[str, str] = {
    "model path": "model_path",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv cache dtype": "kv_cache_dtype",
}

#: ``[Latency] P50 : x`` style breakdown lines: tag -> {row -> metric}.
_BREAKDOWN_METRICS: dict[str, dict[str, str]] = {
    "latency": {
        "average": "latency_ms_avg",
        "p50": "latency_ms_p50",
        "p90": "latency_ms_p90",
        "p95": "latency_ms_p95",
        "p99": "latency_ms_p99",
    },
    "ttft": {"average": "ttft_ms"},
    "tpot": {"average": "tpot_ms"},
    "itl": {"average": "tpot_ms"},
}

# The logger prefix some lines carry:
# "[01/18/2025-01:01:42] [TRT-LLM] [RANK 0] [I] ", "[TensorRT-LLM][INFO] ".
_LOG_PREFIX = re.compile(
    r"^\s*(?:\[\d{2}/\d{2}/\d{4}-\d{2}:\d{2}:\d{2}\]\s*)?(?:\[TRT-LLM\]\s*)?(?:\[TensorRT-LLM\]\s*)?"
    r"(?:\[RANK \d+\]\s*)?(?:\[(?:I|W|E|D|V|INFO|WARNING|ERROR|DEBUG|VERBOSE)\]\s*)?"
)
_SECTION = re.compile(r"^=\s+(\S.*?)\s*$")
_SUBHEADING = re.compile(r"^--\s*(.*?)\s*-*\s*$")
_LEADING_TAG = re.compile(r"^\[([^\]]*)\]\s*")
_PARENS = re.compile(r"\(([^()]*)\)")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_MACHINE = re.compile(
    r"^(?P<gpu>.+?),\s*memory\s+(?P<mem>[\d.]+|N/A)\s*(?P<unit>[GM]i?B)?\s*,\s*(?P<clk>.*)$", re.IGNORECASE
)
_DETAILS_SECTIONS = ("PYTORCH BACKEND", "ENGINE DETAILS", "AUTODEPLOY BACKEND")
#: The MACHINE DETAILS body when ``_query_gpu_info`` returned None (TensorRT-LLM
#: tensorrt_llm/bench/dataclasses/reporting.py @0249976575050d2c624a5f285683c66de311a3b7, report_statistics).
NO_GPU_INFO = "No GPU info available"
_BANNER_VERSION = re.compile(r"TensorRT[- ]LLM\]?\s*TensorRT[- ]LLM\s+version\s*:\s*([0-9][\w.+-]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Label:
    tag: str | None  # "[TPOT]" in "[TPOT] P50 : 7.6", lower-case, without brackets
    name: str  # normalised words: "total output throughput"
    unit: str | None  # last "(...)": "tokens/sec", "ms"


def strip_log_prefix(line: str) -> str:
    return _LOG_PREFIX.sub("", line, count=1)


def normalise_label(raw: str) -> Label:
    """Split tag and unit off a label and normalise the words.

    'Per User Output Throughput [w/ ctx] (tps/user) ' -> ('per user output throughput', unit 'tps/user')
    """
    text = raw.strip()
    tag = None
    lead = _LEADING_TAG.match(text)
    if lead:
        tag = lead.group(1).strip().lower()
        text = text[lead.end() :]
    units = _PARENS.findall(text)
    unit = units[-1].strip().lower() if units else None
    text = _BRACKETS.sub(" ", _PARENS.sub(" ", text))
    name = " ".join(re.sub(r"[-_]", " ", text).lower().split())
    return Label(tag, name, unit)


def section_name(line: str) -> str | None:
    """'= REQUEST DETAILS ' -> 'REQUEST DETAILS'; None for any other line (rules of '=' included)."""
    match = _SECTION.match(line.strip())
    if not match or set(match.group(1)) <= {"="}:
        return None
    return " ".join(match.group(1).upper().split())


def backend_of(section: str) -> str | None:
    if "PYTORCH" in section:
        return "pytorch"
    if "AUTODEPLOY" in section:
        return "_autodeploy"
    if "ENGINE DETAILS" in section:
        return "tensorrt"
    return None


def last_report_lines(lines: list[str], result: ParseResult) -> list[str]:
    """A log may hold several reports (a retried run): the last one is the run's result."""
    starts = [
        i
        for i, line in enumerate(lines)
        if (name := section_name(strip_log_prefix(line))) and name in _DETAILS_SECTIONS
    ]
    if len(starts) > 1:
        result.warnings.append(f"{len(starts)} trtllm-bench reports in one log; using the last one")
    if not starts:
        return lines
    # Keep the rule line above the header so the header is seen as a section.
    return lines[max(starts[-1] - 1, 0) :]


def banner_version(text: str) -> str | None:
    """Version from the import banner '[TensorRT-LLM] TensorRT-LLM version: 1.1.0rc3' (last one wins)."""
    found = _BANNER_VERSION.findall(text)
    return found[-1] if found else None


class _ReportScan:
    """One pass over the report lines; state is the current section and breakdown unit."""

    def __init__(self, result: ParseResult) -> None:
        self.result = result
        self.section: str | None = None
        self.breakdown_unit: str | None = None
        self.seen_report = False
        self.streaming = False

    def feed(self, raw_line: str) -> None:
        line = strip_log_prefix(raw_line).rstrip()
        if not line.strip():
            return
        name = section_name(line)
        if name is not None:
            self.enter_section(name)
            return
        sub = _SUBHEADING.match(line.strip())
        if sub:
            units = _PARENS.findall(sub.group(1))
            self.breakdown_unit = units[-1].strip().lower() if units else None
            return
        if self.section == "MACHINE DETAILS":
            self.machine_line(line)
            return
        if self.section and self.section.startswith("DATASET"):
            return  # dataset percentiles are inputs, not results
        if ":" in line:
            raw_label, _, value = line.partition(":")
            self.labelled_line(normalise_label(raw_label), value.strip())

    def enter_section(self, name: str) -> None:
        self.section = name
        self.breakdown_unit = None
        if name == "MACHINE DETAILS":
            self.result.extra["machine_details"] = "unreadable"  # until a line says what it holds
        backend = backend_of(name)
        if backend:
            self.seen_report = True
            self.result.backend = self.result.backend or backend
        if "PERFORMANCE" in name or "STATISTICS" in name:
            self.seen_report = True
        if "STREAMING" in name:
            self.streaming = True

    def machine_line(self, line: str) -> None:
        """'NVIDIA H100 80GB HBM3, memory 79.11 GB, 2.62 GHz' (1.2+); the 'GB' figure is total_memory / 2**30;
        an unknown figure is 'N/A' ('NVIDIA GB10, memory 119.70 GB, N/A'). Where trtllm-bench could not query
        the GPU the section holds 'No GPU info available' (reporting.py @0249976, PR #17732), as on a GB10: no
        figure then, the device total comes from the log's Peak memory line."""
        text = line.strip()
        if text.lower().rstrip(".") == NO_GPU_INFO.lower():
            self.result.extra["machine_details"] = "null"
            return
        match = _MACHINE.match(text)
        if not match:
            return
        self.result.extra["machine_details"] = "present"
        self.result.extra["gpu_name"] = match.group("gpu").strip()
        total = to_gib(to_number(match.group("mem")), match.group("unit") or "GB")
        self.result.set_metric("device_total_gib", total, f"{SRC_REPORT_TEXT}: MACHINE DETAILS")

    def labelled_line(self, label: Label, value: str) -> None:
        if label.tag in _BREAKDOWN_METRICS:
            self.breakdown_line(label, value)
            return
        name = label.name
        if name == "model" and self.section in _DETAILS_SECTIONS:
            if value and value.lower() != "none":
                self.result.model = value
        elif name in _LOADED_LABELS and self.section in _DETAILS_SECTIONS:
            # provenance (modelcard.judge): the path the engine was given, and what it read from its config
            if value and value.lower() != "none":
                self.result.loaded[_LOADED_LABELS[name]] = value
        elif name == "tensorrt llm version":
            self.result.engine_version = value.split()[0] if value.split() else None
        elif name == "kv memory percentage":
            pct = to_number(value)
            self.result.set_metric(
                "kv_fraction",
                None if pct is None else pct / 100.0,
                f"{SRC_REPORT_TEXT}: KV Memory Percentage",
            )
        elif name == "total latency":
            total = to_ms(to_number(value), label.unit)
            if total is not None:
                self.result.extra["total_latency_ms"] = total
        elif name in _LABEL_METRICS:
            self.metric_line(_LABEL_METRICS[name], label, value)
        elif name in _LABEL_EXTRA and self.section is not None:
            number = to_number(value)
            if number is not None:
                self.result.extra[_LABEL_EXTRA[name]] = compact(number)

    def metric_line(self, metric: str, label: Label, value: str) -> None:
        number = to_number(value)
        if METRICS[metric] == "ms":
            self.streaming = self.streaming or metric in STREAMING_EXPECTED
            converted = to_ms(number, label.unit)
            if number is not None and converted is None:
                self.result.warnings.append(f"{metric}: unknown time unit '{label.unit}' ignored")
            number = converted
        self.result.set_metric(metric, number, SRC_REPORT_TEXT)

    def breakdown_line(self, label: Label, value: str) -> None:
        tag = label.tag or ""
        if tag in ("ttft", "tpot", "itl"):
            self.streaming = True
        metric = _BREAKDOWN_METRICS[tag].get(label.name)
        if metric is None:
            return
        number = to_ms(to_number(value), self.breakdown_unit or "ms")
        self.result.set_metric(metric, number, f"{SRC_REPORT_TEXT}: [{tag.upper()}] breakdown")


def parse_report_text(text: str) -> ParseResult:
    """Parse the trtllm-bench report in ``text`` (a whole bench.log is fine); never raises."""
    result = ParseResult(kind="unknown", engine=ENGINE)
    scan = _ReportScan(result)
    for line in last_report_lines(text.splitlines(), result):
        scan.feed(line)
    if not result.engine_version:
        version = banner_version(text)
        if version:
            result.engine_version = version
            result.extra["engine_version_source"] = "log banner: TensorRT-LLM version"
    if scan.seen_report:
        result.kind = ENGINE
        result.extra.setdefault("machine_details", "absent")  # before 1.2, or a report cut short
    result.extra["streaming"] = scan.streaming
    expected = list(REPORT_EXPECTED) + (list(STREAMING_EXPECTED) if scan.streaming else [])
    result.note_missing(expected + ["model", "engine_version"])
    return result
