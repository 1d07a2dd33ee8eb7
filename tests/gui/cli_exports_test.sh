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
# Both at once: the screenshots, then the report.
timeout 180 "$view" "$runs/nondet-a" "$runs/nondet-b" --screenshot "$out/both-shots" --report "$out/both.html"
rc=$?
n=$(ls "$out/both-shots" 2>/dev/null | grep -c '\.png$')
if [ $rc -ne 0 ] || [ "$n" -lt 7 ] || ! grep -q "DIVERGENT: nondet-a" "$out/both.html" 2>/dev/null; then
  echo "FAIL: --screenshot with --report exited $rc, wrote $n images and the report: $(ls "$out/both.html" 2>&1)"; fail=1
else echo "ok: --screenshot with --report"; fi
# A refused command line exits 2 with one line that names the problem, as detrace's do.
refused() {  # EXPECTED_TEXT ARGS...
  text=$1; shift
  msg=$(timeout 30 "$view" "$@" 2>&1 >/dev/null | grep -av '^QStandardPaths')
  rc=$(timeout 30 "$view" "$@" >/dev/null 2>&1; echo $?)
  if [ "$rc" -ne 2 ]; then echo "FAIL: detrace-view $* exited $rc, not 2"; fail=1
  elif ! printf '%s' "$msg" | grep -aq "$text"; then echo "FAIL: detrace-view $* said '$msg'"; fail=1
  else echo "ok: detrace-view $* refused"; fi
}
for help in --help --help-all --version; do  # print and exit 0, never open a window
  if ! timeout 30 "$view" $help 2>/dev/null | grep -q "detrace-view"; then echo "FAIL: detrace-view $help"; fail=1
  else echo "ok: detrace-view $help"; fi
done
refused "Unknown option 'no-such-flag' (see detrace-view --help)" --no-such-flag
refused "Missing value after '--report'" --report
refused "need two or more runs" "$runs/bs1-a" --report "$out/one.html"
odd="$out/$(printf 'caf\351')"
mkdir -p "$odd"
refused "is not valid UTF-8" "$odd" "$runs/bs1-b" --report "$out/odd.html"
exit $fail
