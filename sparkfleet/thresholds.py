"""Decision thresholds the CLI shows as defaults, importable without pandas or scipy: every `sparkfleet`
call builds the whole parser, and `collect` runs one per host (`sparkfleet unpack`)."""

from __future__ import annotations

# A host whose median is further than this from the fleet median is named (cross-host reproducibility).
DEFAULT_TOLERANCE = 0.05
