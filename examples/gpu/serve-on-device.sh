#!/usr/bin/env bash
# Serving on one NVIDIA GPU machine (a lent H100/H200: CUDA's compiler, CMake, ninja, PyTorch; no Docker, no
# network), from a clean checkout, as root:
#
#   examples/gpu/serve-on-device.sh [prepare|bench] [ANSIBLE-PLAYBOOK ARGS...]
#
#  1. the engine: llama.cpp's llama-server (and llama-bench) built with CUDA from the vendored llama.cpp of the
#     pinned llama-cpp-python 0.3.36 sdist, trimmed to what a CUDA build needs (SRC, made where pip works by
#     examples/gpu/prepare-serving.sh), into $WORK/llama.cpp (kept there: a later call on the same machine skips
#     the build: about 280 s on 16 cores; the binaries, about 80 MB each, are too large to carry to another
#     machine). llama-server is installed as /usr/local/bin/llama-server, where a bare run finds it on the host's
#     PATH and the native environment (a chroot into an overlay of /) finds it too;
#  2. the model: a 1.08 B parameter llama GGUF with random weights, f16 matrices (2048 x 16 layers, n_ff 8192,
#     32 heads, vocabulary 1024: tests/fleet/tinymodel.py's writer), and the tokenizer.json of the same vocabulary
#     beside it, in $WORK/models/llama-1b-f16 (kept there too);
#  3. (prepare, or SMOKE=1) a smoke test: llama-server -ngl 99 answers one 128-token request; llama-bench -ngl 99
#     (pp512, tg128 at depths 0 and 2048): the engine's own figures, beside the campaign's;
#  4. (bench, the default) run-on-device.sh on examples/gpu/serving-campaign.yml: provision, GPU state read only,
#     bench.yml (the serving client llama-benchy from the carried wheels, the collection's corpus), report.
#
# prepare: steps 1-3 only. On the device tool (10 minutes a call) run `prepare`, then `bench`, as two calls of one
# lease: the second finds the engine and the model in the work dir.
# Results go to $OUT when it is set, else examples/gpu/out/: serve.log (steps 1-3) and run-on-device.sh's files.
#
# Environment: SPARKFLEET_GPU_WORK (default /var/tmp/sparkfleet-gpu), WHEELS (default .whl in the checkout),
# SRC (default .cache/llama.cpp/llama.cpp-0.3.36-cuda-src.tar.gz), CUDA_ARCH (default 90: H100/H200),
# JOBS (default all CPUs), BENCH_TIMEOUT, FRESH (as run-on-device.sh).
set -uo pipefail

STAGE=bench
case "${1:-}" in prepare|bench) STAGE=$1; shift ;; esac
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
HERE=$CHECKOUT/examples/gpu
PY=${PYTHON:-python3}
WORK=${SPARKFLEET_GPU_WORK:-/var/tmp/sparkfleet-gpu}
WHEELS=${WHEELS:-$CHECKOUT/.whl}
SRC=${SRC:-$CHECKOUT/.cache/llama.cpp/llama.cpp-0.3.36-cuda-src.tar.gz}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
DEST=${OUT:-$CHECKOUT/examples/gpu/out}
ENGINE=$WORK/llama.cpp
MODEL_DIR=$WORK/models/llama-1b-f16
MODEL=$MODEL_DIR/llama-1b-f16.gguf
VERSION=0.3.36
# tests/fleet/llamacpp.py's CPU flags, with CUDA for this GPU: static ggml in one binary, libstdc++/libgcc linked in,
# no OpenMP, no curl/OpenSSL (nothing is downloaded), no web UI.
CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF
  -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc")
FLAGS_KEY=$(printf '%s\n' "$VERSION" "${CMAKE_FLAGS[@]}" | sha256sum | cut -c1-16)

