"""Decision thresholds and the comparison's match modes, which the CLI shows as defaults and choices:
importable without pandas or scipy, since every `sparkfleet` call builds the whole parser."""

from __future__ import annotations

# A host that differs from the other hosts significantly and by more than this is out (cross-host
# reproducibility: sparkfleet.reproducibility.host_deviations, the rule of every verdict).
DEFAULT_TOLERANCE = 0.05
# A difference is a finding only when significant at this level (two-sided Welch test) ...
DEFAULT_ALPHA = 0.05
# ... and larger than this relative change: the smallest effect that matters (also the effect the "need
# about N iterations" power calculation is made for).
DEFAULT_THRESHOLD = 0.05
# How a baseline comparison matches cells (sparkfleet.compare.cell_keys_for): per host where both campaigns
# share hosts (auto), always per host, or pooled over the hosts.
MATCH_MODES = ("auto", "host", "pooled")
