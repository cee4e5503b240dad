#!/usr/bin/env bash
# Issue 60 on the GPU, one device call (results under $OUT): the exactness tier of the invariant
# kernels (torch-cuda-inv) at tiny and small through `check`, c(M) of the invariant mode against the
# default at the ouro-1.4b shape (in turn), the tier alone at ouro-1.4b through `localize`, and the
# compiled invariance tests of the Triton primitives. Each step has its own time limit.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
for preset in tiny small; do
  /usr/bin/time -f "$preset wall %e s" timeout ${CHECK_S:-110} python3 -m oracle check --backend torch-cuda-inv \
    --preset $preset --no-drift --no-shrink --json --quiet > "$OUT/check_inv_$preset.json" 2> "$OUT/check_inv_$preset.err"
  tail -2 "$OUT/check_inv_$preset.err"
  python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(sys.argv[2], 'ok', v['ok'], v.get('invariance',{}).get('claims'), v.get('invariance',{}).get('values'), [c['detail'][:300] for c in v['checks'] if not c['ok']][:3])" \
    "$OUT/check_inv_$preset.json" $preset
done
for arm in default inv; do
  /usr/bin/time -f "ctable $arm wall %e s" env LOOPSPEC_INVARIANT=$([ $arm = inv ] && echo 1 || echo 0) \
    timeout ${CTABLE_S:-90} python3 -m oracle bench c-table --preset ouro-1.4b --context 256 -q \
    --rows ${ROWS:-1,2,4,5,8,16,20,40,80} --repeats ${REPEATS:-30} --force --out "$OUT/ctable_$arm.json" 2>&1 | tail -3
done
/usr/bin/time -f "localize ouro wall %e s" timeout ${LOC_S:-120} python3 -m oracle localize --backend torch-cuda-inv \
  --preset ouro-1.4b --counts 5,3,1 --rounds 1 --allow-large --json --quiet > "$OUT/localize_inv_ouro.json" \
  2> "$OUT/localize_inv_ouro.err"; tail -2 "$OUT/localize_inv_ouro.err"; head -c 1500 "$OUT/localize_inv_ouro.json"; echo
timeout ${PRIMS_S:-90} python3 -m pytest -q -m gpu gpu_tests/test_invariant_triton_gpu.py -p no:cacheprovider 2>&1 \
  | tee "$OUT/prims_gpu.log" | tail -4
