#!/usr/bin/env bash
# NCCL for real on one machine of two or more NVIDIA GPUs (the lent nvidia-h100-x2: PyTorch with its NCCL, nvcc,
# no network, no RDMA device), as root:
#
#   [NCCL_TESTS_SRC=DIR] bash examples/nccl-two-gpu/run-on-device.sh
#
#  1. the machine: nvidia-smi, nvidia-smi topo -m (how the GPUs are linked), torch and its NCCL;
#  2. allreduce.py: torch.distributed all_reduce over NCCL, one process per GPU, 8 MiB..2 GiB, its transport read
#     from its own NCCL_DEBUG=INFO log (results in default/);
#  3. the same with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, 8..256 MiB: NCCL has to use its network transport,
#     here NET/Socket, the fallback a pair preflight refuses (results in socket/);
#  4. with NCCL_TESTS_SRC (a checkout of NVIDIA/nccl-tests): all_reduce_perf built against PyTorch's NCCL
#     (nvidia-nccl wheel headers and library, sm_90 only), run -b 8M -e 2G -f 2 -g 2 with NCCL_DEBUG=INFO, and
#     again over sockets, its real output kept as the parser's fixtures (nccl-tests/).
#
# NVLink multicast stays off everywhere (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1): on a shared machine a program using it can put the host's GPUs out of service. Nothing
# here changes clocks, power limits or persistence mode.
#
# Results go to $OUT when set (the device tool brings back what is there; at most 8 files), else
# examples/nccl-two-gpu/out/: run.log env.txt default/{results.json,nccl-debug.log} socket/{...}
# nccl-tests/{all_reduce_perf.log,all_reduce_perf-socket.log}
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
DEST=${OUT:-$HERE/out}
PY=${PYTHON:-python3}
WORK=${SPARKFLEET_NCCL_WORK:-/var/tmp/sparkfleet-nccl}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$DEST" "$WORK"
exec > >(tee -a "$DEST/run.log") 2>&1
TEE_PID=$!
trap 'exec 1>&- 2>&-; wait "$TEE_PID" 2>/dev/null' EXIT
step() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }

step "machine"
{
  echo "# uname"; uname -a
  echo "# nvidia-smi"; nvidia-smi
  echo "# nvidia-smi topo -m"; nvidia-smi topo -m
  echo "# nvidia-smi nvlink -s"; nvidia-smi nvlink -s
  echo "# python, torch, NCCL"
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda,
    "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
  echo "# /dev/infiniband"; ls -la /dev/infiniband 2>&1
  echo "# network interfaces"; ip -br addr 2>&1 || cat /proc/net/dev
  echo "# environment"; env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_|CUDA_)' | sort
} > "$DEST/env.txt" 2>&1
sed -n '/^# nvidia-smi topo -m/,/^# nvidia-smi nvlink/p' "$DEST/env.txt"

step "allreduce.py: NCCL's own choice of transport, 8 MiB..2 GiB"
"$PY" "$HERE/allreduce.py" --out "$DEST/default" --work "$WORK/default"
rc_default=$?

step "allreduce.py: P2P and SHM disabled, so NCCL's network transport (NET/Socket here), 8..256 MiB"
"$PY" "$HERE/allreduce.py" --out "$DEST/socket" --work "$WORK/socket" --force-socket --max-bytes 256M \
  --warmup 2 --iters 5
rc_socket=$?

if [[ -n ${NCCL_TESTS_SRC:-} ]]; then
  step "nccl-tests all_reduce_perf from $NCCL_TESTS_SRC, built against PyTorch's NCCL"
  NCCL_PKG=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  NCCL_HOME=$WORK/nccl-home
  mkdir -p "$NCCL_HOME/lib"
  ln -sfn "$NCCL_PKG/include" "$NCCL_HOME/include"
  ln -sf "$NCCL_PKG/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so"
  ln -sf "$NCCL_PKG/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so.2"
  grep -E '^#define NCCL_(MAJOR|MINOR|PATCH)' "$NCCL_HOME/include/nccl.h"
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=$(dirname "$(dirname "$NVCC")")
  BUILD=$WORK/nccl-tests-build
  rm -rf "$WORK/nccl-tests" && cp -r "$NCCL_TESTS_SRC" "$WORK/nccl-tests"
  timeout 300 make -C "$WORK/nccl-tests/src" -j"$(nproc)" MPI=0 BUILDDIR="$BUILD" NCCL_HOME="$NCCL_HOME" \
    CUDA_HOME="$CUDA_HOME" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" "$BUILD/all_reduce_perf" \
    2>&1 | tail -n 20
  if [[ -x $BUILD/all_reduce_perf ]]; then
    mkdir -p "$DEST/nccl-tests"
    export LD_LIBRARY_PATH=$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    (cd "$WORK" && NCCL_DEBUG=INFO timeout 240 "$BUILD/all_reduce_perf" -b 8M -e 2G -f 2 -g 2) \
      > "$DEST/nccl-tests/all_reduce_perf.log" 2>&1
    echo "all_reduce_perf rc=$?"; grep -vE 'NCCL (INFO|WARN)' "$DEST/nccl-tests/all_reduce_perf.log"
    (cd "$WORK" && NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 180 \
      "$BUILD/all_reduce_perf" -b 8M -e 256M -f 2 -g 2 -w 2 -n 5) > "$DEST/nccl-tests/all_reduce_perf-socket.log" 2>&1
    echo "all_reduce_perf (sockets) rc=$?"
    grep -vE 'NCCL (INFO|WARN)' "$DEST/nccl-tests/all_reduce_perf-socket.log"
  else
    echo "nccl-tests did not build"
  fi
fi
step "done: allreduce.py rc=$rc_default (default), rc=$rc_socket (sockets)"
ls -laR "$DEST"
exit $((rc_default || rc_socket))
