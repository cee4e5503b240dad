#!/usr/bin/env bash
# One device call: GPU parity tests, c(1) vs the weight-streaming floor, and the
# block-vs-loop sweep at the ouro-1.4b shape. Results land in $OUT (or ./out).
#   bash scripts/gpu_run.sh [invariant|check|parity|full|full2|floor|procs|judge|planes|rows|hostprof|trace|split|split2|pinned|logits|paths|splitk|prefetch|splitqg|layerprobe|smalltiles|abbase|profile|sweep ...]   (default: parity floor sweep)
#   check: `oracle check --backend torch-cuda` on tiny and small; full: scripts/gpu_parity_full.py
#   full2: its 12 cases as two halves on two GPUs
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
steps=${*:-parity floor sweep}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' | tee -a "$OUT/gpu.txt"
# c(M) of arms: ARMS (default $2) each in turn, twice, separate processes; arm X runs with
# LOOPSPEC_GEMV_CONFIG=$1/X.cfg where that file exists, and with the variables `arm_env X` prints.
# One JSON ($3) of every config and run, with the object $4 merged in. Used by splitk, prefetch, splitqg.
arm_env() { :; }
c_arms() {
  local dir=$1 arms=${ARMS:-$2} arm n cfg
  for arm in $arms $arms; do
    n=$(ls "$dir"/${arm}_*.json 2>/dev/null | wc -l)
    cfg=$([ -f "$dir/$arm.cfg" ] && echo "$dir/$arm.cfg")
    env LOOPSPEC_GEMV_CONFIG=$cfg $(arm_env $arm) timeout 150 python3 -m oracle bench c-table --preset ouro-1.4b \
      --context 256 -q --rows ${ROWS:-1,2,4,8,16} --repeats 100 --out "$dir/${arm}_$n.json" 2>&1 | tail -3
    python3 -c "import json,sys; print('$arm', json.load(open(sys.argv[1]))['c_ms'])" "$dir/${arm}_$n.json"
  done
  python3 - "$dir" "$3" "$4" <<'PY'
import glob, json, os, sys
d, out, meta = sys.argv[1:]
runs = {os.path.basename(f)[:-5]: json.load(open(f)) for f in sorted(glob.glob(f"{d}/*_*.json"))}
cfgs = {os.path.basename(f)[:-4]: json.load(open(f)) for f in sorted(glob.glob(f"{d}/*.cfg"))}
json.dump({"configs": cfgs, **json.loads(meta), "runs": runs}, open(out, "w"), indent=1)
PY
}
for s in $steps; do case $s in
invariant)  # issue 60: the exactness tier on the invariant kernels (torch-cuda-inv) at tiny, small and ouro-1.4b;
  # c(M) of the invariant mode against the default, in turn, twice each; the cost model under each table
  for preset in tiny small; do
    timeout 300 python3 -m oracle check --backend torch-cuda-inv --preset $preset --json --quiet --no-shrink \
      > "$OUT/check_torch_cuda_inv_$preset.json" 2> "$OUT/check_torch_cuda_inv_$preset.err"
    python3 -c "import json,sys; v=json.load(open(sys.argv[1])); print(sys.argv[2], 'ok', v['ok'], v.get('invariance'))" \
      "$OUT/check_torch_cuda_inv_$preset.json" $preset
  done
  timeout ${FULL_TIMEOUT:-400} python3 scripts/gpu_parity_full.py --backend torch-cuda-inv --cases ${CASES:-4} \
    --json "$OUT/parity_full_inv.json" 2>&1 | tee "$OUT/parity_full_inv.log" | tail -12
  for arm in default inv default inv; do
    n=$(ls "$OUT"/ctable_${arm}_*.json 2>/dev/null | wc -l)
    env LOOPSPEC_INVARIANT=$([ $arm = inv ] && echo 1 || echo 0) timeout 200 python3 -m oracle bench c-table \
      --preset ouro-1.4b --context 256 -q --rows ${ROWS:-1,2,4,5,8,10,16,20,32,40,64,80,160,320} --repeats 50 \
      --force --out "$OUT/ctable_${arm}_$n.json" 2>&1 | tail -2
  done
  for arm in default inv; do
    python3 -m oracle cost --ctable "$OUT/ctable_${arm}_0.json" --force --k 4 --batch 1,4,16,64 --json \
      > "$OUT/cost_$arm.json"; python3 -m oracle cost --ctable "$OUT/ctable_${arm}_0.json" --force --k 4 --batch 1,4,16,64
  done ;;
