"""Decision thresholds the CLI shows as defaults, importable without pandas or scipy: every `sparkfleet`
call builds the whole parser, and `collect` runs one per host (`sparkfleet unpack`)."""

from __future__ import annotations

# A host that differs from the other hosts significantly and by more than this is out (cross-host
# reproducibility: sparkfleet.reproducibility.host_deviations, the rule of every verdict).
DEFAULT_TOLERANCE = 0.05
# A difference is a finding only when significant at this level (two-sided Welch test) ...
DEFAULT_ALPHA = 0.05
# ... and larger than this relative change: the smallest effect that matters (also the effect the "need
# about N iterations" power calculation is made for).
DEFAULT_THRESHOLD = 0.05
