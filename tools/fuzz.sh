#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,
# address,undefined) and runs each for a bounded time.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]     default: 60 s each, all targets
#
# Targets: wire, compact, compact_batch, compact_bts, ring, maps, rsp, trace. Each run starts from the checked-in seeds in
# fuzz/corpus/NAME plus a working corpus in $PFM_FUZZ_WORK/NAME (default
# /tmp/pfm-fuzz; kept between runs). A crash, leak, timeout (>10 s per
# input) or out-of-memory fails the script; libFuzzer writes the input to
# $PFM_FUZZ_WORK/NAME/crash-* — copy it into fuzz/crashers/NAME/ so
# //fuzz:fuzz_regression_test replays it forever.
# PFM_FUZZ_MERGE=1 afterwards minimizes the working corpus into
# fuzz/corpus/NAME (to check in new coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(wire compact compact_batch compact_bts ring maps rsp trace)
work=${PFM_FUZZ_WORK:-/tmp/pfm-fuzz}
CXX=${CXX_FUZZ:-clang++}
mkdir -p "$work/bin"

ABSL=(-labsl_statusor -labsl_status -labsl_str_format_internal -labsl_strings
      -labsl_strings_internal -labsl_cord -labsl_cordz_info -labsl_cord_internal
      -labsl_cordz_functions -labsl_cordz_handle -labsl_exponential_biased
      -labsl_synchronization -labsl_graphcycles_internal -labsl_stacktrace
      -labsl_symbolize -labsl_debugging_internal -labsl_demangle_internal
      -labsl_malloc_internal -labsl_time -labsl_civil_time -labsl_time_zone
      -labsl_int128 -labsl_throw_delegate -labsl_base -labsl_raw_logging_internal
      -labsl_log_severity -labsl_spinlock_wait -lpthread)
FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -DPFM_LIBFUZZER
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Werror -I. -Ilibpfm-bts/include)

build() {
  local name=$1
  shift
  echo "fuzz: building $name" >&2
  "$CXX" "${FLAGS[@]}" "$@" -o "$work/bin/${name}_fuzz" "${ABSL[@]}"
}

for t in "${targets[@]}"; do
  case "$t" in
    wire) build wire fuzz/wire_fuzz.cc libpfm-bts/wire.cc libpfm-bts/session_spec.cc -lboost_json ;;
    compact) build compact fuzz/compact_fuzz.cc kernel/uapi/compact_codec.cc kernel/uapi/ring_format.cc ;;
    compact_batch) build compact_batch fuzz/compact_batch_fuzz.cc kernel/uapi/compact_codec.cc kernel/uapi/ring_format.cc ;;
    compact_bts) build compact_bts fuzz/compact_bts_fuzz.cc kernel/uapi/compact_codec.cc kernel/uapi/ring_format.cc ;;
    ring) build ring fuzz/ring_fuzz.cc libpfm-bts/ring_reader.cc kernel/uapi/compact_codec.cc kernel/uapi/ring_format.cc ;;
    maps) build maps fuzz/maps_fuzz.cc kernel/uapi/proc_maps.cc ;;
    rsp) build rsp fuzz/rsp_fuzz.cc userspace/gdbstub/rsp.cc userspace/gdbstub/amd64_regs.cc \
           userspace/gdbstub/btrace_xml.cc ;;
    trace) build trace fuzz/trace_fuzz.cc libpfm-bts/trace_file.cc kernel/uapi/proc_maps.cc \
             kernel/uapi/compact_codec.cc -lboost_json ;;
    *) echo "fuzz: unknown target $t (wire, compact, compact_batch, compact_bts, ring, maps, rsp, trace)" >&2; exit 2 ;;
  esac
done

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  echo "fuzz: running $t for ${secs}s (log $log)" >&2
  if (cd "$work/$t" && "$work/bin/${t}_fuzz" -max_total_time="$secs" -timeout=10 -seed="${PFM_FUZZ_SEED:-1}" \
        -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
        "$work/$t" "$OLDPWD/fuzz/corpus/$t") >"$log" 2>&1; then
    echo "fuzz: $t ok: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') execs," \
         "$(grep -E 'DONE' "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/cov \1 ft \2/')," \
         "peak rss $(grep -E '^stat::peak_rss_mb' "$log" | awk '{print $2}') MB," \
         "corpus $(ls "$work/$t" | wc -l) files"
  else
    status=1
    echo "fuzz: $t FAILED; see $log" >&2
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" >&2 || true
  fi
  if [ "${PFM_FUZZ_MERGE:-0}" = 1 ]; then
    "$work/bin/${t}_fuzz" -merge=1 -max_len=16384 "fuzz/corpus/$t" "$work/$t" >/dev/null 2>&1 || true
  fi
done
exit $status