check)
  for preset in tiny small; do
    timeout 300 python3 -m oracle check --backend torch-cuda --preset $preset 2>&1 | tee "$OUT/check_torch_cuda_$preset.log" | tail -4
  done ;;
full)
  timeout ${FULL_TIMEOUT:-560} python3 scripts/gpu_parity_full.py --cases ${CASES:-12} ${FULL_ARGS:-} \
    --json "$OUT/parity_full.json" 2>&1 | tee "$OUT/parity_full.log" | tail -30 ;;
full2)   # the 12 cases in two halves side by side, one per GPU (2 GPUs), then merged
  ( CUDA_VISIBLE_DEVICES=0 timeout ${FULL_TIMEOUT:-560} python3 scripts/gpu_parity_full.py --cases 12 --only 0:6 \
      --json "$OUT/parity_full_a.json" > "$OUT/parity_full_a.log" 2>&1 ) &
  ( CUDA_VISIBLE_DEVICES=1 timeout ${FULL_TIMEOUT:-560} python3 scripts/gpu_parity_full.py --cases 12 --only 6:12 \
      --time-judge --json "$OUT/parity_full_b.json" > "$OUT/parity_full_b.log" 2>&1 ) &
  wait
  grep -h "^ok\|^FAIL\|^     " "$OUT/parity_full_a.log" "$OUT/parity_full_b.log"
  python3 scripts/gpu_parity_full.py --merge "$OUT/parity_full_a.json" "$OUT/parity_full_b.json" \
    --json "$OUT/parity_full.json" > "$OUT/parity_full.log" 2>&1; grep -v "excused:" "$OUT/parity_full.log" ;;
parity)
  /usr/bin/time -f "gpu-parity wall %e s" env HYPOTHESIS_PROFILE=ci timeout 400 python3 -m pytest -q -m gpu gpu_tests \
    -p no:cacheprovider --durations=8 2>&1 | tee "$OUT/gpu_parity.log" | tail -40 ;;
floor)   # c(M) at M = 1..320 against the weight-streaming floor, and the floor with each row's KV reads
  timeout 300 python3 - <<'PY' 2>&1 | tee "$OUT/floor.json"
import json, torch
from bench import calls, rounds
from oracle.config import preset
from oracle.model import weight_shapes
cfg, ctx = preset("ouro-1.4b"), 256
lin = [n for n in weight_shapes(cfg) if n.startswith("model.layers.") and n.endswith("proj.weight")]
wbytes = 2 * sum(int(torch.tensor(weight_shapes(cfg)[n]).prod()) for n in lin)
kv_row = 2 * 2 * cfg.num_layers * (ctx + 1) * cfg.num_kv_heads * cfg.head_dim    # K and V, BF16, keys 0..ctx
bw = rounds.copy_bandwidth("cuda")
rows = [1, 2, 4, 8, 16, 32, 64, 128, 320]
ct = calls.measure_c_table("ouro-1.4b", rows, ctx, device="cuda", repeats=100)
floor = wbytes / bw * 1e3
floor_kv = {str(m): (wbytes + m * kv_row) / bw * 1e3 for m in rows}
print(json.dumps({"linear_weight_bytes": wbytes, "kv_bytes_per_row": kv_row, "copy_bandwidth_bytes_per_s": bw,
                  "context_len": ctx, "floor_ms": floor, "floor_with_kv_ms": floor_kv, "c_ms": ct["c_ms"],
                  "path": ct["path"], "c_over_floor": {m: c / floor for m, c in ct["c_ms"].items()},
                  "c_over_floor_with_kv": {m: c / floor_kv[m] for m, c in ct["c_ms"].items()}}, indent=1))
PY
  ;;
procs)   # the logits processors' added work: paired block/loop rounds at C=64 without and with them, twice each
  P="--repetition-penalty 1.3 --presence-penalty 0.5 --frequency-penalty 0.2 --logit-bias 5:2.0,9:-1.5 --bad-words 3,4/7"
  for arm in off on off on; do
    n=$(ls "$OUT"/procs_${arm}_*.json 2>/dev/null | wc -l)
    timeout ${PROCS_TIMEOUT:-150} python3 -m oracle bench rounds --preset ouro-1.4b --batch ${BATCH:-64} --k 4 -d 2 -D 4 \
      --tokens ${TOKENS:-32} --repeats ${REPEATS:-5} --context 256 --temperature ${TEMP:-0} $([ $arm = on ] && echo $P) \
      --json > "$OUT/procs_${arm}_$n.json" 2> "$OUT/procs_${arm}_$n.log"; tail -c 400 "$OUT/procs_${arm}_$n.json"; echo
  done ;;
