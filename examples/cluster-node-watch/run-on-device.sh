#!/usr/bin/env bash
# On a lent GPU machine (PyTorch installed), from the checkout: a worker node's watch on a real GPU (watch.py).
#   examples/cluster-node-watch/run-on-device.sh [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)
root=$(mktemp -d /tmp/sf-node-watch.XXXX)
mkdir -p "$root/c/ansible_collections/sparkfleet"
ln -s "$repo" "$root/c/ansible_collections/sparkfleet/bench"  # the collection's import path
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
PYTHONPATH="$root/c" python3 "$here/watch.py" "$root/results" "${1:-20}"
