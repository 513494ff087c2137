#!/usr/bin/env bash
# Installs what pfm needs to build and test on Debian bookworm (as root).
# Safe to run again: installs only what is missing.
set -euo pipefail
PKGS=(bazel-bootstrap g++ libabsl-dev libboost1.81-dev libboost-json1.81-dev
      libgtest-dev libgmock-dev libpfm4-dev libelf-dev libdw-dev linux-libc-dev
      python3 clang libclang-rt-14-dev
      linux-perf prometheus prometheus-cpp-dev gdb
      locales)  # localedef sources: stat's locale tests
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install_deps: missing ${missing[*]}; run as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
