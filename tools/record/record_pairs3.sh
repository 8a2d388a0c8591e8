#!/usr/bin/env bash
# Record the third set of what-if pairs (vllm-0.32-cpu-whatif2/, session 6): speculative decoding off -> on and
# --max-model-len lowered 2048 -> 512; the same seeded load each side, a fresh server each side (record_pair.sh),
# on the tiny model. ~12 min. Run it ALONE on the machine.
# usage: tools/record/record_pairs3.sh VENV TINY_DIR RAW_DIR          (TINY_DIR as in record_margins.sh)
#   env: ONLY="name name" records only those pairs
set -uo pipefail
V=$1 TINY=$2 O=$3
# shellcheck source=pairs_common.sh
. "$(dirname "$0")/pairs_common.sh"

# n-gram speculative decoding off -> on (the flags of vllm-0.32-cpu-specdecode/, JSON without spaces because
# record_pair.sh splits flags on whitespace). Half the requests greedy (--greedy 0.5: a random-weight model's greedy
# output loops, so its drafts are accepted; sampled output's are ~never), the other half temperature 1.
SPEC='--speculative-config {"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4,"prompt_lookup_min":1}'
S="prompt_min=50,prompt_max=200,out_min=32,out_max=128,greedy=0.5"
# shellcheck disable=SC2046
want tiny_specdec && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$TINY" "$O" tiny_specdec \
  "--max-model-len 2048 $F" "--max-model-len 2048 $SPEC $F" \
  $(light 461) --phase concurrency=8,duration=60,drain=3,$S,seed=462
# --max-model-len lowered 2048 -> 512 under prompts of 200-600 words and 32-128 tokens out: ~40 % of requests
# (prompt + max_tokens > 512) are refused with HTTP 400 after the change (load.py moves on after 0.5 s).
M="prompt_min=200,prompt_max=600,out_min=32,out_max=128"
# shellcheck disable=SC2046
want tiny_mml && SERVER_ENV=VLLM_CPU_KVCACHE_SPACE=1 pair "$V" "$TINY" "$O" tiny_mml \
  "--max-model-len 2048 $F" "--max-model-len 512 $F" \
  $(light 471) --phase concurrency=8,duration=60,drain=3,$M,seed=472
echo "$(date -u +%T) all done"
