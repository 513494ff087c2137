#!/usr/bin/env bash
# The main job: builds pfm and shows it at work on this machine: a debugger
# and a profiler tracing the same real process at once, who holds what while
# they share it, the outcome, a crash history, the real GDB debugging a
# process through pfm beside a profiler, and (on the simulated Skylake)
# the BTS + PEBS mix this VM's hardware cannot do.
# pfmctl brings up an embedded pfmd on a private socket when none runs.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
bazel build -c opt //userspace/pfmd:pfmd //userspace/pfmctl:pfmctl //tools/demo:workload 2>&1 \
  | grep -vE '^[0-9]+\.[0-9]+: src/main/tools/' | tail -n 2
PFMCTL=bazel-bin/userspace/pfmctl/pfmctl
PFMD=bazel-bin/userspace/pfmd/pfmd
WORKLOAD=bazel-bin/tools/demo/workload_bin
unset PFMD_SOCKET   # use the running daemon, or start an embedded one
TMP=$(mktemp -d /tmp/pfm-demo.XXXXXX)
SIMPID=""
SESSIONS=""   # ids of this demo's sessions still open
BGPIDS=""     # its background processes
cleanup() {
  # Whatever stopped the demo (set -e, ^C), it leaves no session behind in
  # the daemon (a system pfmd keeps detached sessions) and no process.
  for id in $SESSIONS; do "$PFMCTL" session kill "$id" >/dev/null 2>&1 || true; done
  for p in $BGPIDS $SIMPID; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
id_of() { sed -n 's/.*"id":\([0-9]*\).*/\1/p'; }

say "pfmctl status (this machine, host driver; embedded pfmd started on demand)"
"$PFMCTL" status

say "a real process: $WORKLOAD 40 (computes, sleeps, repeats)"
"$WORKLOAD" 40 >"$TMP/workload.out" &
WPID=$!
BGPIDS="$BGPIDS $WPID"
for _ in $(seq 50); do [ -s "$TMP/workload.out" ] && break; sleep 0.05; done
cat "$TMP/workload.out"
WORK=$(sed -n 's/.*work() at \(0x[0-9a-f]*\).*/\1/p' "$TMP/workload.out")

say "debugger: a 32-branch history ring and a pinned breakpoint on work() ($WORK)"
DBG=$("$PFMCTL" --json session create --role debugger --pid "$WPID" --bts history \
        --buffer 2KiB --breakpoint "$WORK:1:x" | id_of)
SESSIONS="$SESSIONS $DBG"
echo "session $DBG"
say "profiler on the same process: lossless branch stream + counters"
PROF=$("$PFMCTL" --json session create --role profiler --pid "$WPID" --bts lossless \
        --buffer 16MiB --counter task-clock --counter context-switches \
        --counter page-faults | id_of)
SESSIONS="$SESSIONS $PROF"
echo "session $PROF"
"$PFMCTL" stream "$PROF" -o "$TMP/profile.trace" &
SPID=$!
BGPIDS="$BGPIDS $SPID"
sleep 1.5

say "pfmctl resources: who is using the PMU while they share the task?"
"$PFMCTL" resources
say "pfmctl session list"
"$PFMCTL" session list
say "pfmctl snapshot $DBG: the debugger's newest branches (last 10 of 32)"
"$PFMCTL" snapshot "$DBG" | tail -n 11

wait "$WPID" || true
wait "$SPID" || true
say "the process exited; the profiler's counters (session show $PROF)"
"$PFMCTL" session show "$PROF"
say "pfmctl report: the profiler's lossless trace, symbolized"
"$PFMCTL" report "$TMP/profile.trace" --limit 8
say "the same trace in perf's format, read by the real perf"
"$PFMCTL" export "$TMP/profile.trace" -o "$TMP/perf.data"
PAGER=cat perf script -F comm,tid,time,ip,sym,addr -i "$TMP/perf.data" 2>/dev/null \
  | grep -m5 ' work' || true
"$PFMCTL" session kill "$DBG"
"$PFMCTL" session kill "$PROF"
SESSIONS=""

say "a crash: pfmctl record --role debugger --bts history -- $WORKLOAD 2 crash"
set +e
"$PFMCTL" record --role debugger --bts history --buffer 1KiB -o "$TMP/crash.trace" \
  -- "$WORKLOAD" 2 crash >/dev/null
echo "exit status $? (128 + SIGSEGV)"
set -e
"$PFMCTL" report "$TMP/crash.trace" --limit 6

say "GDB on pfm: the real gdb debugs a process while a profiler streams it"
"$WORKLOAD" 60 >"$TMP/workload2.out" &
WPID2=$!
BGPIDS="$BGPIDS $WPID2"
for _ in $(seq 50); do [ -s "$TMP/workload2.out" ] && break; sleep 0.05; done
"$PFMCTL" record --bts lossless -o "$TMP/beside_gdb.trace" -p "$WPID2" >"$TMP/rec.out" 2>&1 &
RECPID=$!
BGPIDS="$BGPIDS $RECPID"
for _ in $(seq 100); do "$PFMCTL" session list | grep -q "pid $WPID2" && break; sleep 0.05; done
cat >"$TMP/demo.gdb" <<'GDB'
set pagination off
set confirm off
break leaf
continue
bt
record btrace bts
finish
next
info record
record function-call-history /ilc
record instruction-history
record stop
delete
detach
GDB
echo "gdb -batch -ex 'target remote | pfmctl gdbserver --pid $WPID2' -x demo.gdb $WORKLOAD"
gdb -batch -nx -ex "target remote | $PFMCTL gdbserver --pid $WPID2" -x "$TMP/demo.gdb" \
  "$WORKLOAD" 2>&1 | grep -v "^warning: \|index cache"
sleep 0.3
kill -INT "$RECPID"
wait "$RECPID" || true
echo "the profiler's lossless stream meanwhile (GDB's stops show as its switches):"
"$PFMCTL" --json report "$TMP/beside_gdb.trace" --limit 0 | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
t = s["by_type"]
print("lost %d, branches %d, switches out/in %d/%d" % (
    s["lost"], s["branches"], t.get("switch_out", 0), t.get("switch_in", 0)))'

"$PFMCTL" report "$TMP/beside_gdb.trace" --limit 0 | sed -n '1,/^$/p' | head -12
kill "$WPID2" 2>/dev/null || true
wait "$WPID2" 2>/dev/null || true

say "what this machine cannot do is refused, and changes nothing"
for what in "--pebs MEM_LOAD_RETIRED.L3_MISS" "--counter cycles"; do
  # shellcheck disable=SC2086  # two words: the flag and its value
  if id=$("$PFMCTL" --json session create --pid $$ $what | id_of); then
    echo "session $id: this machine has it"   # real hardware: not refused
    "$PFMCTL" session kill "$id"
  fi
done

say "the simulated Skylake (pfmd --driver sim): BTS and PEBS mixed in one stream"
"$PFMD" --driver sim --sim-pmu skl --sim-cpus 4 --sim-tasks 6 --sim-paused \
  --socket "$TMP/sim.sock" &
SIMPID=$!
for _ in $(seq 50); do [ -S "$TMP/sim.sock" ] && break; sleep 0.05; done
SIM=("$PFMCTL" --socket "$TMP/sim.sock")
"${SIM[@]}" session create --role debugger --pid 1000 --bts history --buffer 1KiB \
  --breakpoint 0x601000:8:w --breakpoint 0x601040:8:w >/dev/null
"${SIM[@]}" session create --role profiler --pid 1000 --bts lossless --format compact \
  --pebs MEM_LOAD_RETIRED.L3_MISS:2000 --counter cycles --counter L2_RQSTS.MISS \
  --breakpoint 0x700000:8:w --breakpoint 0x700040:8:w --breakpoint 0x700080:8:w >/dev/null
"${SIM[@]}" sim run 200000000 >/dev/null
"${SIM[@]}" resources
"${SIM[@]}" session show 2
"${SIM[@]}" snapshot 2 | grep -m1 -B3 -A3 ' pebs '

say "when each counter was on the hardware: the arbiter's schedule in the stream"
"${SIM[@]}" sim exit 1000 >/dev/null
"${SIM[@]}" stream 2 -o "$TMP/sim.trace" >/dev/null
"$PFMCTL" export "$TMP/sim.trace" --format chrome-json -o "$TMP/timeline.json"
"$PFMCTL" report "$TMP/sim.trace" --limit 0 --timeline "$TMP/timeline.svg" \
  | sed -n '/^counters:/,/^$/p'
grep -o '<text x="4" y="[0-9]*">[^<]*</text>' "$TMP/timeline.svg" \
  | sed 's/<[^>]*>//g' | head -8
echo "(open timeline.json in ui.perfetto.dev, timeline.svg in a browser)"

say "status: every byte charged is returned when sessions end"
"$PFMCTL" status | sed -n '/^sessions/,$p'
"$PFMCTL" shutdown >/dev/null 2>&1 || true
