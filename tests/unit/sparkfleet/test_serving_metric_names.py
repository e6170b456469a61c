"""The report names serving point metrics only from the contract's table (record.SERVING_METRICS)."""

from __future__ import annotations

from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract.record import (
    AGGREGATE,
    SERVING_METRICS,
)
from sparkfleet import serving
from sparkfleet.report import headline, serving_plots, wording


def test_the_report_picks_its_serving_figures_from_the_table():
    assert {m for m, _ in headline.POINT_METRICS} <= set(SERVING_METRICS)
    assert set(serving_plots.THROUGHPUT_PANELS) <= set(SERVING_METRICS)


def test_the_serving_vocabulary_reads_the_table():
    assert list(serving.SCOPES) == list(SERVING_METRICS)
    # llama-benchy's aggregate figures: one sample per run (AIPerf's points carry no samples)
    assert serving.PER_RUN_SAMPLES[:3] == ("pp_tok_s", "tg_tok_s", "peak_tg_tok_s")
    # the per-user rates bounded by concurrency x their aggregate: llama-benchy's, not AIPerf's (1 / ITL)
    assert serving.AGGREGATE_OF == {"pp_req_tok_s": "pp_tok_s", "tg_req_tok_s": "tg_tok_s"}
    assert all(SERVING_METRICS[m].scope == AGGREGATE for m in serving.PER_RUN_SAMPLES)
    assert [serving.direction(m) for m in ("tg_tok_s", "e2e_ttft_ms", "not_a_metric")] == [1, -1, 1]
    assert [wording.unit(m) for m in ("tg_req_tok_s", "ttfr_ms")] == ["tok/s", "ms"]
    assert wording.words("pp_req_tok_s") == "prompt throughput (per user)"
