#!/usr/bin/env bash
# clang's -Wthread-safety over the whole tree (.bazelrc's `thread-safety`
# config): every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation
# is checked and a violation fails the build. The default build uses gcc,
# which ignores the annotations. Its own output base, so switching compilers
# does not throw away the default build's cache; that Bazel server is shut
# down afterwards to give its memory back. Run by tools/test.sh as one test.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${PFM_THREAD_SAFETY_OUTPUT_BASE:-${HOME:-/root}/.cache/pfm-thread-safety}
status=0
# Every package of the tree, named: `//...` from a second output base would
# wander into the first one's bazel-* symlinks.
pkgs=()
for d in */; do
  case "$d" in bazel-*) continue ;; esac
  [ -n "$(find "$d" -name BUILD -print -quit)" ] && pkgs+=("//${d%/}/...")
done
# The server goes however this script ends (^C included): else it would
# idle for hours beside the default build's.
trap 'bazel --output_base="$base" shutdown >/dev/null 2>&1 || true' EXIT
bazel --output_base="$base" build --config=thread-safety "${pkgs[@]}" || status=$?
if [ "$status" -eq 0 ]; then
  echo "thread_safety: ${pkgs[*]} clean under clang -Wthread-safety"
else
  echo "thread_safety: clang -Wthread-safety build failed" >&2
fi
exit "$status"
