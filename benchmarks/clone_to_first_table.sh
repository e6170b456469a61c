#!/usr/bin/env bash
# Clone to the first table (issue 33): how long a new user waits from `git clone` to the quick path's per-point
# table, with llama.cpp's llama-server already installed (the CPU build of tests/fleet/llamacpp.py, on the PATH).
#
#   benchmarks/clone_to_first_table.sh [REPO]     # as root; REPO defaults to this checkout
#
# Phases timed: the clone; `./bootstrap.sh bench quick ...` split into its set-up (apt check, virtualenv with
# pip, from the configured index) and the quick campaign itself (the serving client installed by the
# serving_client role, 3 iterations of serve-quick's 4 points on the tests' tiny GGUF); everything in a temporary
# directory (work dir, results), removed afterwards. Prints one line per phase and the table's first lines.
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/..}" && pwd -P)
py=${PYTHON:-$repo/.venv/bin/python}  # the developer's venv: tinymodel needs gguf and tokenizers
server=$("$py" "$repo/tests/fleet/llamacpp.py" build)  # cached: prints the binary's path at once
server=$(dirname "$server")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s.%N)
git clone -q "$repo" "$tmp/src/ansible_collections/sparkfleet/bench"
t1=$(date +%s.%N)
# the model: the tests' tiny random-weight GGUF with its tokenizer.json beside it (what a user brings)
"$py" - "$repo" "$tmp/models" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/tests/fleet")
from tinymodel import make_tiny_model
make_tiny_model(sys.argv[2])
PY
t2=$(date +%s.%N)
cd "$tmp/src/ansible_collections/sparkfleet/bench"
PATH="$server:$PATH" ./bootstrap.sh bench quick llama.cpp "$tmp/models/tiny.gguf" --random-weights \
  --server-arg=-t --server-arg=1 --quiet -e "sparkfleet_work_dir=$tmp/work" --results "$tmp/results" \
  > "$tmp/out.log" 2>&1 || { tail -40 "$tmp/out.log"; exit 1; }
t3=$(date +%s.%N)
setup=$(grep -n '^==> sparkfleet quick' "$tmp/out.log" | head -1 | cut -d: -f1)
grep -q 'per serving point' "$tmp/out.log" || { echo "no table" >&2; tail -40 "$tmp/out.log"; exit 1; }
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN {
  printf "clone: %.0f s\nmodel file (not timed as the user'"'"'s): %.0f s\nbootstrap + quick: %.0f s\nclone to table (less the model): %.0f s\n", b-a, c-b, d-c, (b-a)+(d-c) }'
echo "setup lines before the quick run: ${setup:-?}"
sed -n '/^numbers:/,/^verdicts:/p' "$tmp/out.log"