mkdir -p "$DEST" "$WORK"
exec 3>&1 4>&2 > >(tee -a "$DEST/serve.log") 2>&1  # 3, 4: the caller's, given back before run-on-device.sh
TEE_PID=$!
trap 'exec 1>&3 2>&4; wait "$TEE_PID" 2>/dev/null' EXIT
step() { printf '\n=== %s  [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }
die() { echo "serve-on-device: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (installs llama-server in /usr/local/bin; run-on-device.sh mounts)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step "engine: llama.cpp $VERSION (llama-cpp-python sdist's vendor/llama.cpp), CUDA arch $CUDA_ARCH, in $ENGINE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if [[ -x $ENGINE/bin/llama-server && $(cat "$ENGINE/bin/flags.key" 2>/dev/null) == "$FLAGS_KEY" ]]; then
  echo "built already (this machine, this work dir): $(cat "$ENGINE/bin/build.json")"
else
  [[ -f $SRC ]] || die "no llama.cpp source at $SRC (examples/gpu/prepare-serving.sh makes it where pip works)"
  for tool in cmake ninja nvcc; do command -v $tool >/dev/null || die "building needs $tool on PATH"; done
  echo "cmake $(cmake --version | head -1 | cut -d' ' -f3), ninja $(ninja --version), $(nvcc --version | tail -2 | head -1)"
  rm -rf "$ENGINE" && mkdir -p "$ENGINE/src" "$ENGINE/bin"
  tar -xzf "$SRC" -C "$ENGINE/src" || die "cannot unpack $SRC"
  started=$(date +%s)
  cmake -S "$ENGINE/src/llama.cpp" -B "$ENGINE/build" "${CMAKE_FLAGS[@]}" > "$ENGINE/cmake.log" 2>&1 \
    || { tail -40 "$ENGINE/cmake.log"; die "cmake failed"; }
  cmake --build "$ENGINE/build" --target llama-server llama-bench -j "$JOBS" > "$ENGINE/build.log" 2>&1 \
    || { tail -60 "$ENGINE/build.log"; die "the build failed"; }
  took=$(( $(date +%s) - started ))
  cp "$ENGINE/build/bin/llama-server" "$ENGINE/build/bin/llama-bench" "$ENGINE/bin/" || die "no binaries built"
  echo "$FLAGS_KEY" > "$ENGINE/bin/flags.key"
  "$PY" - "$ENGINE/bin" "$took" "$JOBS" "${CMAKE_FLAGS[@]}" <<'EOF'
import hashlib, json, pathlib, sys, time
out, took, jobs, flags = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
info = {"sdist": "llama-cpp-python==0.3.36", "cmake_flags": flags, "targets": ["llama-server", "llama-bench"],
        "build_s": took, "jobs": jobs, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("llama-*"))}}
(out / "build.json").write_text(json.dumps(info, indent=2) + "\n")
EOF
  echo "built in ${took}s with -j $JOBS"; tail -3 "$ENGINE/build.log"
fi
install -m 0755 "$ENGINE/bin/llama-server" /usr/local/bin/llama-server || die "cannot install llama-server"
ls -la "$ENGINE/bin"
llama-server --version 2>&1 | tail -2
echo "# ldd llama-server"; ldd /usr/local/bin/llama-server | sed 's/ (0x.*//'

step "model: 1.08 B parameter llama GGUF, random weights, f16 matrices, in $MODEL_DIR"
if [[ -f $MODEL && -f $MODEL_DIR/tokenizer.json && -f $MODEL_DIR/model.json ]]; then
  echo "written already: $(cat "$MODEL_DIR/model.json")"
else
  SITE=$WORK/pylib
  if ! "$PY" -c 'import gguf' 2>/dev/null && ! PYTHONPATH=$SITE "$PY" -c 'import gguf' 2>/dev/null; then
    compgen -G "$WHEELS/gguf-*.whl" >/dev/null || die "no gguf wheel in $WHEELS"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$SITE" \
      "$WHEELS"/gguf-*.whl || die "cannot install gguf from $WHEELS"
  fi
  rm -rf "$MODEL_DIR" && mkdir -p "$MODEL_DIR"
  PYTHONPATH=$SITE:$CHECKOUT/tests/fleet "$PY" - "$MODEL_DIR" <<'EOF' || die "writing the model failed"
import json, pathlib, sys, time
import tinymodel
# Llama-3.2-1B's width and depth class: 2048 x 16 layers, n_ff 8192, 32 heads (MHA); the tests' 1024-token
# vocabulary (a random model needs no more), so the weights are all in the layers: 1.08 B parameters, f16.
SHAPE = {"vocab": 1024, "n_embd": 2048, "n_layer": 16, "n_head": 32, "n_ff": 8192, "n_ctx": 8192}
started = time.monotonic()
made = tinymodel.make_tiny_model(sys.argv[1], shape=SHAPE, matrix_dtype="f16", name="llama-1b-f16")
d, ff, layers, vocab = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_layer"], SHAPE["vocab"]
params = 2 * vocab * d + d + layers * (4 * d * d + 3 * d * ff + 2 * d)
info = {"shape": SHAPE, "seed": tinymodel.SEED, "matrix_dtype": "f16", "parameters": params,
        "gguf_bytes": made["gguf"].stat().st_size, "write_s": round(time.monotonic() - started, 1)}
(pathlib.Path(sys.argv[1]) / "model.json").write_text(json.dumps(info) + "\n")
print(json.dumps(info))
EOF
fi
ls -la "$MODEL_DIR"
cp "$CHECKOUT/roles/serving_client/files/corpus.txt" "$WORK/models/corpus.txt"

if [[ $STAGE == prepare || ${SMOKE:-0} == 1 ]]; then
step "smoke test: llama-server -ngl 99, one 128-token request; llama-bench -ngl 99"
LOG=$WORK/smoke-server.log
"$PY" - "$MODEL" "$LOG" <<'EOF' || echo "the smoke test failed"
import json, subprocess, sys, time, urllib.request
model, log = sys.argv[1], sys.argv[2]
argv = ["llama-server", "-m", model, "--host", "127.0.0.1", "--port", "18181", "-ngl", "99", "-c", "4096", "-np", "1"]
with open(log, "wb") as out:
    server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
try:
    started = time.monotonic()
    while time.monotonic() - started < 120 and server.poll() is None:
        try:
            with urllib.request.urlopen("http://127.0.0.1:18181/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    print("llama-server ready after %.1f s" % (time.monotonic() - started))
    body = json.dumps({"prompt": "The weather today", "n_predict": 128, "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:18181/completion", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        r = json.load(resp)
    t = r.get("timings", {})
    print("one request: %s tokens predicted at %.1f tok/s (prompt %s tokens at %.1f tok/s); text %r"
          % (r.get("tokens_predicted"), t.get("predicted_per_second", 0), t.get("prompt_n"),
             t.get("prompt_per_second", 0), r.get("content", "")[:60]))
finally:
    server.terminate()
    server.wait(20)
EOF
grep -E "CUDA0|offloaded|model size|model params|file type" "$LOG" | head -8
timeout 120 "$ENGINE/bin/llama-bench" -m "$MODEL" -ngl 99 -p 512 -n 128 -d 0,2048 -r 3 -o md 2>&1 | tail -8
fi

[[ $STAGE == prepare ]] && exit 0

step "the campaign: run-on-device.sh on examples/gpu/serving-campaign.yml"
CAMPAIGN=$HERE/serving-campaign.yml
if [[ $WORK != /var/tmp/sparkfleet-gpu ]]; then
  sed "s|/var/tmp/sparkfleet-gpu/|$WORK/|g" "$CAMPAIGN" > "$WORK/serving-campaign.yml" && CAMPAIGN=$WORK/serving-campaign.yml
fi
# run-on-device.sh keeps its own log (run.log): it gets the caller's stdout and stderr back, never a closed one
# (a process substitution made with 1 and 2 closed would hold its own pipe open, and the script's wait never end).
exec 1>&3 2>&4 3>&- 4>&-; wait "$TEE_PID" 2>/dev/null; trap - EXIT
CAMPAIGN=$CAMPAIGN SPARKFLEET_GPU_WORK=$WORK exec bash "$HERE/run-on-device.sh" "$WHEELS" \
  -e "sparkfleet_serving_client=$WORK/venv/bin/llama-benchy" -e "sparkfleet_serving_corpus=$WORK/models/corpus.txt" "$@"
