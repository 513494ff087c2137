#include "tests/testing/harness.h"

#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace pfm::testing {

std::string Runfile(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr)
    return std::string(srcdir) + "/" + (ws ? ws : "pfm") + "/" + rel;
  return "bazel-bin/" + rel;  // run by hand from the workspace root
}

std::string PfmdPath() { return Runfile("userspace/pfmd/pfmd"); }
std::string PfmctlPath() { return Runfile("userspace/pfmctl/pfmctl"); }

pid_t StartPfmctl(const std::string& socket, std::vector<std::string> args,
                  const std::function<void()>& in_child) {
  std::vector<std::string> argv = {PfmctlPath(), "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (in_child) in_child();
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  return pid;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = ::mkdtemp(buf.data());
  EXPECT_NE(d, nullptr);
  return d ? d : "";
}

namespace {

// The socket directories this process made, removed at its exit: they are
// outside TEST_TMPDIR, and some hold copies of binaries (a setuid-root one in
// security_host_e2e_test) that must not outlive the test.
struct SocketDirs {
  pid_t owner = 0;
  std::vector<std::string> dirs;
};
SocketDirs& TheSocketDirs() {
  static auto* dirs = new SocketDirs;
  return *dirs;
}

int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  if (type == FTW_DP)
    ::rmdir(path);
  else
    ::unlink(path);
  return 0;  // go on whatever failed: remove what can be removed
}

void RemoveSocketDirs() {
  SocketDirs& s = TheSocketDirs();
  if (::getpid() != s.owner) return;  // a forked child calling exit()
  for (const std::string& d : s.dirs)
    ::nftw(d.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace

std::string MakeSocketDir() {
  // Not under TEST_TMPDIR: sun_path holds only 107 bytes.
  char tmpl[] = "/tmp/pfmtest-XXXXXX";
  char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  if (d == nullptr) return "";
  SocketDirs& s = TheSocketDirs();
  if (s.owner != ::getpid()) {
    s.owner = ::getpid();
    s.dirs.clear();  // a child's copy of its parent's list is not its own
    std::atexit(RemoveSocketDirs);
  }
  s.dirs.push_back(d);
  return d;
}

namespace {

void DrainInto(int fd, std::string* s) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      s->append(buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;
  }
}

}  // namespace

Result Run(const std::vector<std::string>& argv,
           const std::map<std::string, std::string>& env, int timeout_s) {
  Result res;
  int outp[2], errp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0) return res;
  if (::pipe2(errp, O_CLOEXEC) != 0) {
    ::close(outp[0]);
    ::close(outp[1]);
    return res;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    // Never on to waitpid(-1) or kill(-1): as root that is every process.
    res.err = std::string("fork: ") + std::strerror(errno);
    for (int fd : {outp[0], outp[1], errp[0], errp[1]}) ::close(fd);
    return res;
  }
  if (pid == 0) {
    ::dup2(outp[1], 1);
    ::dup2(errp[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(devnull, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(outp[1]);
  ::close(errp[1]);
  // Read both pipes concurrently so neither fills up.
  std::thread t([&] { DrainInto(errp[0], &res.err); });
  std::thread killer;
  bool done = false;
  killer = std::thread([&, pid] {
    for (int i = 0; i < timeout_s * 10 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) ::kill(pid, SIGKILL);
  });
  DrainInto(outp[0], &res.out);
  t.join();
  int status = 0;
  ::waitpid(pid, &status, 0);
  __atomic_store_n(&done, true, __ATOMIC_RELEASE);
  killer.join();
  ::close(outp[0]);
  ::close(errp[0]);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

Result Pfmctl(const std::string& socket, std::vector<std::string> args,
              int timeout_s) {
  std::vector<std::string> argv = {PfmctlPath(), "--socket", socket};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, {}, timeout_s);
}

boost::json::value PfmctlJson(const std::string& socket,
                              std::vector<std::string> args) {
  args.push_back("--json");
  Result r = Pfmctl(socket, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(r.out, ec);
  EXPECT_FALSE(ec) << "not JSON: " << r.out;
  return v;
}

boost::json::object AsUid(uid_t uid, const std::function<boost::json::object()>& fn) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {{"child_failed", "pipe"}};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return {{"child_failed", "fork"}};
  }
  if (pid == 0) {
    ::close(p[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)
      ::_exit(3);
    // setuid() from root made this child non-dumpable, which a user's own
    // processes are not: the kernel would refuse to let the user trace its
    // children (pfmd lets the kernel decide).
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    const std::string out = boost::json::serialize(fn());
    size_t off = 0;
    while (off < out.size()) {
      const ssize_t n = ::write(p[1], out.data() + off, out.size() - off);
      if (n <= 0) ::_exit(4);
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(p[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object())
    return {{"child_failed", absl::StrCat("status ", status, ", output '", text, "'")}};
  return v.as_object();
}

int ConnectRaw(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

Daemon::Daemon(std::vector<std::string> flags, const std::function<void()>& in_child) {
  dir_ = MakeSocketDir();
  socket_ = dir_ + "/pfmd.sock";
  std::vector<std::string> argv = {PfmdPath(), "--socket", socket_};
  argv.insert(argv.end(), flags.begin(), flags.end());
  pid_ = ::fork();
  if (pid_ < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return;
  }
  if (pid_ == 0) {
    if (in_child) in_child();
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    int fd = ConnectRaw(socket_);
    if (fd >= 0) {
      ::close(fd);
      started_ = true;
      return;
    }
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
}

int Daemon::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return 128 + SIGKILL;
}

bool Daemon::OpenToOtherUids() const {
  return !dir_.empty() && ::chmod(dir_.c_str(), 0755) == 0;
}

int Daemon::Kill(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

Daemon::~Daemon() {
  Stop();
  ::unlink((socket_ + ".log").c_str());
  ::unlink(socket_.c_str());
  ::rmdir(dir_.c_str());
}

pid_t ForkPausedAt(pid_t want, int attempts) {
  pid_t got = -1;
  for (int attempt = 0; attempt < attempts && got != want; ++attempt) {
    if (got > 0) {
      ::kill(got, SIGKILL);
      ::waitpid(got, nullptr, 0);
    }
    std::ofstream("/proc/sys/kernel/ns_last_pid") << (want - 1);
    got = ::fork();
    if (got < 0) return -1;
    if (got == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  return got;
}

}  // namespace pfm::testing
