#include "userspace/pfmd/auth.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace pfm {

uint64_t EffectiveCaps(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0)
      return std::strtoull(line.c_str() + 7, nullptr, 16);
  return 0;
}

absl::StatusOr<TaskCreds> ReadTaskCreds(pid_t pid) {
  if (pid <= 0)
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process id"));
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    std::istringstream ss(line.substr(4));
    TaskCreds c;
    ss >> c.ruid >> c.euid >> c.suid;
    if (!ss) break;
    return c;
  }
  return absl::NotFoundError(absl::StrCat("no credentials for process ", pid));
}

absl::Status MayTraceTask(uid_t uid, uint64_t caps, pid_t pid) {
  absl::StatusOr<TaskCreds> c = ReadTaskCreds(pid);
  if (!c.ok()) return c.status();
  if (caps >> kCapSysPtrace & 1) return absl::OkStatus();
  if (c->ruid == uid && c->euid == uid && c->suid == uid) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "uid ", uid, " may not trace pid ", pid, " (owned by uid ", c->euid,
      "): tracing needs the same uid or CAP_SYS_PTRACE, as ptrace does"));
}

absl::Status MayTracePrivileged(uid_t uid, uint64_t caps, const char* what) {
  if ((caps >> kCapPerfmon & 1) || (caps >> kCapSysAdmin & 1))
    return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " needs CAP_PERFMON or CAP_SYS_ADMIN; uid ", uid, " has neither"));
}

bool PidfdAlive(int pidfd) {
  // A pidfd polls readable once its process has exited.
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

absl::StatusOr<UniqueFd> OpenTraceTarget(uid_t uid, uint64_t caps, pid_t pid) {
  if (pid <= 0)
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process id"));
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) {
    if (errno == ESRCH) return absl::NotFoundError(absl::StrCat("no process ", pid));
    return absl::UnavailableError(
        absl::StrCat("pidfd_open(", pid, "): ", strerror(errno)));
  }
  if (absl::Status s = MayTraceTask(uid, caps, pid); !s.ok()) return s;
  // The credentials we read belong to the process the pidfd holds only if it
  // is still alive now (a recycled pid would be a different process).
  if (!PidfdAlive(fd.get()))
    return absl::NotFoundError(absl::StrCat("process ", pid, " exited"));
  return fd;
}

}  // namespace pfm
