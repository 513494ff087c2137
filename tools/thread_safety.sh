#!/usr/bin/env bash
# clang's -Wthread-safety over the code that holds the kernel lock: every
# ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation is checked, and
# a warning fails the run. A syntax-only pass with the same include paths as
# the Bazel build (the build itself uses gcc, which ignores the
# annotations); run by tools/test.sh as one test.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX_TSA:-clang++}
files=(kernel/pfm_kernel.cc kernel/pfm_kernel_test.cc
       userspace/pfmd/session_manager.cc userspace/pfmd/session_create.cc
       userspace/pfmd/session_manager_test.cc
       userspace/pfmd/host_tracers.cc userspace/pfmd/sim_runner.cc
       userspace/pfmd/service.cc userspace/pfmd/server.cc
       kernel/drivers/ptrace/tracer_process.cc)
fail=0
for f in "${files[@]}"; do
  if ! "$CXX" -std=c++17 -fsyntax-only -Wthread-safety -Wthread-safety-beta \
       -Werror=thread-safety -Werror=thread-safety-beta \
       -I. -Ilibpfm-bts/include -Ilibpfm-bts "$f"; then
    echo "thread_safety: $f" >&2
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "thread_safety: ${#files[@]} files clean"
exit "$fail"
