// Test harness for end-to-end tests: runs the real pfmd and pfmctl binaries
// (Bazel data deps) as child processes, on private sockets in a temp dir.
#ifndef PFM_TESTS_TESTING_HARNESS_H_
#define PFM_TESTS_TESTING_HARNESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <boost/json.hpp>

namespace pfm::testing {

struct Result {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Path of a binary in this test's runfiles, e.g. "userspace/pfmd/pfmd".
std::string Runfile(const std::string& rel);
std::string PfmdPath();
std::string PfmctlPath();

// A fresh directory under $TEST_TMPDIR (or /tmp), removed by nobody: Bazel
// cleans TEST_TMPDIR.
std::string MakeTempDir(const std::string& prefix);

// A fresh short directory under /tmp for sockets (Bazel's TEST_TMPDIR is too
// long a path for sun_path). Removed with everything in it when the process
// that made it exits normally (not by its forked children; a test killed by
// a signal leaves it).
std::string MakeSocketDir();

// Runs argv to completion, capturing stdout and stderr. `env` entries are
// added to the environment. Kills it after timeout_s.
Result Run(const std::vector<std::string>& argv,
           const std::map<std::string, std::string>& env = {},
           int timeout_s = 60);

// Starts pfmctl --socket <socket> args... as a child and returns its pid
// (-1 when fork fails) without waiting: for tests that signal it or watch
// it run. `in_child`, if set, runs in the forked child just before exec
// (redirections, limits, umask).
pid_t StartPfmctl(const std::string& socket, std::vector<std::string> args,
                  const std::function<void()>& in_child = nullptr);

// pfmctl --socket <socket> args...
Result Pfmctl(const std::string& socket, std::vector<std::string> args,
              int timeout_s = 60);
// Same, parsing stdout as JSON (fails the test if it is not).
boost::json::value PfmctlJson(const std::string& socket,
                              std::vector<std::string> args);

// A pfmd child process on its own socket; SIGTERM and reaped on destruction.
class Daemon {
 public:
  // `in_child`, if set, runs in the forked child just before it execs pfmd
  // (e.g. to install a seccomp filter pfmd then runs under).
  explicit Daemon(std::vector<std::string> flags,
                  const std::function<void()>& in_child = nullptr);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  bool started() const { return started_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and waits; returns the exit code.
  int Stop();
  // Sends `sig` (e.g. SIGKILL) and reaps the daemon; returns its wait status.
  int Kill(int sig);
  // Lets other uids reach the socket: its directory is 0700 by default
  // (the socket itself is 0666: access is decided per request from
  // SO_PEERCRED, not by the file mode). True on success.
  bool OpenToOtherUids() const;

 private:
  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
  bool started_ = false;
};

// Opens a raw connection to a Unix socket (for malformed-input tests).
int ConnectRaw(const std::string& path);

// Runs `fn` in a forked child with uid and gid `uid`, no supplementary
// groups and dumpable (as a user's own processes are), and returns the
// object it produced. A child that fails to drop privileges or dies yields
// {"child_failed": ...}.
boost::json::object AsUid(uid_t uid,
                          const std::function<boost::json::object()>& fn);

// Forks a child that pauses until killed, at pid `want` if it can:
// writing want - 1 to /proc/sys/kernel/ns_last_pid (root) makes the next
// fork take `want`, retried up to `attempts` times when another process
// forks in between. Returns the child's pid: `want` on success, another
// pid (or -1) if it did not get it. The caller kills and reaps it.
pid_t ForkPausedAt(pid_t want, int attempts);

}  // namespace pfm::testing

#endif  // PFM_TESTS_TESTING_HARNESS_H_
