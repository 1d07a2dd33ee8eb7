#!/usr/bin/env bash
# GPU check of the tracer, for the GPU machine. Run from the repo root after
# `scripts/device-test --no-bench` built build-device/:
#     bash tests/tracer/device_check.sh
# It checks, printing PASS/FAIL per line (exit 0 = all PASS):
#   1. the GPU test suite detrace_tracer_gpu_tests (records tests/tracer/tracer_gpu_app.cu: kernels on
#      two streams, two cuBLASLt matmuls, a CUDA graph replayed 3 times, and checks the trace);
#   2. `detrace record` + `detrace info` of that program, and SQL over its trace: kernels with GPU
#      times, graph kernels with graph ids, GEMMs with m/n/k and an algorithm;
#   3. a small PyTorch program (matmuls, layernorms, a CUDA graph) recorded the same way: kernels
#      with GPU times and names, GEMMs, no drops; `detrace info` of it is printed;
#   4. overhead: wall time of the PyTorch program without and with the tracer (median of 3), a table.
# Logs and runs go to $OUT/device_check (default out/device_check).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build-device}
DETRACE=$PWD/$B/replay/detrace
DEPS=$PWD/.devdeps/root/usr/lib/x86_64-linux-gnu
[[ -d $DEPS ]] && export LD_LIBRARY_PATH=$DEPS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUTD=${OUT:-$PWD/out}/device_check
rm -rf "$OUTD"; mkdir -p "$OUTD"
[[ -x $DETRACE ]] || { echo "device_check: $DETRACE missing; run scripts/device-test --no-bench first" >&2; exit 2; }
fail=0
pass() { echo "PASS  $*"; }
bad() { echo "FAIL  $*"; fail=1; }
PY=${PYTHON:-python3}
# sql RUN 'query': the query over the run's first trace file, one row per line.
sql() {
  local f; f=$(ls "$1"/proc-*.dtrace 2>/dev/null | head -1)
  "$PY" - "$f" "$2" <<'PYEOF'
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
for row in con.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in row))
PYEOF
}

echo "== 1. GPU test suite (detrace_tracer_gpu_tests)"
if "$B/tests/detrace_tracer_gpu_tests" >"$OUTD/gpu_tests.log" 2>&1; then
  if grep -q "SKIPPED" "$OUTD/gpu_tests.log"; then bad "gpu tests were skipped (no GPU visible?)"; else pass "detrace_tracer_gpu_tests"; fi
else
  bad "detrace_tracer_gpu_tests (log: $OUTD/gpu_tests.log)"; tail -40 "$OUTD/gpu_tests.log"
fi

echo "== 2. record tracer_gpu_app"
RUN=$OUTD/gpu_app_run
if "$DETRACE" record -o "$RUN" -- "$PWD/$B/tests/tracer_gpu_app" >"$OUTD/gpu_app.log" 2>&1; then
  pass "detrace record tracer_gpu_app exit 0"
  "$DETRACE" info "$RUN"
  k=$(sql "$RUN" "SELECT count(*) FROM kernel_launches WHERE gpu_start_ns IS NOT NULL AND grid_x > 0")
  g=$(sql "$RUN" "SELECT count(*) FROM kernel_launches WHERE graph_id IS NOT NULL")
  m=$(sql "$RUN" "SELECT count(*) FROM gemms WHERE m=256 AND n=128 AND k=64 AND algo_id >= 0")
  echo "kernels with GPU times: $k, graph kernels: $g, 256x128x64 GEMMs with an algorithm: $m"
  (( k >= 14 )) && pass "kernels with GPU times and grids ($k >= 14)" || bad "kernels with GPU times: $k < 14"
  (( g == 6 )) && pass "graph kernels with graph ids (6)" || bad "graph kernels: $g, expected 6"
  (( m == 2 )) && pass "GEMMs with m/n/k and algorithm (2)" || bad "GEMMs: $m, expected 2"
  sql "$RUN" "SELECT key, value FROM stats WHERE key LIKE 'tracer_%' OR key LIKE 'cupti_%' OR key LIKE 'events_%'" | sed 's/^/  stat /'
else
  bad "detrace record tracer_gpu_app"; tail -20 "$OUTD/gpu_app.log"
fi

