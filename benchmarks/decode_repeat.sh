#!/usr/bin/env bash
# hf_generate.py's graph decoder in N separate processes per kernel-tuning setting, one fresh Inductor cache
# per setting (the first process compiles and tunes, the others find the cache): is the time per token the
# same from process to process, and is the tuned state (Inductor's *.best_config files) the same? After each
# process: tpot_ms, decode_tok_s, decoder_setup_s, the number of best_config files, a hash of their contents
# and how many of them the process wrote (as this script finds them, and as hf_generate.py's compile_tuned_now
# counts them) (BENCHMARKS.md, "hf-generate decode against the roofline").
#
#   N=5 bash benchmarks/decode_repeat.sh        # on a CUDA host with torch and transformers (the device tool)
#   TUNINGS=coordinate-descent TORCHINDUCTOR_COMPILE_THREADS=1 N=3 bash benchmarks/decode_repeat.sh
#   INDUCTOR_DEBUG=1 ...   # also keeps each process's debug log of Inductor's autotuning (its cache reads and
#                          # saves, the coordinate-descent steps) in $WORK/<tuning>-<i>.log and counts its lines
set -uo pipefail
N=${N:-5}
WORK=${WORK:-$(mktemp -d /var/tmp/decode-repeat.XXXX)}
mkdir -p "$WORK" || exit 1
cd "$(dirname "$0")/../roles/matrix/files"
echo "TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-unset}"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
shape=(--model llama-1b --input-len 128 --output-len 32 --warmup 1 --iterations 2)
for tuning in ${TUNINGS:-coordinate-descent none}; do
  export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor-$tuning
  for i in $(seq 1 "$N"); do
    mark=$WORK/mark && touch "$mark" && sleep 1  # a file the process writes is then newer, whatever the clock tick
    if [[ ${INDUCTOR_DEBUG:-0} == 1 ]]; then
      export TORCH_LOGS=+torch._inductor.runtime.triton_heuristics,+torch._inductor.runtime.autotune_cache
    fi
    out=$(timeout 200 python3 hf_generate.py "${shape[@]}" --compile-tuning "$tuning" 2>&1)
    if [[ ${INDUCTOR_DEBUG:-0} == 1 ]]; then
      printf '%s\n' "$out" > "$WORK/$tuning-$i.log"
      echo "debug log $WORK/$tuning-$i.log: $(grep -ci 'coordesc' "$WORK/$tuning-$i.log") lines name coordesc," \
        "$(grep -ci 'save' "$WORK/$tuning-$i.log") name a save"
    fi
    pick() { sed -n "s/^$1: //p" <<<"$out" | head -1; }
    configs=$(find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' 2>/dev/null | sort)
    written=$(find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -newer "$mark" 2>/dev/null | wc -l)
    state=$(for f in $configs; do cat "$f" | sed 's/"time_taken_ms": [0-9.e-]*//'; echo; done | sha1sum | cut -c1-12)
    echo "tuning=$tuning process=$i status=$(pick status) tpot_ms=$(pick tpot_ms) decode_tok_s=$(pick decode_tok_s)" \
      "setup_s=$(pick decoder_setup_s) best_configs=$(wc -w <<<"$configs") written=$written" \
      "tuned_now=$(pick compile_tuned_now) state=$state" \
      "check=$(pick decode_check | cut -c1-2)"
    [[ $(pick status) == ok ]] || grep -E 'rror' <<<"$out" | tail -3
  done
done
