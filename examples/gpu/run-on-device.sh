#!/usr/bin/env bash
# The whole sparkfleet pipeline on one NVIDIA GPU machine (a lent H100/H200: PyTorch and transformers
# installed, no Docker, no network), from a clean checkout:
#
#   examples/gpu/run-on-device.sh [WHEELS_DIR [ANSIBLE-PLAYBOOK ARGS...]]
#
# as root; WHEELS_DIR defaults to .whl in the repo; further arguments go to every ansible-playbook call
# (e.g. -e sparkfleet_preflight_max_load_per_cpu=8 on a busy machine).
#
#  0. the checkout is the collection sparkfleet.bench and runs from <root>/ansible_collections/sparkfleet/bench:
#     a checkout elsewhere (the device tool's copy) is copied to $WORK/src/ansible_collections/sparkfleet/bench
#     (its tracked and untracked files; not .venv, .whl, results, out) and everything runs from that copy;
#  1. a controller virtualenv in the work dir that sees the machine's own Python packages (torch, pandas,
#     nvidia-ml-py, ...) and adds what is missing from wheels: ansible-core, resolvelib, cryptography, cffi,
#     pycparser (offline, --no-index); sparkfleet and the collection's code from that copy (a .pth naming
#     <root>, as bootstrap.sh writes it);
#  2. playbooks/provision.yml: the native rootfs as an overlay of the host's / (sparkfleet_rootfs_source=overlay),
#     GPU driver bind mounts, probes in the chroot (nvidia-smi -L; torch.cuda.is_available());
#  3. playbooks/gpu_state.yml --check: what the GPU-state role would do, changing nothing;
#  4. bench.yml on examples/gpu/campaign.yml: preflight facts and gates from the real GPU, provision, GPU state
#     (read and recorded only: no control set, caches not dropped, nvidia-smi behind a read-only guard),
#     the matrix (thermal_wait on NVML before each run, NVML telemetry), collect; then `sparkfleet report`;
#  5. playbooks/restore.yml; a bare-vs-native summary (compare.md).
#
# Results go to $OUT when it is set (the device tool returns what is there), else to examples/gpu/out/:
#   run.log  env.txt  compare.md  summary.md  index.html  results.tgz (records, host facts, report; no big logs)
#
# Environment: PYTHON (the Python with torch; default python3), SPARKFLEET_GPU_WORK (work dir, default
# /var/tmp/sparkfleet-gpu), CAMPAIGN (default examples/gpu/campaign.yml), BENCH_TIMEOUT (s, default 480),
# FRESH=1 (forget earlier results in the work dir instead of resuming).
set -uo pipefail

CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
WHEELS=$(cd "${1:-$CHECKOUT/.whl}" 2>/dev/null && pwd || true)
PY=${PYTHON:-python3}
WORK=${SPARKFLEET_GPU_WORK:-/var/tmp/sparkfleet-gpu}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-480}
DEST=${OUT:-$CHECKOUT/examples/gpu/out}
VENV=$WORK/venv
CTRL=$WORK/controller-results
case "$CHECKOUT" in
  */ansible_collections/sparkfleet/bench) REPO=$CHECKOUT ;;
  *) REPO=$WORK/src/ansible_collections/sparkfleet/bench ;;
esac
COLLECTIONS_ROOT=${REPO%/ansible_collections/sparkfleet/bench}
HERE=$REPO/examples/gpu
CAMPAIGN=$(readlink -f "${CAMPAIGN:-$CHECKOUT/examples/gpu/campaign.yml}")
INVENTORY=$HERE/inventory.ini

