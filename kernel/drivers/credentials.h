// Credentials a driver acts with on behalf of a client: the "let the kernel
// decide" half of authorization (docs/security.md). A tracer that attaches
// (PTRACE_SEIZE, perf_event_open on a task) while holding exactly the
// client's uid, gid and groups, and no capabilities, is subject to every rule
// the kernel applies to that client: same ids, dumpable, Yama, LSMs; and a
// traced program's setuid/setgid exec does not raise its privileges (the
// kernel checks the tracer's credentials recorded at attach).
#ifndef PFM_KERNEL_DRIVERS_CREDENTIALS_H_
#define PFM_KERNEL_DRIVERS_CREDENTIALS_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <vector>

#include "kernel/uapi/pfm_error.h"

namespace pfm {

struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// Sets the calling thread's real, effective and saved uid and gid, and its
// groups, to `c`. Raw system calls: Linux credentials are per thread and
// glibc's wrappers would change every thread of the process. A root caller
// becoming a non-root uid loses all capabilities; the change cannot be
// undone on this thread. A side effect of the kernel's: once any thread's
// effective uid changes, the process is no longer dumpable. Returns 0 or
// -errno (-EPERM if the caller may not take these credentials). A caller
// that is not root and already has c.uid keeps its credentials (0).
int AssumeCredentials(const Credentials& c, ErrorDetail* d);

// Asks the kernel whether the calling thread may ptrace-attach to `pid`
// (PTRACE_MODE_ATTACH_REALCREDS, as PTRACE_SEIZE would), without attaching:
// 0, or -EPERM/-ESRCH with the reason in *d.
int ProbePtraceAccess(pid_t pid, ErrorDetail* d);

// Runs `fn` on a new thread that first assumes `c` (nullopt: runs it with the
// caller's credentials, on the calling thread) and returns what `fn`
// returned, or AssumeCredentials' error without running it. Objects `fn`
// creates (fds) outlive the thread.
int RunWithCredentials(const std::optional<Credentials>& c,
                       const std::function<int()>& fn, ErrorDetail* d);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_CREDENTIALS_H_
