#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/reply.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "userspace/pfmd/server.h"
#include "userspace/pfmd/socket_dir.h"

namespace pfm {
namespace {

constexpr int kEmbeddedIdleExitS = 600;

char** g_argv = nullptr;
int g_argc = 0;

// The embedded daemon's name in `ps`/`top`/`pgrep`: the thread name (at
// most 15 bytes) and the command line, written over pfmctl's argv, which
// /proc/PID/cmdline reads. The environment strings that follow the
// arguments are copied to the heap first, so their bytes can hold the title
// too (as setproctitle does); what still does not fit is cut. Runs in the
// freshly forked daemon, single-threaded.
void NameEmbeddedDaemon(const std::string& socket) {
  ::prctl(PR_SET_NAME, "pfmd (embedded)", 0, 0, 0);
  if (g_argv == nullptr || g_argc <= 0) return;
  char* begin = g_argv[0];
  char* end = g_argv[g_argc - 1] + std::strlen(g_argv[g_argc - 1]);
  size_t n_env = 0;
  while (environ != nullptr && environ[n_env] != nullptr) ++n_env;
  char** env = new char*[n_env + 1];  // the daemon's for its lifetime
  for (size_t i = 0; i < n_env; ++i) {
    if (environ[i] == end + 1) end = environ[i] + std::strlen(environ[i]);
    env[i] = ::strdup(environ[i]);
  }
  env[n_env] = nullptr;
  environ = env;
  const size_t room = static_cast<size_t>(end - begin);
  const std::string title = "pfmd (embedded) --socket " + socket;
  std::memset(begin, 0, room);
  std::memcpy(begin, title.data(), std::min(room, title.size()));
}

// Starts a daemon in a grandchild of this process (double fork, so it is
// nobody's zombie), listening on `path`; returns once it listens.
absl::Status StartEmbedded(PfmdConfig config, const std::string& path) {
  config.socket = path;
  config.socket_mode = 0600;
  if (config.idle_exit_s == 0) config.idle_exit_s = kEmbeddedIdleExitS;
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  // Above stdio (pfmctl may have started with fd 0, 1 or 2 closed): the
  // daemon's stdio is replaced below, its ready pipe must survive that.
  if (ready[1] <= 2) {
    const int moved = ::fcntl(ready[1], F_DUPFD_CLOEXEC, 3);
    ::close(ready[1]);
    if (moved < 0) {
      ::close(ready[0]);
      return absl::InternalError(absl::StrCat("fcntl: ", strerror(errno)));
    }
    ready[1] = moved;
  }
  pid_t child = ::fork();
  if (child < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  }
  if (child == 0) {
    ::close(ready[0]);
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    // Both above stdio before the dup2s below (pfmctl may have started
    // with some of fds 0-2 closed: a file opened there would be replaced).
    const auto above_stdio = [](int fd) {
      return fd >= 0 && fd <= 2 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd;
    };
    const int devnull = above_stdio(::open("/dev/null", O_RDWR | O_CLOEXEC));
    const std::string log = path + ".log";
    // This start's log only: the file does not grow over the daemon's
    // restarts (one already running writes with O_APPEND at the new end).
    const int logfd = above_stdio(::open(
        log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(logfd >= 0 ? logfd : devnull, 2);
    // A daemon outlives its starter: it keeps none of the starter's other
    // files (a lock `flock` holds, a pipe a caller waits on for EOF) and
    // not its working directory. The ready pipe goes to fd 3, everything
    // above is closed (glibc's closefrom: close_range, else /proc/self/fd).
    if (ready[1] != 3) {
      if (::dup2(ready[1], 3) != 3) ::_exit(1);
      ready[1] = 3;
    }
    ::fcntl(3, F_SETFD, FD_CLOEXEC);
    ::closefrom(4);
    if (path[0] == '/' && ::chdir("/") != 0) ::_exit(1);
    NameEmbeddedDaemon(path);
    // This grandchild shares pfmctl's stack: an exception must not unwind
    // into pfmctl's code and carry on there as a second pfmctl.
    int rc = 1;
    try {
      rc = RunPfmd(config, ready[1]);
    } catch (...) {
      rc = 1;
    }
    ::_exit(rc);
  }
  ::close(ready[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  pollfd p{ready[0], POLLIN, 0};
  char c = 0;
  int r = ::poll(&p, 1, 15000);
  ssize_t n = r > 0 ? ::read(ready[0], &c, 1) : 0;
  ::close(ready[0]);
  if (n != 1)
    return absl::UnavailableError(absl::StrCat(
        "the embedded pfmd did not start on ", path, " (see ", path, ".log)"));
  return absl::OkStatus();
}

// "a directory owned by uid 0, mode 0755", for refusals.
std::string DescribeFile(const struct stat& st) {
  const char* type = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISLNK(st.st_mode)  ? "a symbolic link"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISREG(st.st_mode)  ? "a regular file"
                                            : "a special file";
  return absl::StrFormat("%s owned by uid %u, mode %04o", type, st.st_uid,
                         st.st_mode & 07777);
}

}  // namespace

void SetProcessArgv(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
}

absl::StatusOr<std::string> PrivateSocketPath() {
  // The uid the embedded pfmd runs as, and judges its directories by.
  const uid_t me = ::geteuid();
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  // $XDG_RUNTIME_DIR only if the embedded pfmd would accept it as the
  // directory above its own (userspace/pfmd/socket_dir.h): not, e.g., a
  // user's directory under `sudo -E` (root's pfmd would refuse it).
  const bool use_xdg = xdg != nullptr && *xdg == '/' &&
                       CheckSocketDirectory(absl::StrCat(xdg, "/pfmd"), me).ok();
  const std::string dir =
      use_xdg ? absl::StrCat(xdg, "/pfmd") : absl::StrCat("/tmp/pfmd-", me);
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return absl::UnavailableError(
          absl::StrCat("cannot inspect ", dir, ": ", strerror(errno)));
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return absl::UnavailableError(
          absl::StrCat("cannot create ", dir, ": ", strerror(errno)));
    // Judge whatever is there now, not what mkdir meant to make: in /tmp
    // another user may have won the race to create this name.
    if (::lstat(dir.c_str(), &st) != 0)
      return absl::UnavailableError(
          absl::StrCat("cannot inspect ", dir, ": ", strerror(errno)));
  }
  // Whoever owns or can write the directory decides what listens in it.
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077) != 0)
    return absl::PermissionDeniedError(absl::StrCat(
        dir, " must be a directory owned by uid ", me,
        " with no group or other permissions, but it is ",
        DescribeFile(st), ": refusing to connect to or start a pfmd there"));
  const std::string sock = dir + "/pfmd.sock";
  if (::lstat(sock.c_str(), &st) != 0) {
    if (errno == ENOENT) return sock;  // no daemon yet: ours to start
    return absl::UnavailableError(
        absl::StrCat("cannot inspect ", sock, ": ", strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode) || st.st_uid != me)
    return absl::PermissionDeniedError(absl::StrCat(
        sock, " must be a socket owned by uid ", me, ", but it is ",
        DescribeFile(st), ": refusing to connect to or start a pfmd there"));
  return sock;
}

absl::StatusOr<Client> ConnectOrStart(const CliContext& ctx,
                                      std::string* path_used) {
  const char* env = std::getenv(kSocketEnv);
  if (!ctx.socket_flag.empty() || (env != nullptr && *env != '\0')) {
    *path_used = ResolveSocketPath(ctx.socket_flag);
    return Client::Connect(*path_used);
  }
  *path_used = kDefaultSocket;
  absl::StatusOr<Client> system = Client::Connect(kDefaultSocket);
  // Only "nothing listens" falls through: a refused impostor on the system
  // socket is reported, not silently replaced by a private daemon.
  if (system.ok() || !absl::IsUnavailable(system.status())) return system;
  absl::StatusOr<std::string> priv = PrivateSocketPath();
  if (!priv.ok()) return priv.status();
  *path_used = *priv;
  absl::StatusOr<Client> c = Client::Connect(*priv);
  if (c.ok() || !absl::IsUnavailable(c.status())) return c;
  absl::Status s = StartEmbedded(ctx.embedded, *priv);
  if (!s.ok()) return s;
  return Client::Connect(*priv);
}

absl::StatusOr<Client> Connect(const CliContext& ctx) {
  std::string path;
  return ConnectOrStart(ctx, &path);
}

absl::StatusOr<std::string> DaemonDriver(Client& c) {
  absl::StatusOr<Client::Reply> st = c.Call("status");
  if (!st.ok()) return st.status();
  ReplyReader reader("status", st->result);
  const std::string driver = reader.result().Member("driver").String();
  if (!reader.ok()) return reader.status();
  return driver;
}

}  // namespace pfm
