# -*- coding: utf-8 -*-
# Copyright: sparkfleet contributors
# Apache-2.0
"""The validation kernel: a :class:`Field` (name, type, default, doc, unit, physical range) and the checks
behind every refusal that names a field (:func:`field_problem`, :func:`check_mapping`).

The host modules check their own options with it (``thermal_wait``'s cooldown, ``preflight_check``'s limits,
``bench_run``'s numbers); the controller's campaign language and inventory settings
(``plugins/plugin_utils/settings.py``) are tables of the same fields. NaN and infinity are refused for every
number.

Stdlib only, Python 3.8+ (it ships to the hosts inside the modules).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

#: A field without a default must be given.
REQUIRED = object()

DAY_S = 86400.0
WEEK_S = 7 * DAY_S
#: A GPU's temperature sensor reads between room temperature and its shutdown point; 0..120 C holds every
#: reading a working GPU gives (below 0 C or above 120 C is a typo, never a threshold).
GPU_TEMP_C = (0.0, 120.0)

_KIND_NAMES = {"int": "an integer", "float": "an integer or a number", "bool": "a boolean", "str": "a string",
               "list": "a list", "dict": "a mapping", "path": "a path", "abs_path": "an absolute path"}


def type_name(value: Any) -> str:
    """'an integer', 'a mapping', ... for messages."""
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number",
            type(None): "nothing"}.get(type(value), type(value).__name__)


class Field(object):
    """One setting: name, type, default, doc, unit and physical range (numbers), choices (strings).

    kind: int | float | bool | str | path | abs_path | list | dict | any. ``elements`` is the kind of a list's
    items. ``low``/``high`` bound a number (``low_open``/``high_open``: the bound itself is excluded).
    ``option``: the module option that takes the field (``thermal_wait``, ``preflight_check``). ``check``: an
    extra rule ``value -> problem or None`` for what a type and a range cannot say. ``nullable``: ``null`` is a value.
    ``resolved``: the field appears in the resolved campaign (and so in its config hash).
    """

    __slots__ = ("name", "kind", "default", "doc", "unit", "low", "high", "low_open", "high_open", "choices",
                 "elements", "nullable", "option", "check", "resolved", "ansible_type")

    def __init__(self, name: str, kind: str, default: Any = REQUIRED, doc: str = "", unit: str = "",
                 low: Optional[float] = None, high: Optional[float] = None, low_open: bool = False,
                 high_open: bool = False, choices: Optional[Sequence[Any]] = None, elements: Optional[str] = None,
                 nullable: bool = False, option: Optional[str] = None,
                 check: Optional[Callable[[Any], Optional[str]]] = None, resolved: bool = True,
                 ansible_type: Optional[str] = None) -> None:
        self.name, self.kind, self.default, self.doc, self.unit = name, kind, default, doc, unit
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open
        self.choices = tuple(choices) if choices is not None else None
        self.elements, self.nullable, self.option, self.check = elements, nullable, option, check
        self.resolved = resolved
        self.ansible_type = ansible_type

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __repr__(self) -> str:
        return "Field(%r, %r)" % (self.name, self.kind)

    def range_text(self) -> str:
        """'0 to 120 C', 'above 0 s', '' - for docs."""
        unit = (" " + self.unit) if self.unit else ""
        if self.low is not None and self.high is not None:
            left = "above %s" % number_text(self.low) if self.low_open else number_text(self.low)
            right = "below %s" % number_text(self.high) if self.high_open else number_text(self.high)
            if self.low_open or self.high_open:
                return "%s, %s%s" % (left, right, unit)
            return "%s to %s%s" % (left, right, unit)
        if self.low is not None:
            return "%s %s%s" % ("above" if self.low_open else "at least", number_text(self.low), unit)
        if self.high is not None:
            return "at most %s%s" % (number_text(self.high), unit)
        return ""

    def to_ansible_type(self) -> str:
        if self.ansible_type:
            return self.ansible_type
        return {"int": "int", "float": "float", "bool": "bool", "str": "str", "path": "path", "abs_path": "path",
                "list": "list", "dict": "dict"}.get(self.kind, "raw")


def number_text(value: float) -> str:
    """A number as a message shows it: an integral value without its '.0' (120, not 120.0), else %g."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return "%d" % value
    return "%g" % value


# ------------------------------------------------------------------------------------------- checking


