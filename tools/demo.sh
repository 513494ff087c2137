#!/usr/bin/env bash
# The main job: builds pfm and shows it at work on this machine.
# pfmctl brings up an embedded pfmd on a private socket when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
bazel build -c opt //userspace/pfmd:pfmd //userspace/pfmctl:pfmctl 2>&1 \
  | grep -vE '^[0-9]+\.[0-9]+: src/main/tools/' | tail -n 2
PFMCTL=bazel-bin/userspace/pfmctl/pfmctl
export PFMD_SOCKET=   # use the running daemon or start an embedded one
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "pfmctl status (this machine, host driver; embedded pfmd started on demand)"
"$PFMCTL" status
