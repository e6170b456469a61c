#!/usr/bin/env bash
# Build the collection, install it where Ansible installs collections, and run ansible-test's
# validate-modules on the installed copy (ansible-test needs the ansible_collections/<ns>/<name> layout).
#   tests/sanity/run.sh [VENV]    # VENV defaults to .venv
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$(cd "${1:-$repo/.venv}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$venv/bin/ansible-galaxy" collection build "$repo" --output-path "$work/dist" >/dev/null
tarball=$(ls "$work"/dist/sparkfleet-bench-*.tar.gz)
# --force: run from the checkout, ansible.cfg already finds sparkfleet.bench (the development link)
"$venv/bin/ansible-galaxy" collection install --force "$tarball" -p "$work/collections" >/dev/null 2>&1

# ansible-test bootstraps pip in its venvs with a script it downloads from a host not reachable here.
pip_version=$("$venv/bin/python" - <<'PY'
from ansible_test._internal.python_requirements import get_venv_packages
from types import SimpleNamespace
print(get_venv_packages(SimpleNamespace(version="3"))["pip"])
PY
)
mkdir -p ~/.ansible/test/cache
cp "$repo/tests/sanity/get_pip.py" ~/.ansible/test/cache/"get_pip_${pip_version//./_}.py"

cd "$work/collections/ansible_collections/sparkfleet/bench"
python_version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$venv/bin/ansible-test" sanity --test validate-modules --python "$python_version" --color no
