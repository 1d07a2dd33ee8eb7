#!/bin/sh
# detrace-view's --report and --screenshot, as a user runs them: each must write its files and
# exit 0 within a bound, for identical runs (no divergence: nothing for the tensors tab to load)
# as for divergent ones. Usage: cli_exports_test.sh DETRACE_VIEW RUNS_DIR
set -u
: "${QT_QPA_PLATFORM:=offscreen}"
export QT_QPA_PLATFORM
view=$1
runs=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
check() {  # NAME EXPECTED_TEXT RUN_A RUN_B
  name=$1 text=$2 a=$3 b=$4
  timeout 120 "$view" "$runs/$a" "$runs/$b" --report "$out/$name.html"
  rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: --report for $name exited $rc (124: it hung)"; fail=1
  elif ! grep -q "$text" "$out/$name.html"; then echo "FAIL: $name.html lacks '$text'"; fail=1
  else echo "ok: --report for $name"; fi
  timeout 180 "$view" "$runs/$a" "$runs/$b" --screenshot "$out/$name-shots"
  rc=$?
  n=$(ls "$out/$name-shots" 2>/dev/null | grep -c '\.png$')
  if [ $rc -ne 0 ]; then echo "FAIL: --screenshot for $name exited $rc (124: it hung)"; fail=1
  elif [ "$n" -lt 7 ]; then echo "FAIL: --screenshot for $name wrote $n images, not 7"; fail=1
  else echo "ok: --screenshot for $name ($n images)"; fi
}
check identical "IDENTICAL: bs1-a and bs1-b" bs1-a bs1-b
check divergent "DIVERGENT: nondet-a and nondet-b" nondet-a nondet-b
exit $fail
