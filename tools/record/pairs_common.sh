# Sourced by record_pairs2.sh, record_pairs3.sh and record_pairs4.sh (after they set O, the raw folder): the engine
# pinned to core 0, ONLY= filtering, one pair at a time through record_pair.sh, fp32, and the common light phase.
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$O"
export VLLM_CPU_OMP_THREADS_BIND=0
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
pair() { echo "$(date -u +%T) $4: recording"; "$R/record_pair.sh" "$@"; echo "$(date -u +%T) $4: done"; }
F="--dtype float32"
light() { echo "--phase concurrency=2,rate=0,duration=30,drain=3,prompt_min=50,prompt_max=100,out_min=32,out_max=64,seed=$1"; }
