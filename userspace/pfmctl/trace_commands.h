// Commands that read a session's records: `snapshot` (a ring now), `stream`
// (a lossless ring into a file until the session ends), `record` (run a
// command traced into a file), `report` (a trace file, symbolized) and
// `export` (a trace file in another tool's format).
#ifndef PFM_USERSPACE_PFMCTL_TRACE_COMMANDS_H_
#define PFM_USERSPACE_PFMCTL_TRACE_COMMANDS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/uapi/pfm_error.h"
#include "userspace/pfmctl/context.h"

namespace pfm {

// `snapshot ID [-o FILE]`: the records in a session's ring, oldest first.
absl::StatusOr<int> SnapshotCommand(const CliContext& ctx, const CommandArgs& args);

// `stream ID -o FILE`: copies a lossless ring into FILE until the session
// ends, SIGINT/SIGTERM, or pfmd goes away (then UNAVAILABLE, and FILE has
// no trailer: cut short).
absl::StatusOr<int> StreamCommand(const CliContext& ctx, const CommandArgs& args);

// `record [session flags] -o FILE -- CMD ARGS...`: runs CMD as this
// process's child, held before exec while the daemon attaches
// (SpawnStopped/Release: kernel/drivers/ptrace/soft_bts.h), streams a
// lossless ring to FILE while it runs (or snapshots a history ring when it
// ends), and exits with CMD's status. `--output-format F` (an export
// format, export.h) writes the trace to FILE.pfmtrace and then exports it
// to FILE; an export that fails is the command's error instead of CMD's
// status. The session is tied to this connection
// (not detached): if pfmctl dies, the daemon ends it.
absl::StatusOr<int> RecordCommand(const CliContext& ctx, const CommandArgs& args);

// What execvp would run for `name` (a path with '/', else $PATH), checked
// before anything is created: NOT_FOUND "NAME: command not found" (or "no
// such file"), PERMISSION_DENIED "NAME: not an executable file".
absl::Status CheckCommand(const std::string& name);

// SpawnStopped (kernel/drivers/ptrace/soft_bts.h) for a command pfmctl
// runs: with --json, stdout is the one JSON document, so the program's own
// stdout goes to pfmctl's stderr (still the terminal in an interactive run).
int SpawnCommand(const CliContext& ctx, const std::vector<std::string>& argv, pid_t* pid,
                 ErrorDetail* d);

// `report FILE [--limit N]`: see report.h.
absl::StatusOr<int> ReportCommand(const CliContext& ctx, const CommandArgs& args);

// `export TRACE -o FILE [--format perf]`: see export.h. A trace cut short
// is exported as far as it reads, then DATA_LOSS (exit status 1).
absl::StatusOr<int> ExportCommand(const CliContext& ctx, const CommandArgs& args);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_TRACE_COMMANDS_H_
