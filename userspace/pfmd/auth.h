// Authorization (DESIGN §6, docs/security.md).
//
// Who a client is comes from the socket only: SO_PEERCRED (uid, gid, pid)
// and SO_PEERGROUPS (supplementary groups), both fixed by the kernel when the
// client connected. Nothing is read from the peer's /proc entry: its
// capabilities there are counted in the peer's own user namespace (a user
// inside `unshare -Ur` has all of them) and may belong to a different
// program by the time they are read (the peer execs a setuid binary after
// connecting). "Privileged" is decided once, at accept:
//   - uid 0 as the daemon's user namespace sees it (pfmd runs in the
//     initial one; a uid mapped from an unprivileged user arrives as that
//     user's uid, never as 0), or
//   - membership of the configured admin group (--admin-group).
// A privileged client sees and controls every session and may trace kernel
// mode and whole CPUs; its tracers run with pfmd's own credentials.
//
// Tracing a task: MayTraceTask is pfmd's early, explanatory check (same
// uid and gid as every id of the task, as ptrace's rule starts); the final
// word is the kernel's, because an unprivileged client's tracer attaches
// (PTRACE_SEIZE, perf_event_open) under the client's own credentials
// (TracerCredentials), so dumpable, setgid, Yama and LSM rules apply, and a
// traced program's setuid/setgid exec does not raise its privileges.
// Targets are held by pidfd: the credentials are checked after the pidfd is
// open and the pidfd is checked alive afterwards, so a pid recycled between
// the two is never traced by mistake.
#ifndef PFM_USERSPACE_PFMD_AUTH_H_
#define PFM_USERSPACE_PFMD_AUTH_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernel/drivers/credentials.h"
#include "pfm/unique_fd.h"

namespace pfm {

// Who is asking, as the kernel recorded it when the client connected.
struct Peer {
  pid_t pid = 0;  // informational (logs); never used to decide anything
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  bool admin = false;         // uid 0 or a member of --admin-group

  // May see and control every session, trace kernel mode and CPUs.
  bool privileged() const { return admin; }
  // The credentials a tracer for this peer attaches with: nullopt for a
  // privileged peer (pfmd's own), else exactly the peer's ids and groups
  // with no capabilities.
  std::optional<Credentials> TracerCredentials() const;
};

struct AuthPolicy {
  std::optional<gid_t> admin_gid;  // --admin-group, resolved
};

// Resolves --admin-group (a name from the group database, or a number).
// Empty: no admin group. NOT_FOUND for an unknown name.
absl::StatusOr<AuthPolicy> MakeAuthPolicy(const std::string& admin_group);

// The peer of a connected AF_UNIX socket, from SO_PEERCRED and
// SO_PEERGROUPS. UNAVAILABLE if the kernel gives no credentials.
absl::StatusOr<Peer> PeerFromSocket(int fd, const AuthPolicy& policy);

struct TaskCreds {
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
};
// NOT_FOUND if the task does not exist.
absl::StatusOr<TaskCreds> ReadTaskCreds(pid_t pid);

// Whether `peer` may trace `pid`; PERMISSION_DENIED says why. A privileged
// peer may trace anything; others need their uid and gid to match every
// uid and gid of the task (the kernel still decides at attach).
absl::Status MayTraceTask(const Peer& peer, pid_t pid);
// Kernel-mode or CPU-wide tracing: privileged peers only.
absl::Status MayTracePrivileged(const Peer& peer, const char* what);

// Opens a pidfd on `pid`, checks the peer may trace it, and checks the pidfd
// still refers to a live process (no recycling in between).
absl::StatusOr<UniqueFd> OpenTraceTarget(const Peer& peer, pid_t pid);

// True while the process behind `pidfd` has not exited.
bool PidfdAlive(int pidfd);

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_AUTH_H_