judge)   # the JAX FP32 judge's round at ouro-1.4b, C=16, context 1024, against its floor (oracle.cost.judge_round_floor)
  timeout ${JUDGE_TIMEOUT:-300} python3 scripts/gpu_judge_time.py ${JUDGE_ARGS:-} --json "$OUT/judge_time.json" \
    2>&1 | tee "$OUT/judge_time.log" | tail -30 ;;
planes)  # the Pallas attention over the planes: tilings against the XLA gather (attention alone), then the
         # judge's round: the former defaults (HIGHEST, XLA attention), the defaults (TF32x3, Pallas attention),
         # these with rows_bits 2 and the fetch thread, and that with the profile's best tiling if not the default
  timeout ${PROF_TIMEOUT:-150} python3 scripts/gpu_judge_profile.py --parts attention --out "$OUT" \
    --best-tile "$OUT/planes_tile.txt" 2>&1 | tee "$OUT/planes_profile.log" | grep "^attention G\|^best"
  tile=$(sed -n 1p "$OUT/planes_tile.txt" 2>/dev/null | tr , :)
  V="--variant dot=highest,attn=xla,kv_fetch=async --variant kv_fetch=async"
  V="$V --variant rows_bits=2,kv_fetch=thread"
  [ -n "$tile" ] && [ "$tile" != default ] && V="$V --variant rows_bits=2,kv_fetch=thread,tile=$tile"
  echo "variants: $V"
  timeout ${JUDGE_TIMEOUT:-300} python3 scripts/gpu_judge_time.py $V \
    --json "$OUT/judge_time.json" 2>&1 | tee "$OUT/judge_time.log" | grep -v "^ *per round" | tail -24 ;;
rows)    # the judge's default dot="rows" (judge_jax/skinny.py: products of 2..128 rows in a Pallas kernel)
         # against the former default tf32x3, one model build; then its cross-check against the NumPy reference
  timeout ${JUDGE_TIMEOUT:-300} python3 scripts/gpu_judge_time.py --variant dot=tf32x3 --variant "" \
    --json "$OUT/judge_time_rows.json" 2>&1 | tee "$OUT/judge_time_rows.log" | grep -v "^ *per round" | tail -24
  OMP_NUM_THREADS=8 timeout ${CROSS_TIMEOUT:-240} python3 scripts/gpu_judge_crosscheck.py --judges rows/scan \
    --json "$OUT/judge_crosscheck_rows.json" 2>&1 | tee "$OUT/judge_crosscheck_rows.log" | tail -12 ;;
hostprof) # the judge's round at ouro-1.4b with one more round per mode under cProfile (its host work)
  timeout ${JUDGE_TIMEOUT:-300} python3 scripts/gpu_judge_time.py --host-profile 40 --json "$OUT/judge_hostprof.json" \
    2>&1 | tee "$OUT/judge_hostprof.log" | grep -v "^ *per round" | tail -12 ;;
trace)   # the judge's round at ouro-1.4b, one more round per mode traced: the device's idle time by phase (gpu_tests/trace_gaps.py)
  timeout ${JUDGE_TIMEOUT:-300} python3 scripts/gpu_judge_time.py --trace /tmp/judge_trace ${TRACE_ARGS:-} --json "$OUT/judge_trace.json" \
    2>&1 | tee "$OUT/judge_trace.log" | grep -v "^ *per round" | tail -16 ;;