mkdir -p "$DEST" "$WORK"
exec > >(tee -a "$DEST/run.log") 2>&1
TEE_PID=$!
trap 'exec 1>&- 2>&-; wait "$TEE_PID" 2>/dev/null' EXIT
step() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }
die() { echo "run-on-device: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (overlay and bind mounts, chroot)"
command -v "$PY" >/dev/null || die "no $PY"

if [[ $REPO != "$CHECKOUT" ]]; then
  step "the checkout, copied into the collection layout: $REPO"
  rm -rf "$REPO" && mkdir -p "$REPO" || die "cannot make $REPO"
  if git -C "$CHECKOUT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$CHECKOUT" && git ls-files -z -co --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$REPO"
  else
    tar -C "$CHECKOUT" -cf - --exclude=./.git --exclude='./.venv*' --exclude=./.whl --exclude=./results \
      --exclude=./examples/gpu/out --exclude=__pycache__ . | tar -xf - -C "$REPO"
  fi
  [[ -f $REPO/galaxy.yml && -f $HERE/inventory.ini ]] || die "copying the checkout to $REPO failed"
  # the copy's campaign file, when the campaign is one of the checkout's
  [[ $CAMPAIGN == "$CHECKOUT"/* ]] && CAMPAIGN=$REPO/${CAMPAIGN#"$CHECKOUT"/}
fi

step "machine"
{
  echo "# uname"; uname -a
  echo "# nvidia-smi"; nvidia-smi || true
  echo "# nvidia-smi -q (temperature, power, clocks, performance)"
  nvidia-smi -q -d TEMPERATURE,POWER,CLOCK,PERFORMANCE || true
  echo "# python"; "$PY" -c 'import sys; print(sys.executable, sys.version)'
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "available", torch.cuda.is_available(), "transformers", transformers.__version__)' || true
  echo "# environment"; env | grep -E '^(PATH|LD_LIBRARY_PATH|CUDA_[A-Z_]*|NVIDIA_[A-Z_]*|NCCL_[A-Z_]*)=' | sort
  echo "# mounts"; cat /proc/self/mountinfo
  echo "# ldconfig -p (driver)"; ldconfig -p | grep -E 'libcuda\.|libnvidia-ml|libnvidia-ptxjit' || true
  echo "# pip list"; "$PY" -m pip list --disable-pip-version-check 2>/dev/null || true
} > "$DEST/env.txt" 2>&1
grep -m1 -A12 '^# nvidia-smi$' "$DEST/env.txt" | tail -n +2 || true

step "controller virtualenv $VENV (the machine's packages + wheels from ${WHEELS:-nowhere})"
if [[ ! -x $VENV/bin/python ]]; then
  "$PY" -m venv --without-pip "$VENV" || die "cannot make a virtualenv with $PY"
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The base environment's site-packages, with its own .pth files processed (addsitedir), after the venv's.
"$PY" - "$SITE/_sparkfleet_base.pth" <<'EOF'
import site, sys
dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if d]
with open(sys.argv[1], "w") as fh:
    fh.write("import site; list(map(site.addsitedir, %r))\n" % dirs)
EOF
# sparkfleet from the checkout, and <root>: the package imports the collection's code (and Ansible finds the
# collection) as ansible_collections.sparkfleet.bench.
printf '%s\n' "$REPO" "$COLLECTIONS_ROOT" > "$SITE/_sparkfleet_repo.pth"
if [[ -n $WHEELS ]] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --ignore-installed --no-compile \
    --disable-pip-version-check "$WHEELS"/*.whl || die "installing the wheels from $WHEELS failed"
fi
cat > "$VENV/bin/sparkfleet" <<EOF
#!$VENV/bin/python
import sys
from sparkfleet.cli import main
sys.exit(main())
EOF
chmod +x "$VENV/bin/sparkfleet"
export PATH=$VENV/bin:$PATH
cd "$REPO" || die "no $REPO"  # from here on: the copy (Python puts the working directory first on its path)
"$VENV/bin/python" - "$REPO" <<'EOF' || die "the controller virtualenv is incomplete (missing wheels?)"
import os, sys
import ansible, jinja2, yaml, pandas, pynvml, sparkfleet.cli
from ansible.release import __version__ as v
from ansible_collections.sparkfleet.bench.plugins.module_utils.sparkfleet_host.contract import record
for mod in (sparkfleet.cli, record):  # this checkout's code, not another copy on the path
    assert os.path.realpath(mod.__file__).startswith(os.path.realpath(sys.argv[1]) + "/"), mod.__file__
print("ansible-core", v, "| pandas", pandas.__version__, "| nvidia-ml-py", getattr(pynvml, "__version__", "?"),
      "| run-record format", record.SCHEMA_VERSION)
EOF
command -v ansible-playbook >/dev/null || die "ansible-playbook not installed"

export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_LOCAL_TEMP=$WORK/.ansible-tmp ANSIBLE_HOME=$WORK/.ansible
export PYTHONUNBUFFERED=1
# NVLink multicast stays off on lent machines (harmless on one GPU); the overlay chroot keeps these too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NAME=$("$VENV/bin/python" -c 'import sys; from ansible_collections.sparkfleet.bench.plugins.plugin_utils.campaign import load; print(load(sys.argv[1])["name"])' "$CAMPAIGN") \
  || die "campaign $CAMPAIGN is not valid"
if [[ ${FRESH:-0} == 1 ]]; then rm -rf "${WORK:?}/results/$NAME" "${CTRL:?}/$NAME"; fi

# Mounts other than / that hold the workloads' Python and packages: an overlay of / does not show them.
BINDS=$("$VENV/bin/python" "$HERE/helpers.py" binds "$WORK" "$(readlink -f "$(command -v "$PY")")" \
  "$("$PY" -c 'import sys; print(sys.prefix)')" "$("$PY" -c 'import sys; print(sys.base_prefix)')" \
  "$("$PY" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null)" \
  "$("$PY" -c 'import transformers, os; print(os.path.dirname(transformers.__file__))' 2>/dev/null)") \
  || die "cannot work out the binds"
echo "extra binds for the chroot: $BINDS"

EXTRA=(-i "$INVENTORY" -e "sparkfleet_work_dir=$WORK" -e "sparkfleet_results_dir=$CTRL" -e "@$CAMPAIGN" -e "$BINDS")
# gpu_state reaches the GPU only through the read-only guard (without a GPU it finds no nvidia-smi, as it should).
if command -v nvidia-smi >/dev/null; then EXTRA+=(-e "gpu_state_nvidia_smi=$HERE/nvidia-smi-readonly"); fi
EXTRA+=("${@:2}")
cd "$REPO" || die "no $REPO"

step "provision: overlay of / as the native rootfs, GPU bind mounts, probes in the chroot"
ansible-playbook playbooks/provision.yml "${EXTRA[@]}" -v 2>&1 | cut -c1-4000
prov=${PIPESTATUS[0]}
echo "provision rc=$prov"

step "GPU state role in check mode (asks for persistence mode on: reported, never applied)"
ansible-playbook playbooks/gpu_state.yml "${EXTRA[@]}" --check -e sparkfleet_gpu_persistence_mode=true --diff 2>&1 \
  | cut -c1-2000
echo "gpu_state --check rc=${PIPESTATUS[0]}"

RUN_CAMPAIGN=$CAMPAIGN
if [[ $prov != 0 ]]; then
  # The chroot could not be made (or CUDA does not work inside it): measure the rest, say so.
  RUN_CAMPAIGN=$WORK/campaign-bare-only.yml
  "$VENV/bin/python" - "$CAMPAIGN" "$RUN_CAMPAIGN" <<'EOF'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
camp = data.get("sparkfleet_campaign", data)
camp["environments"] = [e for e in camp["environments"] if (e.get("kind") if isinstance(e, dict) else e) == "bare"]
camp["name"] += "-bare-only"
yaml.safe_dump({"sparkfleet_campaign": camp}, open(sys.argv[2], "w"), sort_keys=False)
EOF
  NAME=$NAME-bare-only
  echo "PROVISIONING FAILED (rc=$prov): running the campaign without the native environment, as $NAME"
fi
step "bench.yml (timeout ${BENCH_TIMEOUT}s)"
timeout --signal=INT --kill-after=30 "$BENCH_TIMEOUT" ansible-playbook bench.yml "${EXTRA[@]}" -e "@$RUN_CAMPAIGN"
bench=$?
echo "bench.yml rc=$bench"

step "restore (unmount the rootfs, put the GPU state back: nothing was changed)"
ansible-playbook playbooks/restore.yml "${EXTRA[@]}" 2>&1 | tail -n 4
grep -c " $WORK/rootfs" /proc/self/mountinfo | sed 's/^/mounts left under the rootfs dir: /'

step "results"
CAMP=$CTRL/$NAME
if ! compgen -G "$CAMP/*/runs/*/record.json" >/dev/null && [[ -d $WORK/results/$NAME ]]; then
  echo "no collected results: using the host's own tree"
  mkdir -p "$CAMP" && cp -a "$WORK/results/$NAME/." "$CAMP/"
fi
# Always from the records now there: bench.yml writes no report, and one left by an earlier call that resumed
# here would describe fewer runs.
sparkfleet report "$CAMP" || true
"$VENV/bin/python" "$HERE/helpers.py" summary "$CAMP" | tee "$DEST/compare.md"
for f in summary.md index.html; do
  [[ -f $CAMP/report/$f ]] && cp "$CAMP/report/$f" "$DEST/$f"
done
# Records, host facts and the report; logs only when small (engine logs of these workloads are a few KiB).
(cd "$CTRL" && find "$NAME" -type f -size -1024k ! -name '*.tgz' ! -path '*/.incoming/*' -print0 \
  | tar --null -czf "$DEST/results.tgz" -T -) && echo "packed $(tar -tzf "$DEST/results.tgz" | wc -l) files"
ls -la "$DEST"
[[ $bench == 0 ]] || { echo "bench.yml failed (rc=$bench)"; exit "$bench"; }
[[ $prov == 0 ]] || { echo "provisioning the native rootfs failed (rc=$prov)"; exit "$prov"; }
