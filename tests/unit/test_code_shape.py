"""Issue 34's shape of the code, held: a module is its argument spec, its documentation and one call into
module_utils; a private name is one file's business. The measures are tests/code_shape.py's (run it to see them)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import code_shape  # noqa: E402 - tests/code_shape.py


def test_no_module_keeps_more_than_a_hundred_lines_of_logic():
    assert {name: n for name, n in code_shape.module_logic().items() if n > code_shape.MODULE_LOGIC_MAX} == {}


def test_no_private_name_is_taken_across_files():
    assert code_shape.private_imports() == []


def test_the_measure_counts_code_and_skips_documentation(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""doc\nstring"""\nDOCUMENTATION = r"""\nshort_description: x\n"""\n# a comment\n\n'
                      'def main():\n    """Its docstring."""\n    return 1\n', encoding="utf-8")
    assert code_shape.logic_lines(module) == 2
