"""The shape issue 34 ("one home per concept") asks of the code, measured from its syntax trees alone.

``python tests/code_shape.py`` prints each measure; tests/unit/test_code_shape.py asserts them:

* **module logic**: lines of code in each Ansible module (plugins/modules) outside its documentation strings
  (DOCUMENTATION, EXAMPLES, RETURN), docstrings, comments and blank lines: a module is its argument spec, its
  documentation and one call into module_utils, so its logic stays small;
* **private names across files**: ``from x import _name`` or ``module._name`` where the name is defined in another
  file of the product (a private name is one file's business);
* **product lines**: what issue 34 counts, ``git ls-files 'sparkfleet/*.py' 'plugins/*.py' 'roles/*.py' | xargs wc -l``.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("sparkfleet", "plugins", "roles")
DOC_STRINGS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
#: The most lines of logic a module may keep (issue 34: "no module over ~100 lines of logic").
MODULE_LOGIC_MAX = 100


def product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def _string_lines(tree: ast.AST) -> set[int]:
    """Line numbers held by docstrings and by the module's documentation assignments."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in DOC_STRINGS
                                                for t in node.targets):
            lines.update(range(node.lineno, node.end_lineno + 1))
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def logic_lines(path: Path) -> int:
    """Lines holding code: not blank, not only a comment, not a docstring or documentation string."""
    text = path.read_text(encoding="utf-8")
    skip = _string_lines(ast.parse(text))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER):
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - skip)


def module_logic() -> dict[str, int]:
    return {p.name: logic_lines(p) for p in sorted((ROOT / "plugins" / "modules").glob("*.py"))}


def _defined_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def private_imports() -> list[str]:
    """``file: module._name`` for each private name a product file takes from another file."""
    found = []
    for path in product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _defined_names(tree)
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(ROOT)}: {node.module or '.'}.{alias.name}")
                    else:
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id in modules and node.attr not in own \
                    and node.value.id not in sys.stdlib_module_names:  # os._exit is the standard library's
                found.append(f"{path.relative_to(ROOT)}: {node.value.id}.{node.attr}")
    return sorted(set(found))


def product_lines() -> int:
    files = subprocess.run(["git", "ls-files", "sparkfleet/*.py", "plugins/*.py", "roles/*.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return sum(len((ROOT / f).read_text(encoding="utf-8").splitlines()) for f in files if (ROOT / f).is_file())


def main() -> int:
    print(f"lines of logic per module (at most {MODULE_LOGIC_MAX}):")
    for name, count in sorted(module_logic().items(), key=lambda kv: -kv[1]):
        print(f"  {count:5d}  {name}")
    print("private names taken across files:")
    for line in private_imports():
        print("  " + line)
    print(f"product Python lines: {product_lines()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
