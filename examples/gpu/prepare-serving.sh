#!/usr/bin/env bash
# Where pip works (once): what serve-on-device.sh needs on a GPU machine that cannot download anything.
#
#   examples/gpu/prepare-serving.sh        (from the checkout's root; PIP: the pip to use, default python3 -m pip)
#
#  .whl/                       wheels for CPython 3.12 / x86-64 (the lent machines' Python): run-on-device.sh's
#                              (ansible-core and its needs, nvidia-ml-py), the serving client llama-benchy 0.4.0 and
#                              what it needs beyond the machine's own packages (openai, pydantic, ...), and gguf (the
#                              model writer). llama-benchy's "asyncio" requirement is Python's own module: not carried.
#  .cache/llama.cpp/llama.cpp-0.3.36-cuda-src.tar.gz
#                              vendor/llama.cpp of the pinned llama-cpp-python 0.3.36 sdist (77 MB, over the device's
#                              64 MiB), without models/ docs/ media/ tests/ benches/ gguf-py/ and the GPU backends
#                              other than CUDA: about 8.5 MB, enough for llama-server and llama-bench with CUDA.
#
# Both paths are ignored by git (.gitignore: /.whl/, /.cache/); the device tool carries them: carry [".whl", ".cache"].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PIP=${PIP:-python3 -m pip}
VERSION=0.3.36

$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  ansible-core==2.21.5 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 nvidia-ml-py==13.615.71 \
  llama-benchy==0.4.0 openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 sniffio==1.3.1 \
  gguf==0.19.0

OUT=.cache/llama.cpp/llama.cpp-$VERSION-cuda-src.tar.gz
if [[ ! -f $OUT ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  $PIP download -q --no-deps --no-binary :all: -d "$tmp" "llama-cpp-python==$VERSION"
  tar -xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp"
  excludes=()
  for d in models docs media tests benches gguf-py; do excludes+=("--exclude=llama.cpp/$d"); done
  for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
    excludes+=("--exclude=llama.cpp/ggml/src/ggml-$b")
  done
  mkdir -p "$(dirname "$OUT")"
  tar -C "$tmp/llama_cpp_python-$VERSION/vendor" -czf "$OUT" "${excludes[@]}" llama.cpp
fi
ls -la .whl "$OUT"
du -sh .whl .cache/llama.cpp
