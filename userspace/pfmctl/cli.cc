#include "userspace/pfmctl/cli.h"

#include <exception>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "pfm/client.h"
#include "userspace/pfmctl/context.h"
#include "userspace/pfmctl/daemon_commands.h"
#include "userspace/pfmctl/export.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/script.h"
#include "userspace/pfmctl/session_commands.h"
#include "userspace/pfmctl/gdbserver.h"
#include "userspace/pfmctl/stat_command.h"
#include "userspace/pfmctl/trace_commands.h"

namespace pfm {
namespace {

struct Command {
  const char* name;
  CommandFn run;
};

constexpr Command kCommands[] = {
    {"status", StatusCommand},     {"shutdown", ShutdownCommand},
    {"session", SessionCommand},   {"resources", ResourcesCommand},
    {"sim", SimCommand},           {"snapshot", SnapshotCommand},
    {"stream", StreamCommand},     {"report", ReportCommand},
    {"record", RecordCommand},     {"export", ExportCommand},
    {"stat", StatCommand},         {"script", ScriptCommand},
    {"gdbserver", GdbserverCommand},
};

// The one error line. Messages may come from pfmd or from an exception:
// line breaks in them would break the one-line contract (DESIGN §9).
void PrintError(std::ostream& err, absl::string_view code, absl::string_view message) {
  std::string line = absl::StrCat("pfmctl: ", code, ": ", message);
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  err << line << "\n";
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliContext ctx;
  ctx.out = &out;
  ctx.err = &err;
  absl::StatusOr<CommandArgs> rest = ParseGlobalFlags(args, &ctx);
  absl::StatusOr<int> rc = 0;
  if (!rest.ok()) {
    rc = rest.status();
  } else if (rest->empty() || (*rest)[0] == "help" || (*rest)[0] == "--help" ||
             (*rest)[0] == "-h") {
    (rest->empty() ? err : out) << PfmctlUsage();
    return rest->empty() ? 2 : 0;
  } else {
    rc = UsageError(absl::StrCat("unknown command '", (*rest)[0], "' (see pfmctl help)"));
    for (const Command& c : kCommands)
      if ((*rest)[0] == c.name) rc = c.run(ctx, *rest);
  }
  if (!rc.ok()) {
    const absl::Status& s = rc.status();
    PrintError(err, StatusCodeName(s.code()), s.message());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return *rc;
}

}  // namespace

std::string PfmctlUsage() {
  // The export formats come from their table (export.h).
  return absl::StrReplaceAll(R"(usage: pfmctl [--socket PATH] [--json] COMMAND [ARGS]
commands:
  status                      the machine's PMU, sessions, memory charges
  session create [--role debugger|profiler] (--pid PID [--tid TID] | --cpu N)
                 [--bts history|lossless] [--buffer SIZE] [--filter user|kernel|all]
                 [--format fixed|compact] [--block] [--pebs EVENT[:period]]
                 [--counter EVENT]... [--breakpoint ADDR:LEN:r|w|rw|x]... [--pinned]
                 [--inherit]  (host BTS or counters of a pid: its children too)
                 [--filter FUNCTION|'range LO-HI'|'@ FILE']... [--start LOCATION]
                              (host BTS: address filters; outside, full speed)
                              a session (detached: it lives until `session kill`)
  session list | show ID | kill ID
  snapshot ID [-o FILE]       the records in a session's ring, oldest first
  stream ID -o FILE           lossless records to FILE until the session ends
  resources                   who holds which counter, debug register, BTS/PEBS
  record [session flags] [--output-format pfmtrace|{formats}] -o FILE -- CMD ARGS...
  record [session flags] [--output-format ...] -o FILE (-p PID | -t TID)
                              attach to a running process until it exits or ^C
                              (-t: one thread of it, until that thread exits)
                              every thread is traced, and children across fork
                              and exec unless --no-inherit (as perf record)
                              run CMD traced; exit with CMD's status (an export
                              format: FILE is the export, the trace FILE.pfmtrace)
  gdbserver (--pid PID | -- CMD ARGS...) [--listen [HOST:]PORT]
                              a GDB remote stub on stdin/stdout (gdb PROG -ex
                              'target remote | pfmctl gdbserver --pid PID'):
                              run control and `record btrace bts` through pfm,
                              beside other sessions on the same process
  stat [-e EVENT]... [--no-inherit] (-- CMD ARGS... | -p PID | -t TID)
                              counters of CMD (or of PID, or thread TID, until
                              it exits or ^C): every thread, and the processes
                              it starts unless --no-inherit; printed as perf
                              stat does
  report FILE [--limit N] [--records] [--timeline OUT.svg]
                              a summary, streamed: records by type, loss, hot
                              functions and their libraries, counters, the last
                              N (20) branches; --records: every record too;
                              --timeline: an SVG of when threads ran and counters counted
  script TRACE                every record on one line with names, as perf script
  export TRACE -o FILE [--format {formats}]
                              a trace file for other tools (perf: perf.data
                              for perf script / perf report; docs/export.md)
  sim pause|resume|run NS|stats [PID]|exit PID
                              control the simulated machine (--driver sim)
  shutdown                    stop the daemon (the embedded one by default)
global flags:
  --socket PATH   daemon socket (default $PFMD_SOCKET, /run/pfmd.sock, or an
                  embedded pfmd started on demand on $XDG_RUNTIME_DIR/pfmd/
                  pfmd.sock, else /tmp/pfmd-$UID/pfmd.sock)
  --json          one JSON document on stdout
  --driver host|sim, --sim-pmu NAME, --sim-cpus N, --sim-tasks N, --sim-seed N
                  how to start the embedded pfmd if none runs
)",
                             {{"{formats}", ExportFormatList("|")}});
}

int RunPfmctl(const std::vector<std::string>& args, std::ostream& out,
              std::ostream& err) {
  // The last line of defence for the "one error line, no signal" contract:
  // reply data is read through checked accessors (reply.h), but allocation
  // and the libraries below may still throw.
  SetExitSignal(0);  // a second run in the same process (tests)
  try {
    return Run(args, out, err);
  } catch (const std::exception& e) {
    PrintError(err, "INTERNAL", absl::StrCat("uncaught exception: ", e.what()));
  } catch (...) {
    PrintError(err, "INTERNAL", "uncaught exception of unknown type");
  }
  return 1;
}

}  // namespace pfm