def number_problem(value: Any, integer: bool = False) -> Optional[str]:
    """Why ``value`` is not a finite number (an integer with ``integer``); None when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        return "must be %s, got %s %r" % ("an integer" if integer else "an integer or a number",
                                          type_name(value), value)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "must be a finite number, got %r" % value
    return None


def range_problem(f: Field, value: float) -> Optional[str]:
    """Why ``value`` is outside ``f``'s physical range, or None."""
    unit = (" " + f.unit) if f.unit and f.unit not in ("runs",) else ""
    both = f.low is not None and f.high is not None and f.low != 0 and not (f.low_open or f.high_open)
    low, high, got = (None if x is None else number_text(x) for x in (f.low, f.high, value))
    if f.low is not None and (value <= f.low if f.low_open else value < f.low):
        if f.low == 0:
            return ("must be positive, got %s" if f.low_open else "must not be negative, got %s") % got
        if both:
            return "must be between %s and %s%s, got %s" % (low, high, unit, got)
        return "must be %s %s%s, got %s" % ("above" if f.low_open else "at least", low, unit, got)
    if f.high is not None and (value >= f.high if f.high_open else value > f.high):
        if both:
            return "must be between %s and %s%s, got %s" % (low, high, unit, got)
        return "must be %s %s%s, got %s" % ("below" if f.high_open else "at most", high, unit, got)
    return None


def field_problem(f: Field, value: Any) -> Optional[str]:
    """The problem with ``value`` for ``f`` (without the field's name), or None."""
    if value is None:
        return None if f.nullable else "must be %s, got nothing" % _KIND_NAMES.get(f.kind, "set")
    kind = f.kind
    if kind in ("int", "float"):
        problem = number_problem(value, integer=kind == "int")
        if problem is None:
            problem = range_problem(f, value)
    elif kind == "bool":
        problem = None if isinstance(value, bool) else "must be a boolean, got %s %r" % (type_name(value), value)
    elif kind == "str":
        problem = None if isinstance(value, str) else "must be a string, got %s %r" % (type_name(value), value)
    elif kind == "path":
        problem = None if isinstance(value, str) and value and "\n" not in value and "\x00" not in value \
            else "must be a path, got %s %r" % (type_name(value), value)
    elif kind == "abs_path":
        problem = None if isinstance(value, str) and value.startswith("/") and "\n" not in value \
            and "\x00" not in value else "must be an absolute path, got %s %r" % (type_name(value), value)
    elif kind == "list":
        problem = None if isinstance(value, list) else "must be a list, got %s" % type_name(value)
        if problem is None and f.elements:
            element = Field(f.name, f.elements)
            for item in value:
                problem = field_problem(element, item)
                if problem:
                    problem = "every entry %s" % problem
                    break
    elif kind == "dict":
        problem = None if isinstance(value, dict) else "must be a mapping, got %s" % type_name(value)
    else:
        problem = None
    if problem is None and f.choices is not None and value not in f.choices:
        problem = "%r is not one of %s" % (value, ", ".join(str(c) for c in f.choices))
    if problem is None:
        problem = non_finite(value)
    if problem is None and f.check is not None:
        problem = f.check(value)
    return problem


def non_finite(value: Any) -> Optional[str]:
    """'must be a finite number' for a NaN or an infinity anywhere inside ``value`` (lists, mappings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number, got %r" % value
    problem = find_non_finite(value, "")
    return problem and "must hold only finite numbers, got %s" % problem.rsplit(", got ", 1)[1]


def find_non_finite(value: Any, where: str, _seen: Optional[set] = None) -> Optional[str]:
    """``where.path: must be a finite number, got nan`` for the first NaN or infinity inside ``value``.

    Each list or mapping is walked once, however often YAML anchors repeat it (a "billion laughs" document
    is a few hundred objects referenced 10^9 times)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "%s: must be a finite number, got %r" % (where, value)
    if not isinstance(value, (dict, list, tuple)):
        return None
    seen = set() if _seen is None else _seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    if isinstance(value, dict):
        items = [("%s.%s" % (where, k), v) for k, v in value.items()]
    else:
        items = [("%s[%d]" % (where, i), v) for i, v in enumerate(value)]
    for path, item in items:
        problem = find_non_finite(item, path, seen)
        if problem:
            return problem
    return None


def check_mapping(data: Mapping[str, Any], fields: Sequence[Field], where: str, problems: List[str],
                  unknown: bool = True, required: bool = True) -> None:
    """Append ``where.key: problem`` for every unknown key, missing required field and bad value."""
    by_name = {f.name: f for f in fields}
    for key, value in data.items():
        f = by_name.get(key)
        if f is None:
            if unknown:
                problems.append("%s.%s: unknown key (known: %s)" % (where, key, ", ".join(sorted(by_name))))
            continue
        problem = field_problem(f, value)
        if problem:
            problems.append("%s.%s: %s" % (where, key, problem))
    if required:
        for f in fields:
            if f.required and f.name not in data:
                problems.append("%s.%s: required" % (where, f.name))


def defaults(fields: Sequence[Field]) -> Dict[str, Any]:
    """name -> default of the fields that have one (copies of lists and mappings)."""
    return {f.name: _copy(f.default) for f in fields if not f.required}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
