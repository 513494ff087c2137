#include "kernel/drivers/credentials.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace pfm {

int AssumeCredentials(const Credentials& c, ErrorDetail* d) {
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
