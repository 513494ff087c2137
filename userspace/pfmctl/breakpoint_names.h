// Breakpoints given by name (`--breakpoint main`, `prog.c:42`,
// `write+0x10`, `counter:8:w`): pfmctl resolves them to addresses against the
// target process's mappings before it creates the session, because pfmd takes
// addresses only (SessionSpec::FromJson refuses a name). The resolver is
// libpfm-bts' ResolveLocation (pfm/symbolizer.h: elfutils symbol and DWARF
// line tables). docs/pfmctl.md, "Names as input", says where each case is
// resolved and why.
#ifndef PFM_USERSPACE_PFMCTL_BREAKPOINT_NAMES_H_
#define PFM_USERSPACE_PFMCTL_BREAKPOINT_NAMES_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/client.h"
#include "pfm/session_spec.h"

namespace pfm {

// Resolves every named breakpoint of *spec that has no address yet against
// `maps` (executable file mappings) and `exe` (the program's path): each
// gets its address, and keeps its name as its label. A breakpoint with
// access x is code (functions, source lines), any other data (objects).
// The first refusal is returned (NOT_FOUND "no symbol 'foo' in /p/prog (and
// its libraries searched: ...)", INVALID_ARGUMENT for an ambiguous name or an
// offset beyond its symbol, ...); *spec is then unchanged. *missing, if
// given, collects the NOT_FOUND ones instead of failing on them (for a
// retry once more of the process is mapped).
absl::Status ResolveNamesIn(const std::vector<Mapping>& maps, const std::string& exe,
                            SessionSpec* spec, std::vector<std::string>* missing = nullptr);

// ResolveNamesIn against the running process `pid`: /proc/PID/maps and
// /proc/PID/exe, read now. NOT_FOUND if the process does not exist.
absl::Status ResolveBreakpointNames(pid_t pid, SessionSpec* spec);

// Names are looked up in a real process's files: FAILED_PRECONDITION when the
// daemon behind `c` runs the sim driver (its tasks have no files).
absl::Status CheckDaemonCanResolveNames(Client& c);

// `record -- CMD`'s program: a SpawnStopped child (held before exec), and
// the resolution of names that needs it to have exec'd.
//
// ResolveNames, when *spec has names without addresses:
//   1. pfmctl traces the child itself (PTRACE_SEIZE with exec events),
//      releases it and waits for the exec: the new program and its dynamic
//      linker are mapped, and not one of their instructions has run. The
//      names are resolved in the program (a PIE's load bias is known only
//      now).
//   2. Names the program does not have (a library's `write`) need its
//      libraries mapped: if the program has a dynamic linker, the child runs
//      on to the program's entry point (AT_ENTRY, where pfmctl puts an int3
//      byte and takes it away again), by which time the dynamic linker has
//      mapped the libraries the program needs, and the rest are resolved
//      then, in the libraries and the dynamic linker last. The session then
//      starts there: the dynamic linker's own run is not traced. Libraries
//      opened later (dlopen) are not searched.
//   3. The child is left stopped (SIGSTOP), no longer traced by pfmctl, so
//      pfmd's own tracer can attach to it; Start() lets it go on.
// Address filters by range and a start address (given as numbers) need
// the same exec stop, without any name: they are the program's addresses,
// and pfmd's tracer takes them as the ones of the image it attaches to, so
// it must attach to the program, not to the held copy of pfmctl.
// Without names, ranges or a start it does nothing, and Start() releases the
// child as before.
// On failure the child is killed if it had exec'd (AbandonAndReap reaps it).
//
// Not thread-safe; one object per child, used by the thread that spawned it.
class LaunchedChild {
 public:
  explicit LaunchedChild(pid_t pid) : pid_(pid) {}

  absl::Status ResolveNames(SessionSpec* spec);
  // Lets the child run: Release() while it is held before exec, SIGCONT
  // after ResolveNames stopped it. Returns 0 or a negative errno (*d says
  // why).
  int Start(ErrorDetail* d);
  // Ends a child that has not been started (Abandon() before exec, SIGKILL
  // after) and reaps it. Nothing for a child started (the caller waits for
  // it as for any command) or already reaped.
  void AbandonAndReap();

 private:
  enum class State { kHeld, kExecStopped, kStarted, kReaped };
  // Runs the traced child (stopped at its exec) to its program's entry
  // point, where it is stopped again, traced. `exe` names it in errors.
  absl::Status RunToEntry(const std::string& exe);
  // SIGKILL once it has exec'd (the caller still reaps it).
  void Kill();

  pid_t pid_;
  State state_ = State::kHeld;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMCTL_BREAKPOINT_NAMES_H_