split)   # the kernel of few rows with its rows cut into blocks (judge_jax.skinny.row_blocks: 80 -> 64 + 16) against
         # the rows padded to 128; then the judge's round with exact rows (rows_bits 3: a verification of 5 rows
         # per group is 80 rows, not 128) against the default, each round traced; then its cross-check
  timeout ${SKINNY_TIMEOUT:-150} python3 scripts/gpu_skinny_mm.py --rows 16,64,80,96,128 --judge-tiles --budget-s 0 \
    --repeats 15 --json "$OUT/skinny_split.json" 2>&1 | tee "$OUT/skinny_split.log" | tail -16
  timeout ${JUDGE_TIMEOUT:-400} python3 scripts/gpu_judge_time.py --trace /tmp/judge_trace --variant "" --variant rows_bits=3 \
    --json "$OUT/judge_split.json" 2>&1 | tee "$OUT/judge_split.log" | grep -v "^ *per round" | tail -40
  OMP_NUM_THREADS=8 timeout ${CROSS_TIMEOUT:-240} python3 scripts/gpu_judge_crosscheck.py --judges rows/scan --rows-bits 3 \
    --tokens 80 --json "$OUT/judge_crosscheck_split.json" 2>&1 | tee "$OUT/judge_crosscheck_split.log" | tail -6 ;;
split2)  # the 16-row tiling for row blocks of 64 and less (skinny.tile_for); then, paired A B C A B C in one process,
         # the default against exact rows (rows_bits 3) and exact rows with TF32x3 products in the Pallas attention
         # (tile dot_x3=1), each round traced; then the cross-check of the last
  timeout ${SKINNY_TIMEOUT:-120} python3 scripts/gpu_skinny_mm.py --rows 80,96 --judge-tiles --budget-s 0 \
    --repeats 15 --json "$OUT/skinny_split2.json" 2>&1 | tee "$OUT/skinny_split2.log" | tail -8
  V='--variant "" --variant rows_bits=3 --variant rows_bits=3,tile=dot_x3=1'
  eval timeout ${JUDGE_TIMEOUT:-330} python3 scripts/gpu_judge_time.py --trace /tmp/judge_trace $V $V \
    --json "$OUT/judge_split2.json" 2>&1 | tee "$OUT/judge_split2.log" | grep "^variant\|^  block\|^  loop\|device busy"
  OMP_NUM_THREADS=8 timeout ${CROSS_TIMEOUT:-150} python3 scripts/gpu_judge_crosscheck.py --judges rows/scan/auto/dot_x3=1 \
    --rows-bits 3 --tokens 80 --json "$OUT/judge_crosscheck_split2.json" 2>&1 | tee "$OUT/judge_crosscheck_split2.log" | tail -3 ;;
pinned)  # the KV rows copied into pinned host memory right after each call (kv_fetch=pinned) against the
         # default (copies started at the next head call), A B A B in one process, each round traced
  V='--variant "" --variant kv_fetch=pinned'
  eval timeout ${JUDGE_TIMEOUT:-330} python3 scripts/gpu_judge_time.py --trace /tmp/judge_trace $V $V \
    --json "$OUT/judge_pinned.json" 2>&1 | tee "$OUT/judge_pinned.log" | grep "^variant\|^  block\|^  loop\|device busy\|Error" ;;
logits)  # the heads' logits through jax.device_get (logits_fetch=pageable) against the default (pinned host
         # memory), A B A B in one process, each round traced
  V='--variant logits_fetch=pageable --variant ""'
  eval timeout ${JUDGE_TIMEOUT:-330} python3 scripts/gpu_judge_time.py --trace /tmp/judge_trace $V $V \
    --json "$OUT/judge_logits.json" 2>&1 | tee "$OUT/judge_logits.log" | grep "^variant\|^  block\|^  loop\|device busy\|Error" ;;
paths)   # issue 46: the correct paths and a band fault at ouro-1.4b, the precision verdict alone
  timeout ${PATHS_TIMEOUT:-420} python3 scripts/precision_paths.py --preset ouro-1.4b --reference jax --no-drift \
    --variants ${PATHS:-triton0,fuse0,eager,attn_out_bits.1=4.4} --json "$OUT/precision_paths_ouro.json" \
    2>&1 | tee "$OUT/precision_paths_ouro.log" | grep -v "^    " | tail -8 ;;
sweep)   # synchronous rounds, then two rounds in flight
  for f in ${IN_FLIGHT:-1 2}; do
    timeout ${SWEEP_TIMEOUT:-280} python3 -m oracle bench sweep --preset ouro-1.4b --batch ${BATCH:-1,4,16,64,128} --k 4 \
      -d 2 -D 4 --tokens ${TOKENS:-32} --repeats ${REPEATS:-7} --context 256 --in-flight $f \
      --out "$OUT/sweep_inflight$f.json" 2>&1 | tee "$OUT/sweep_inflight$f.log" | tail -12
  done ;;
