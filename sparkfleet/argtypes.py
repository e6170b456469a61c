"""argparse types for numeric options: NaN and infinity are refused like any other bad number (exit 2)."""

from __future__ import annotations

import argparse
import math


def finite_float(text: str) -> float:
    """A finite number: ``--timeout nan`` or ``inf`` is a usage error, not a value every comparison fails."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def percent(text: str) -> float:
    """A percentage above 0 and below 100, written ``5`` or ``5%``: 5.0 (the unit of every tolerance: `report
    --tolerance`, `fleet --tolerance` and the campaign's ``sparkfleet_reproducibility_tolerance_pct``)."""
    stripped = text.strip()
    number = stripped[:-1].strip() if stripped.endswith("%") else stripped
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percent (give e.g. 5 or 5%)") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (give a percent, e.g. 5 or 5%)")
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percent above 0 and below 100 (e.g. 5 or 5% for ±5%)")
    return value
