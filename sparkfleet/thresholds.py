"""Decision thresholds the CLI shows as defaults, importable without pandas or scipy: every `sparkfleet`
call builds the whole parser, and `collect` runs one per host (`sparkfleet unpack`)."""

from __future__ import annotations

# A host whose median is further than this from the fleet median is named (cross-host reproducibility).
DEFAULT_TOLERANCE = 0.05
# A difference is a finding only when significant at this level (two-sided Welch test) ...
DEFAULT_ALPHA = 0.05
# ... and larger than this relative change: the smallest effect that matters (also the effect the "need
# about N iterations" power calculation is made for).
DEFAULT_THRESHOLD = 0.05