echo "== 3. record a PyTorch program"
cat >"$OUTD/torch_prog.py" <<'PYEOF'
import sys, time, torch
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
dev = "cuda"
torch.manual_seed(0)
x = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
w1 = torch.randn(1024, 4096, device=dev, dtype=torch.bfloat16)
w2 = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16)
ln = torch.nn.LayerNorm(1024, device=dev, dtype=torch.bfloat16)
def step(x):
    h = torch.nn.functional.gelu(ln(x) @ w1)
    return ln(h @ w2 + x)
for _ in range(steps):
    y = step(x)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        y = step(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    gy = step(x)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
print("torch_prog: ok", float(y.float().sum()), float(gy.float().sum()))
PYEOF
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  bad "PyTorch with CUDA is not importable by $PY; skipping 3 and 4"
else
  TRUN=$OUTD/torch_run
  if "$DETRACE" record -o "$TRUN" -- "$PY" "$OUTD/torch_prog.py" >"$OUTD/torch.log" 2>&1; then
    pass "detrace record python torch_prog.py exit 0"
    "$DETRACE" info "$TRUN"
    k=$(sql "$TRUN" "SELECT count(*) FROM kernel_launches WHERE gpu_start_ns IS NOT NULL")
    gk=$(sql "$TRUN" "SELECT count(*) FROM kernel_launches WHERE graph_id IS NOT NULL")
    gm=$(sql "$TRUN" "SELECT count(*) FROM gemms")
    alg=$(sql "$TRUN" "SELECT count(*) FROM gemms WHERE algo_id >= 0")
    dr=$(sql "$TRUN" "SELECT coalesce(sum(value),0) FROM stats WHERE key IN ('events_dropped','tracer_slots_overflowed','cupti_records_dropped')")
    echo "kernels with GPU times: $k, graph kernels: $gk, GEMMs: $gm (with algorithm: $alg), drops: $dr"
    sql "$TRUN" "SELECT name, count(*) FROM kernel_launches GROUP BY name ORDER BY 2 DESC LIMIT 8" | sed 's/^/  kernel /'
    sql "$TRUN" "SELECT s.text, g.m, g.n, g.k, g.algo_id, g.algo_source, count(*) FROM gemms g JOIN strings s ON s.id = g.api GROUP BY 1,2,3,4,5,6" | sed 's/^/  gemm /'
    sql "$TRUN" "SELECT key, value FROM stats WHERE key LIKE 'tracer_%' OR key LIKE 'cupti_%'" | sed 's/^/  stat /'
    (( k > 100 )) && pass "PyTorch kernels with GPU times ($k)" || bad "PyTorch kernels with GPU times: $k"
    (( gk > 0 )) && pass "PyTorch CUDA-graph kernels ($gk)" || bad "PyTorch CUDA-graph kernels: $gk"
    (( gm > 0 )) && pass "PyTorch GEMMs seen by the cuBLAS/cuBLASLt wrappers ($gm)" || bad "PyTorch GEMMs: 0 (torch's cuBLAS calls were not interposed)"
    (( dr == 0 )) && pass "no drops" || bad "drops: $dr"
  else
    bad "detrace record python torch_prog.py"; tail -30 "$OUTD/torch.log"
  fi

  echo "== 4. overhead (PyTorch program, 200 steps, median of 3)"
  median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
  wall() { local t0=$EPOCHREALTIME; "$@" >/dev/null 2>&1 || echo "run failed: $*" >&2; "$PY" -c "print(f'{$EPOCHREALTIME - $t0:.3f}')"; }
  plain=() traced=()
  for i in 1 2 3; do
    plain+=("$(wall "$PY" "$OUTD/torch_prog.py" 200)")
    traced+=("$(wall "$DETRACE" record -o "$OUTD/overhead_$i" -- "$PY" "$OUTD/torch_prog.py" 200)")
  done
  mp=$(median "${plain[@]}"); mt=$(median "${traced[@]}")
  printf '%-12s %10s %10s %10s\n' program plain_s traced_s overhead
  printf '%-12s %10.2f %10.2f %9.0f%%\n' torch_prog "$mp" "$mt" "$("$PY" -c "print(($mt - $mp) * 100 / $mp)")"
  echo "  (runs: plain ${plain[*]}; traced ${traced[*]})"
fi

echo
if ((fail)); then echo "device_check: FAILED (see FAIL lines; logs in $OUTD)"; else echo "device_check: all checks passed"; fi
exit $fail
