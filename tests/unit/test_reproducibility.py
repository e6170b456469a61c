"""Cross-host reproducibility: variance components by hand, hosts outside the tolerance named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sparkfleet.reproducibility import host_deviations, host_variance, variance_components


def test_variance_components_by_hand() -> None:
    # Groups [1,2,3] and [4,5,6]: grand mean 3.5, group means 2 and 5.
    # MSB = 3 * (1.5^2 + 1.5^2) / 1 = 13.5; MSW = (2 + 2) / (6 - 2) = 1; n0 = (6 - 18/6) / 1 = 3;
    # sigma2_between = (13.5 - 1) / 3 = 4.16667; ICC = 4.16667 / 5.16667 = 0.80645; F = 13.5,
    # p = P(F(1,4) > 13.5) = 0.021312 (F table).
    out = variance_components([np.array([1, 2, 3.0]), np.array([4, 5, 6.0])])
    assert out["ms_between"] == pytest.approx(13.5)
    assert out["ms_within"] == pytest.approx(1.0)
    assert out["sigma2_between"] == pytest.approx(4.166667, abs=1e-6)
    assert out["icc"] == pytest.approx(0.806452, abs=1e-6)
    assert out["f"] == pytest.approx(13.5)
    assert out["p_value"] == pytest.approx(0.021312, abs=1e-6)


def test_unbalanced_groups_and_no_between_variance() -> None:
    # [1,3] mean 2, [2,2,2] mean 2: identical means -> MSB 0; MSW = (2 + 0) / (5 - 2) = 2/3; sigma2_b = 0.
    out = variance_components([np.array([1, 3.0]), np.array([2, 2, 2.0])])
    assert out["ms_between"] == pytest.approx(0.0)
    assert out["ms_within"] == pytest.approx(2 / 3)
    assert out["sigma2_between"] == 0.0 and out["icc"] == 0.0


def fleet(values_by_host: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"run_id": f"{h}.{i}", "host": h, "model": "m", "environment": "native", "workload": "w",
             "status": "ok", "warmup": False, "output_tok_s": v}
            for h, values in values_by_host.items() for i, v in enumerate(values)]
    rows.append({"run_id": "solo", "host": "h1", "model": "solo-model", "environment": "native",
                 "workload": "w", "status": "ok", "warmup": False, "output_tok_s": 1.0})
    return pd.DataFrame(rows)


def test_hosts_outside_tolerance_are_named() -> None:
    # All 9 runs pooled: median 101. h3's median 110 is +8.9% (outside 5%); h1 -1.0%, h2 0%.
    runs = fleet({"h1": [99, 100, 101], "h2": [100, 101, 102], "h3": [109, 110, 111]})
    dev = host_deviations(runs, ["output_tok_s"]).set_index("host")
    assert dev.loc["h3", "fleet_median"] == 101
    assert dev.loc["h3", "deviation_pct"] == pytest.approx((110 - 101) / 101 * 100)
    assert list(dev.index[dev["outside"]]) == ["h3"]
    assert "solo-model" not in set(dev["model"])  # one host only: nothing to reproduce
    variance = host_variance(runs, ["output_tok_s"]).iloc[0]
    assert variance["hosts"] == 3 and variance["n"] == 9
    # Within each host var = 1 -> MSW = 1; means 100, 101, 110, grand 103.667 -> MSB = 3 * 60.667 / 2 = 91.
    assert variance["ms_within"] == pytest.approx(1.0)
    assert variance["ms_between"] == pytest.approx(91.0)
    assert variance["icc"] == pytest.approx(30.0 / 31.0)
