#!/usr/bin/env bash
# The prepared device check, one run of at most ~8 minutes on a CUDA machine:
#   1. the gpu-marked tests: CUDA-graph replay == eager at every (B, W), graphed sampling and
#      needle-in-a-batch, graphed greedy float64 == refdec;
#   2. `loopcert certify --device cuda --quick` (CUDA graphs on);
#   3. `loopcert bench --device cuda --quick`: the speedup report with its batch table on CUDA.
# Plain python3 -m ... (the device machine has no network: tox cannot install there). Every step
# runs under its own timeout and writes its log; the script goes on after a failed step and
# exits non-zero if any failed. OUT (default reports/out/gpu-check) receives the logs, the
# certificate and the report.
#
#   bash benchmarks/gpu_check.sh            # on the device: python3 must import torch with CUDA
set -u
OUT=${OUT:-reports/out/gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=()

step() {  # step NAME SECONDS COMMAND...: run it, log it, remember a failure
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/summary.txt"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "== $name: rc $rc in $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

: >"$OUT/summary.txt"
probe="import sys, torch; ok = torch.cuda.is_available(); \
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if ok else 'NO CUDA'); \
sys.exit(0 if ok else 1)"
if ! "$PY" -c "$probe" >>"$OUT/summary.txt" 2>&1; then
    cat "$OUT/summary.txt"
    echo "gpu_check: CUDA is not available: nothing was checked" | tee -a "$OUT/summary.txt"
    exit 2
fi
step gpu_tests 200 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/fastdec/test_gpu.py
step certify 150 "$PY" -m loopcert certify --device cuda --quick --out "$OUT/certify"
step bench 220 "$PY" -m loopcert bench --device cuda --quick --out "$OUT/bench"
if [ ${#failed[@]} -ne 0 ]; then
    echo "gpu_check: FAILED: ${failed[*]}" | tee -a "$OUT/summary.txt"
    exit 1
fi
echo "gpu_check: every step passed" | tee -a "$OUT/summary.txt"
