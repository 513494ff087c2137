#include "userspace/pfmd/auth.h"

#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pfm {

std::optional<Credentials> Peer::TracerCredentials() const {
  if (privileged()) return std::nullopt;
  return Credentials{uid, gid, groups};
}

absl::StatusOr<AuthPolicy> MakeAuthPolicy(const std::string& admin_group) {
  AuthPolicy p;
  if (admin_group.empty()) return p;
  uint32_t gid;
  if (absl::SimpleAtoi(admin_group, &gid)) {
    p.admin_gid = gid;
    return p;
  }
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (::getgrnam_r(admin_group.c_str(), &g, buf.data(), buf.size(), &found) != 0 ||
      found == nullptr)
    return absl::NotFoundError(absl::StrCat(
        "--admin-group ", admin_group, ": no such group"));
  p.admin_gid = found->gr_gid;
  return p;
}

absl::StatusOr<Peer> PeerFromSocket(int fd, const AuthPolicy& policy) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return absl::UnavailableError(
        absl::StrCat("SO_PEERCRED: ", strerror(errno)));
  Peer peer;
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  // SO_PEERGROUPS: the groups at connect(), in pfmd's user namespace.
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      break;
    }
    if (errno != ERANGE || glen <= groups.size() * sizeof(gid_t))
      return absl::UnavailableError(
          absl::StrCat("SO_PEERGROUPS: ", strerror(errno)));
    groups.resize(glen / sizeof(gid_t));
  }
  // An unmapped id arrives as the overflow id (65534), never as 0.
  peer.groups = std::move(groups);
  peer.admin = peer.uid == 0;
  if (policy.admin_gid.has_value()) {
    const gid_t a = *policy.admin_gid;
    if (peer.gid == a ||
        std::find(peer.groups.begin(), peer.groups.end(), a) != peer.groups.end())
      peer.admin = true;
  }
  return peer;
}

absl::StatusOr<TaskCreds> ReadTaskCreds(pid_t pid) {
  if (pid <= 0)
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process id"));
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::string line;
  TaskCreds c;
  bool uids = false, gids = false;
  while (std::getline(in, line)) {
    const bool u = line.rfind("Uid:", 0) == 0, g = line.rfind("Gid:", 0) == 0;
    if (!u && !g) continue;
    std::istringstream ss(line.substr(4));
    if (u) {
      ss >> c.ruid >> c.euid >> c.suid;
      uids = static_cast<bool>(ss);
    } else {
      ss >> c.rgid >> c.egid >> c.sgid;
      gids = static_cast<bool>(ss);
    }
    if (uids && gids) return c;
  }
  return absl::NotFoundError(absl::StrCat("no credentials for process ", pid));
}

absl::Status MayTraceTask(const Peer& peer, pid_t pid) {
  absl::StatusOr<TaskCreds> c = ReadTaskCreds(pid);
  if (!c.ok()) return c.status();
  if (peer.privileged()) return absl::OkStatus();
  if (c->ruid == peer.uid && c->euid == peer.uid && c->suid == peer.uid &&
      c->rgid == peer.gid && c->egid == peer.gid && c->sgid == peer.gid)
    return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "uid ", peer.uid, " may not trace pid ", pid, " (its uids ", c->ruid, "/",
      c->euid, "/", c->suid, ", gids ", c->rgid, "/", c->egid, "/", c->sgid,
      "; the client has gid ", peer.gid, "): tracing needs the same uid and "
      "gid, as ptrace does, or a privileged client (root or --admin-group)"));
}

absl::Status MayTracePrivileged(const Peer& peer, const char* what) {
  if (peer.privileged()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " needs a privileged client (uid 0 or a member of pfmd's "
      "--admin-group); uid ", peer.uid, " is neither"));
}

bool PidfdAlive(int pidfd) {
  // A pidfd polls readable once its process has exited.
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

namespace {

// The Tgid of task `tid` from /proc/TID/status (a thread's directory is
// there though /proc does not list it); 0 if unknown.
pid_t ThreadGroupOf(pid_t tid) {
  std::ifstream in(absl::StrCat("/proc/", tid, "/status"));
  for (std::string line; std::getline(in, line);) {
    int tgid = 0;
    if (std::sscanf(line.c_str(), "Tgid: %d", &tgid) == 1) return static_cast<pid_t>(tgid);
  }
  return 0;
}

}  // namespace

absl::StatusOr<UniqueFd> OpenTraceTarget(const Peer& peer, pid_t pid) {
  if (pid <= 0)
    return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process id"));
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ESRCH) return absl::NotFoundError(absl::StrCat("no process ", pid));
    // A thread that is not its process's leader: EINVAL before Linux 6.9,
    // ENOENT since (pidfd_open(2)). Say which process it belongs to.
    if (err == EINVAL || err == ENOENT) {
      if (const pid_t tgid = ThreadGroupOf(pid); tgid > 0 && tgid != pid)
        return absl::InvalidArgumentError(absl::StrCat(
            "pid ", pid, " is a thread of process ", tgid,
            ", not a process: give --pid ", tgid,
            " (a session traces every thread of its process)"));
      if (err == ENOENT) return absl::NotFoundError(absl::StrCat("no process ", pid));
    }
    return absl::UnavailableError(absl::StrCat("pidfd_open(", pid, "): ", strerror(err)));
  }
  if (absl::Status s = MayTraceTask(peer, pid); !s.ok()) return s;
  // The credentials we read belong to the process the pidfd holds only if it
  // is still alive now (a recycled pid would be a different process).
  if (!PidfdAlive(fd.get()))
    return absl::NotFoundError(absl::StrCat("process ", pid, " exited"));
  return fd;
}

}  // namespace pfm
