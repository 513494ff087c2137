// Authorization, modelled on ptrace's access rule (DESIGN §6):
//   - a client may trace a task only if it could ptrace it: the client's uid
//     equals the task's real, effective and saved uids, or the client holds
//     CAP_SYS_PTRACE;
//   - kernel-mode tracing and CPU-wide sessions need CAP_PERFMON or
//     CAP_SYS_ADMIN;
//   - a client sees and controls only its own sessions unless privileged.
// Targets are held by pidfd: the credentials are checked after the pidfd is
// open and the pidfd is checked alive afterwards, so a pid recycled between
// the two is never traced by mistake.
#ifndef PFM_USERSPACE_PFMD_AUTH_H_
#define PFM_USERSPACE_PFMD_AUTH_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pfm/unique_fd.h"

namespace pfm {

// Effective capabilities of a process, from /proc/PID/status (CapEff).
// A process that is gone has none.
uint64_t EffectiveCaps(pid_t pid);

inline constexpr int kCapSysPtrace = 19;  // linux/capability.h
inline constexpr int kCapSysAdmin = 21;
inline constexpr int kCapPerfmon = 38;

struct TaskCreds {
  uid_t ruid = 0, euid = 0, suid = 0;
};
// NOT_FOUND if the task does not exist.
absl::StatusOr<TaskCreds> ReadTaskCreds(pid_t pid);

// Whether a peer (uid, caps) may trace `pid`; PERMISSION_DENIED says why.
absl::Status MayTraceTask(uid_t uid, uint64_t caps, pid_t pid);
// Kernel-mode or CPU-wide tracing.
absl::Status MayTracePrivileged(uid_t uid, uint64_t caps, const char* what);

// Opens a pidfd on `pid`, checks the peer may trace it, and checks the pidfd
// still refers to a live process (no recycling in between).
absl::StatusOr<UniqueFd> OpenTraceTarget(uid_t uid, uint64_t caps, pid_t pid);

// True while the process behind `pidfd` has not exited.
bool PidfdAlive(int pidfd);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_AUTH_H_