splitk)  # split-K of o and down on the small-M path: first `check --backend torch-cuda --preset small` with
         # split configs (both paths), then c(M) of A = the default tiles against split variants (ARMS, their
         # configs below), each arm in turn, twice, separate processes (LOOPSPEC_GEMV_CONFIG); one JSON of all
  mkdir -p /tmp/splitk
  mk() { echo "$2" > "/tmp/splitk/$1.cfg"; }
  mk check '{"o/16": [16, 32, 2, 4, 1, 4], "down/16": [16, 32, 2, 4, 1, 11], "o": [2, 32, 4, 3, 1, 2], "down": [2, 32, 4, 3, 1, 11]}'
  mk B '{"o/16": [16, 256, 2, 4, 1, 2], "down/16": [16, 256, 2, 4, 1, 2]}'
  mk C '{"o/16": [16, 256, 2, 4, 1, 4], "down/16": [16, 128, 2, 4, 1, 4]}'
  mk D '{"o/16": [16, 256, 2, 4, 1, 8], "down/16": [16, 256, 2, 4, 1, 11]}'
  mk E '{"o/16": [32, 256, 4, 4, 1, 4], "down/16": [32, 256, 4, 4, 1, 11]}'
  mk F '{"o/16": [16, 256, 2, 4, 1, 2]}'
  mk G '{"down/16": [16, 256, 2, 4, 1, 2]}'
  mk H '{"o/16": [16, 256, 2, 4, 1, 2], "down/16": [16, 128, 2, 4, 1, 2]}'
  mk I '{"o/16": [32, 256, 4, 4, 1, 2], "down/16": [16, 256, 2, 4, 1, 2]}'
  mk J '{"o/16": [16, 256, 2, 4, 1, 2], "down/16": [16, 256, 2, 4, 1, 2], "o": [2, 1024, 4, 3, 1, 2], "down": [2, 2048, 4, 2, 1, 3]}'
  mk K '{"o/16": [16, 256, 2, 3, 1, 2], "down/16": [16, 256, 2, 3, 1, 2]}'
  mk L '{"qkv/16": [16, 256, 2, 4, 1]}'   # from here on: the split-K default (B) and other tiles of qkv, gate_up
  mk M '{"qkv/16": [16, 128, 2, 4, 1]}'
  mk N '{"gate_up/16": [16, 256, 2, 4, 1]}'
  mk P '{"gate_up/16": [32, 256, 4, 4, 1]}'
  if [ -z "${NO_CHECK:-}" ]; then
    LOOPSPEC_GEMV_CONFIG=/tmp/splitk/check.cfg timeout 200 python3 -m oracle check --backend torch-cuda --preset small \
      2>&1 | tee "$OUT/split_check_small.log" | tail -4
  fi
  arm_env() { :; }
  c_arms /tmp/splitk "A B C D E" "$OUT/splitk.json" '{}'
  ;;
prefetch)  # the L2 prefetch of each program's weight rows before the PDL wait (tile entry 7) and the PDL
           # trigger at a kernel's start: first the bitwise gpu test, then c(M) of arms (ARMS) each in turn,
           # twice, separate processes. A: default; B: whole slice prefetched; C: 1024 K elements (4 tiles of
           # the small-M path); D: trigger at start; E: D + B; F: B for qkv and gate_up only; G / H: attention's
           # older keys loaded before the PDL wait at M <= 16 / 2 (LOOPSPEC_ATTN_EARLY_ROWS; the rest: 0); R: H with
           # LOOPSPEC_PROGRAM_NORM_ROWS=0; one JSON
  mkdir -p /tmp/pf
  mk() { python3 -c "import json, sys; from kernels.gemv import ONE_ROW_TILES as O, SMALL_M_TILES as S
t = {**O, **{k + '/16': v for k, v in S.items()}}
keys = [k for k in t if k.split('/')[0] in sys.argv[2].split(',')]
json.dump({k: [*map(int, t[k][:5]), t[k][5] if len(t[k]) > 5 else 1, int(sys.argv[1])] for k in keys}, sys.stdout)" "$@"; }
  mk 1000000 qkv,o,gate_up,down > /tmp/pf/B.cfg; mk 1024 qkv,o,gate_up,down > /tmp/pf/C.cfg
  mk 1000000 qkv,gate_up > /tmp/pf/F.cfg; cp /tmp/pf/B.cfg /tmp/pf/E.cfg
  if [ -z "${NO_CHECK:-}" ]; then
    HYPOTHESIS_PROFILE=ci timeout 200 python3 -m pytest -q -m gpu gpu_tests -k "${TESTS:-prefetch or split_k}" -p no:cacheprovider \
      2>&1 | tee "$OUT/prefetch_test.log" | tail -3
  fi
  arm_env() {
    echo LOOPSPEC_PDL_TRIGGER=$(case $1 in D|E) echo start ;; *) echo wait ;; esac)
    echo LOOPSPEC_ATTN_EARLY_ROWS=$(case $1 in G) echo 16 ;; H|R) echo 2 ;; *) echo 0 ;; esac)
    echo LOOPSPEC_PROGRAM_NORM_ROWS=$(case $1 in R) echo 0 ;; *) echo 1 ;; esac)
  }
  c_arms /tmp/pf "A B C D E" "$OUT/prefetch.json" '{"trigger_start": ["D", "E"], "attn_early_rows": {"G": 16, "H": 2, "R": 2, "others": 0}, "program_norm_rows": {"R": 0, "others": 1}}'
  ;;
