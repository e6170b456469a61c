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
