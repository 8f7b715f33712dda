#!/usr/bin/env bash
# One prepared GPU session: full-size Triton parity, then the bench_triton tables.
#
# Usage (on a machine with CUDA, from the repository root):
#     bash benchmarks/gpu_session.sh [OUTDIR]        # OUTDIR defaults to $OUT, else out/gpu
# Each stage has its own time limit (seconds, from the environment) so that one slow stage
# cannot eat the others: PARITY_S (150), ATTENTION_S (220), KLA_S (140). Every stage's
# output is kept in OUTDIR (env.txt, parity.txt, attention.txt/.json, kla.txt/.json) even
# when a stage is stopped at its limit.
set -u
outdir=${1:-${OUT:-out/gpu}}
mkdir -p "$outdir"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$py" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
} >"$outdir/env.txt" 2>&1
cat "$outdir/env.txt"

echo "== parity (pytest -m gpu tests/kernels)"
timeout "${PARITY_S:-150}" "$py" -m pytest -m gpu tests/kernels -q -p no:cacheprovider \
    2>&1 | tee "$outdir/parity.txt"

echo "== attention tables"
timeout "${ATTENTION_S:-220}" "$py" benchmarks/bench_triton.py --skip-kla --repeats 3 \
    --json "$outdir/attention.json" 2>&1 | tee "$outdir/attention.txt"

echo "== KLA tables"
timeout "${KLA_S:-140}" "$py" benchmarks/bench_triton.py --skip-attention --repeats 3 \
    --kla-chunks 32 64 128 --json "$outdir/kla.json" 2>&1 | tee "$outdir/kla.txt"