splitqg)  # split-K of qkv and gate_up, the epilogue run by each column block's last program to arrive: first
          # the gpu test (TESTS), then c(M) of arms (ARMS) each in turn, twice, separate processes, one JSON.
          # A: default; B / C: qkv/16 split 2 / 4; D: gate_up/16 split 2; E: B + D; F: qkv/16 at BLOCK_N 64
          # split 4; G: gate_up/16 at BLOCK_N 64 split 4; H: one-row qkv and gate_up at BLOCK_K 1024 split 2;
          # P / Q / S: calls of up to 2 / 4 / 16 rows norm qkv's and gate_up's input in every program
          # (LOOPSPEC_PROGRAM_NORM_ROWS; the rest: 1); T: LOOPSPEC_PDL_TRIGGER=late (the rest: wait);
          # one-row tiles: I / J: qkv at BLOCK_N 4 / 8 warps; K / L: gate_up the same; N: o and down at
          # BLOCK_N 4; U: qkv and gate_up at BLOCK_N 1; V: LOOPSPEC_PDL=0 (no programmatic dependent launch)
  mkdir -p /tmp/sq
  python3 - <<'PY'
import json
q2, q4, g2 = [32, 256, 4, 3, 1, 2], [32, 256, 4, 3, 1, 4], [32, 128, 4, 4, 1, 2]
arms = {"B": {"qkv/16": q2}, "C": {"qkv/16": q4}, "D": {"gate_up/16": g2}, "E": {"qkv/16": q2, "gate_up/16": g2},
        "F": {"qkv/16": [64, 256, 4, 3, 1, 4]}, "G": {"gate_up/16": [64, 128, 4, 4, 1, 4]},
        "H": {"qkv": [2, 1024, 4, 2, 1, 2], "gate_up": [2, 1024, 4, 2, 1, 2]},
        "I": {"qkv": [4, 2048, 4, 2, 1]}, "J": {"qkv": [2, 2048, 8, 2, 1]}, "K": {"gate_up": [4, 2048, 4, 2, 1]},
        "L": {"gate_up": [2, 2048, 8, 2, 1]}, "N": {"o": [4, 1024, 4, 3, 1], "down": [4, 2048, 4, 2, 1]},
        "U": {"qkv": [1, 2048, 4, 2, 1], "gate_up": [1, 2048, 4, 2, 1]}}
for arm, cfg in arms.items():
    json.dump(cfg, open(f"/tmp/sq/{arm}.cfg", "w"))
PY
  if [ -z "${NO_CHECK:-}" ]; then
    HYPOTHESIS_PROFILE=ci timeout 240 python3 -m pytest -q -m gpu gpu_tests -k "${TESTS:-split_k or program_norm_rows}" -p no:cacheprovider \
      2>&1 | tee "$OUT/splitqg_test.log" | tail -3
  fi
  arm_env() {
    echo LOOPSPEC_PROGRAM_NORM_ROWS=$(case $1 in P) echo 2 ;; Q) echo 4 ;; S) echo 16 ;; *) echo 1 ;; esac)
    echo LOOPSPEC_PDL_TRIGGER=$(case $1 in T) echo late ;; *) echo wait ;; esac)
    echo LOOPSPEC_PDL=$(case $1 in V) echo 0 ;; *) echo 1 ;; esac)
  }
  c_arms /tmp/sq "A B C D E F G H" "$OUT/splitqg.json" '{"program_norm_rows": {"P": 2, "Q": 4, "S": 16, "others": 1}, "pdl_trigger": {"T": "late", "others": "wait"}, "pdl": {"V": 0, "others": 1}}'
  ;;
