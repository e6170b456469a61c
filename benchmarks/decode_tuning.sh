#!/usr/bin/env bash
# hf_generate.py's graph decoder with and without Inductor's coordinate-descent tuning, one process each, in
# that order, on one GPU (BENCHMARKS.md, "hf-generate decode against the roofline"). The first process warms
# nothing for the second (the tuning is part of Inductor's cache key); whether each finds a warm cache depends on
# what ran on the machine before (Inductor's default cache, /tmp/torchinductor_$USER).
#
#   bash benchmarks/decode_tuning.sh            # on a CUDA host with torch and transformers (the device tool)
set -uo pipefail
cd "$(dirname "$0")/../roles/matrix/files"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
shape=(--model llama-1b --input-len 128 --output-len 32 --warmup 1 --iterations 3)
for tuning in none coordinate-descent; do
  echo "== --compile-tuning $tuning"
  timeout 200 python3 hf_generate.py "${shape[@]}" --compile-tuning "$tuning" 2>&1 \
    | grep -E "^(device|torch_version|weight_bytes|decode_path|compiled|compile_tuning|decoder_setup_s|decode_check|tpot_ms|decode_tok_s|status):|rror"
done
