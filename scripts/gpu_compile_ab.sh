#!/usr/bin/env bash
# torch.compile dynamic modes A/B (fresh process each): c(M) at the ouro-1.4b shape, then the
# c(1) kernel profile and the GPU parity suite under the default mode. One device call.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for mode in all rows; do
  LOOPSPEC_COMPILE_DYNAMIC=$mode timeout 150 python3 -m oracle bench c-table --preset ouro-1.4b --rows ${ROWS:-1,2,4,8,32,128} \
    --context 256 --repeats 50 --out "$OUT/ctable_$mode.json" 2>&1 | tail -3
  python3 -c "import json; print('$mode', json.load(open('$OUT/ctable_$mode.json'))['c_ms'])"
done
timeout 150 python3 scripts/gpu_c1_profile.py 1 2>&1 | tee "$OUT/c1_profile.log" | head -14
HYPOTHESIS_PROFILE=ci timeout 200 python3 -m pytest -q -m gpu gpu_tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_parity.log" | tail -5