layerprobe)  # four launches per layer vs one persistent launch per layer or per call: scripts/gpu_layer_probe.py
  timeout ${PROBE_TIMEOUT:-300} python3 scripts/gpu_layer_probe.py --rows ${ROWS:-2,8} --arms ${PARMS:-prod,launch,layer1,layer2,call1,call2} \
    --tiles "${TILES:-}" --json "$OUT/layer_probe${TAG:-}.json" 2>&1 | tee "$OUT/layer_probe${TAG:-}.log" ;;
smalltiles)  # c(M) with small-M tiles of little shared memory (many programs resident on an SM), arms each in turn,
             # twice, separate processes (c_arms). A: default; B: all four products at BLOCK_N 16, BLOCK_K 128,
             # 2 warps, 2 stages (o, down split-K 2 as now); C: B for qkv and gate_up only; D: B at BLOCK_K 256;
             # E: B at 4 warps; F: B with qkv and gate_up split-K 2; G: qkv 16/256/4 warps/2 stages, gate_up 16/128/4/3
  mkdir -p /tmp/st
  python3 - <<'PY'
import json
s = [16, 128, 2, 2, 1]
small = {"qkv/16": s, "gate_up/16": s, "o/16": s + [2], "down/16": s + [2]}
arms = {"B": small, "C": {"qkv/16": s, "gate_up/16": s},
        "D": {k: [16, 256, *v[2:]] for k, v in small.items()}, "E": {k: [16, 128, 4, *v[3:]] for k, v in small.items()},
        "F": {**small, "qkv/16": s + [2], "gate_up/16": s + [2]},
        "G": {"qkv/16": [16, 256, 4, 2, 1], "gate_up/16": [16, 128, 4, 3, 1]}}
for arm, cfg in arms.items():
    json.dump(cfg, open(f"/tmp/st/{arm}.cfg", "w"))
PY
  ROWS=${ROWS:-2,4,8,16} c_arms /tmp/st "A B C D E F G" "$OUT/smalltiles${TAG:-}.json" '{"step": "smalltiles"}' ;;
abbase)  # c(M) of the packages in AB_BASE (arm A: an earlier commit's tree, `git archive`d there, untracked) against
         # this tree's (arm B), in turn, twice (AB_ROUNDS), separate processes; one JSON, $OUT/ab${TAG}.json
  rm -rf /tmp/ab; mkdir -p /tmp/ab
  for r in $(seq ${AB_ROUNDS:-2}); do for arm in A B; do
    dir=$([ $arm = A ] && echo "${AB_BASE:-ab_base}" || echo .)
    (cd "$dir" && PYTHONPATH=$PWD timeout 150 python3 -m oracle bench c-table --preset ouro-1.4b --context 256 -q \
      --rows ${ROWS:-1,2,4,8,16} --repeats 100 --out /tmp/ab/${arm}_$r.json 2>&1 | tail -3)
    python3 -c "import json,sys; print('$arm', json.load(open(sys.argv[1]))['c_ms'])" /tmp/ab/${arm}_$r.json
  done; done
  python3 - "$OUT/ab${TAG:-}.json" <<'PY'
import glob, json, os, sys
runs = {os.path.basename(f)[:-5]: json.load(open(f)) for f in sorted(glob.glob("/tmp/ab/*_*.json"))}
json.dump({"runs": runs}, open(sys.argv[1], "w"), indent=1)
for r in sorted({k.split("_")[1] for k in runs}):
    a, b = runs.get(f"A_{r}", {}).get("c_ms"), runs.get(f"B_{r}", {}).get("c_ms")
    if a and b:
        print("round", r, "B/A", {m: round(b[m] / a[m], 4) for m in a if m in b})
PY
  ;;
profile) # device time per kernel of one eager recurrent call of M rows (ROWS, default 1 4 16), against its graph replay
  for m in ${ROWS:-1 4 16}; do
    timeout 200 python3 scripts/gpu_c1_profile.py $m --out "$OUT" 2>&1 | tee "$OUT/c${m}_profile.log"
  done ;;
esac; done
