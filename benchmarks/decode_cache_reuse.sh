#!/usr/bin/env bash
# Does a process that compiles the decode step afresh read the kernel tuning another process left in the same
# Inductor cache? hf_generate.py with --compile-tuning coordinate-descent, three processes, one cache:
#   first  - a cold cache: compiles and tunes every kernel (compile_tuned_now = all of them);
#   fxoff  - the FX graph and AOTAutograd caches off: compiles afresh, as a process whose compiled graph is not
#            in the cache does (another environment, another torch config), and should read the tuning;
#   envi   - another environment: `env -i` with a short PATH and CUDA_HOME only (what a chroot or a container
#            gets instead of the host's variables), which changes the FX graph cache's key.
# Per process: compile_tuned_now (kernels tuned in that process; 0 = all read from the cache), tpot_ms and
# decoder_setup_s (BENCHMARKS.md, "hf-generate decode against the roofline").
#
#   bash benchmarks/decode_cache_reuse.sh      # on a CUDA host with torch and transformers (the device tool)
set -u
WORK=${WORK:-/var/tmp/decode-cache-reuse}
C=$WORK/cache
rm -rf "$WORK" && mkdir -p "$C" "$WORK/run" || exit 1
S=$(cd "$(dirname "$0")/../roles/matrix/files" && pwd)/hf_generate.py
ARGS=(--model llama-1b --input-len 128 --output-len 32 --warmup 1 --iterations 1 --compile-tuning coordinate-descent)
show() {
  echo "== $1: $(grep -E '^(compile_tuned_now|tpot_ms|decoder_setup_s):' "$WORK/$1.out" | tr '\n' ' ')"
  grep -E "Traceback|rror" "$WORK/$1.out" | head -3
}
export TORCHINDUCTOR_CACHE_DIR=$C
cd "$WORK/run" || exit 1
timeout 150 python3 "$S" "${ARGS[@]}" > "$WORK/first.out" 2>&1; show first
TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0 timeout 120 python3 "$S" "${ARGS[@]}" \
  > "$WORK/fxoff.out" 2>&1; show fxoff
timeout 100 /usr/bin/env -i -C "$WORK/run" HOME=/root PATH="$(dirname "$(command -v python3)")":/usr/bin:/bin \
  LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib CUDA_HOME=/usr/local/cuda TORCHINDUCTOR_CACHE_DIR="$C" \
  python3 "$S" "${ARGS[@]}" > "$WORK/envi.out" 2>&1; show envi
