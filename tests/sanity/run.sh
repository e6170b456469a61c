#!/usr/bin/env bash
# ansible-test's validate-modules on the checkout, in place: the checkout is the collection and sits at
# <root>/ansible_collections/<ns>/<name>, the layout ansible-test needs (README, "Quick start"). ansible-test lists
# the files through git (tracked and untracked, not the ignored .venv or results) and writes under tests/output/,
# which is removed afterwards when this run made it.
#   tests/sanity/run.sh [VENV]    # VENV defaults to .venv
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
venv=$(cd "${1:-$repo/.venv}" && pwd)
ns=$(sed -n 's/^namespace: *//p' "$repo/galaxy.yml")
name=$(sed -n 's/^name: *//p' "$repo/galaxy.yml")
case "$repo" in
  */ansible_collections/"$ns"/"$name") ;;
  *) echo "error: ansible-test needs the checkout at <dir>/ansible_collections/$ns/$name (it is at $repo)" >&2; exit 2 ;;
esac

# ansible-test bootstraps pip in its venvs with a script it downloads from a host not reachable here.
pip_version=$("$venv/bin/python" - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
from types import SimpleNamespace
print(get_venv_packages(SimpleNamespace(version="3"))["pip"])
PY
)
mkdir -p ~/.ansible/test/cache
cp "$repo/tests/sanity/get_pip.py" ~/.ansible/test/cache/"get_pip_${pip_version//./_}.py"

cd "$repo"
[ -e tests/output ] || trap 'rm -rf "$repo/tests/output"' EXIT
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$venv/bin/ansible-test" sanity --test validate-modules --python "$python_version" --color no
