#include "kernel/drivers/credentials.h"

#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace pfm {

int AssumeCredentials(const Credentials& c, ErrorDetail* d) {
  if (::geteuid() != 0) {
    // A user's own pfmd (pfmctl's embedded daemon) already is its client.
    if (c.uid == ::geteuid()) return 0;
    return SetError(d, -EPERM, "pfmd runs as uid %u and cannot act for uid %u",
                    unsigned(::geteuid()), unsigned(c.uid));
  }
  // Groups first, then gid, then uid: after the uid change a former root
  // thread could no longer set the others.
  if (::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) != 0 ||
      ::syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0 ||
      ::syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0) {
    const int e = errno;
    return SetError(d, -e, "cannot take the credentials of uid %u gid %u: %s",
                    unsigned(c.uid), unsigned(c.gid), strerror(e));
  }
  return 0;
}

int ProbePtraceAccess(pid_t pid, ErrorDetail* d) {
  // process_vm_readv checks PTRACE_MODE_ATTACH_REALCREDS before it touches
  // memory: EPERM/ESRCH is the kernel's refusal, EFAULT (address 0 is never
  // mapped for reading here) means access was granted.
  char b;
  iovec local{&b, 1}, remote{nullptr, 1};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) >= 0 || errno == EFAULT)
    return 0;
  const int e = errno;
  return SetError(d, -e, "the kernel refuses to let uid %u trace pid %d: %s%s",
                  unsigned(::geteuid()), int(pid), strerror(e),
                  e == EPERM ? " (not dumpable, setgid, other ids, or a "
                               "ptrace_scope/LSM rule)"
                             : "");
}

int RunWithCredentials(const std::optional<Credentials>& c,
                       const std::function<int()>& fn, ErrorDetail* d) {
  if (!c.has_value()) return fn();
  int rc = 0;
  ErrorDetail local;
  std::thread t([&] {
    rc = AssumeCredentials(*c, &local);
    if (rc == 0) rc = fn();
  });
  t.join();
  if (rc < 0 && d != nullptr && local.message[0] != '\0') *d = local;
  return rc;
}

}  // namespace pfm
