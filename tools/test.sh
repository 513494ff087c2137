#!/usr/bin/env bash
# The test command: installs what is missing, runs every test with Bazel and
# prints "N passed, M failed" alone on the last line (the fuzz run, see
# below, counts as one test). Exit status non-zero on
# any failure. Extra arguments go to `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh || exit 1
log=$(mktemp)
# Tests make directories under /tmp (socket paths must be short:
# tests/testing/harness.h MakeSocketDir, and a few tests' own) and must
# remove them: one left behind after the run counts as a failed test below.
started=$(mktemp)
trap 'rm -f "$log" "$started"' EXIT
bazel test //... --test_tag_filters=-benchmark,-fuzz "$@" 2>&1 | tee "$log" \
  | grep -vE '^[0-9]+\.[0-9]+: src/main/tools/' 
rc=${PIPESTATUS[0]}
# Bazel's summary lines: "//pkg:target   PASSED in 0.2s" / "FAILED in ..." /
# "(cached) PASSED".
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  # Build failures leave no test lines: count the run as one failure.
  failed=1
fi
rm -f "$log"
left=$(find /tmp -maxdepth 1 \( -name 'pfmtest-*' -o -name 'pfm-auth-*' \
  -o -name 'pfm-sockdir-*' -o -name 'pfmctl-bin-*' -o -name 'pfmd-65534*' \) \
  -newer "$started" 2>/dev/null)
if [ -n "$left" ]; then
  echo "test: directories left in /tmp by the tests:" $left
  failed=$((failed + 1))
  rc=1
fi
# The whole tree built with clang -Wthread-safety (.bazelrc config
# thread-safety, in its own output base), counted as one test
# (tools/thread_safety.sh).
if tools/thread_safety.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  rc=1
fi
# The libFuzzer targets (fuzz/), PFM_FUZZ_SECONDS each (default 30, seed PFM_FUZZ_SEED or 1; 0 skips),
# counted as one test. Their stored inputs also replay in
# //fuzz:fuzz_regression_test above.
fuzz_s=${PFM_FUZZ_SECONDS:-30}
if [ "$fuzz_s" -gt 0 ]; then
  if tools/fuzz.sh "$fuzz_s"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    rc=1
  fi
fi
echo "${passed} passed, ${failed} failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
