// End to end, "Security first" (client side): what pfmctl and libpfm-bts
// check before they talk to a daemon (docs/client_security.md), and
// `session list` paging past the 1 MiB frame limit.
//
// The unprivileged side is the real pfmctl run as uid 65534. The runfiles
// tree is not readable by that uid, so the binary is copied to a 0755
// directory under /tmp first and the copy is exec'd after the child drops
// its groups, gid and uid, with an environment chosen here (no
// XDG_RUNTIME_DIR, no PFMD_SOCKET). Fake daemons count every connection and
// byte they receive, so "nothing was sent" is asserted, not assumed.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pfm/client.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using testing::AsUid;
using testing::Contains;
using testing::Daemon;
using testing::kNobody;
using testing::ReadAll;
using testing::StartsWith;

constexpr uid_t kOther = 65533;
// The private directory pfmctl uses for uid 65534 without XDG_RUNTIME_DIR.
const char kNobodyDir[] = "/tmp/pfmd-65534";

// Runs `argv` as `uid` (no supplementary groups, gid = uid) with exactly the
// environment `env`, cwd "/", and collects its output; killed after
// timeout_s.
testing::Result RunAs(uid_t uid, const std::vector<std::string>& argv,
                      const std::vector<std::string>& env, int timeout_s = 30) {
  testing::Result res;
  int outp[2], errp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0 || ::pipe2(errp, O_CLOEXEC) != 0) return res;
  const pid_t pid = ::fork();
  if (pid < 0) return res;  // never kill(-1) below
  if (pid == 0) {
    ::dup2(outp[1], 1);
    ::dup2(errp[1], 2);
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::dup2(devnull, 0);
    if (::chdir("/") != 0 || ::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 ||
        ::setuid(uid) != 0)
      ::_exit(126);
    std::vector<char*> args, envp;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(outp[1]);
  ::close(errp[1]);
  std::thread err_reader([&] { res.err = ReadAll(errp[0]); });
  bool done = false;
  std::thread killer([&, pid] {
    for (int i = 0; i < timeout_s * 10 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) ::kill(pid, SIGKILL);
  });
  res.out = ReadAll(outp[0]);
  err_reader.join();
  int status = 0;
  ::waitpid(pid, &status, 0);
  __atomic_store_n(&done, true, __ATOMIC_RELEASE);
  killer.join();
  ::close(outp[0]);
  ::close(errp[0]);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

// A listening Unix socket that is not pfmd: a forked child (optionally
// dropped to another uid before it creates the socket, so SO_PEERCRED names
// that uid) that accepts everything, never answers, hangs up on a client
// after 300 ms of silence, and on Stop reports how many connections and
// bytes it saw.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& path, uid_t uid) : path_(path) {
    int ready[2], stop[2], report[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(stop, O_CLOEXEC) != 0 ||
        ::pipe2(report, O_CLOEXEC) != 0)
      return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(stop[1]);
      ::close(report[0]);
      Serve(uid, ready[1], stop[0], report[1]);  // never returns
    }
    ::close(ready[1]);
    ::close(stop[0]);
    ::close(report[1]);
    stop_ = stop[1];
    report_ = report[0];
    char c = 0;
    listening_ = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
  }
  ~FakeDaemon() { Stop(); }
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  bool listening() const { return listening_; }

  // Ends the child; returns {connections, bytes received}.
  std::pair<uint64_t, uint64_t> Stop() {
    if (pid_ <= 0) return counts_;
    ::close(stop_);
    const std::string text = ReadAll(report_);
    ::close(report_);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    std::vector<std::string> parts = absl::StrSplit(text, ' ');
    if (parts.size() == 2) counts_ = {std::stoull(parts[0]), std::stoull(parts[1])};
    else counts_ = {~0ull, ~0ull};  // the child failed: fail the assertions
    return counts_;
  }

 private:
  [[noreturn]] void Serve(uid_t uid, int ready, int stop, int report) {
    if (uid != 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0))
      ::_exit(3);
    const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    ::unlink(path_.c_str());
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::chmod(path_.c_str(), 0777) != 0 || ::listen(lfd, 16) != 0)
      ::_exit(4);
    (void)!::write(ready, "R", 1);
    uint64_t connections = 0, bytes = 0;
    struct Conn {
      int fd;
      std::chrono::steady_clock::time_point last;
    };
    std::vector<Conn> conns;
    for (;;) {
      std::vector<pollfd> p = {{stop, POLLIN, 0}, {lfd, POLLIN, 0}};
      for (const Conn& c : conns) p.push_back({c.fd, POLLIN, 0});
      ::poll(p.data(), p.size(), 50);
      // On stop, one last pass over everything still queued, so a late
      // connection or byte is counted rather than missed.
      const bool stopping = p[0].revents != 0;
      const auto now = std::chrono::steady_clock::now();
      std::vector<Conn> keep;
      for (size_t i = 0; i < conns.size(); ++i) {
        Conn c = conns[i];
        bool open = true;
        if (p[i + 2].revents != 0 || stopping) {
          char buf[4096];
          const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
          if (n > 0) {
            bytes += static_cast<uint64_t>(n);
            c.last = now;
          } else if (n == 0 || errno != EAGAIN) {
            open = false;
          }
        }
        if (open && now - c.last > std::chrono::milliseconds(300)) open = false;
        if (open) keep.push_back(c);
        else ::close(c.fd);
      }
      conns = std::move(keep);
      for (int fd; (fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) {
        ++connections;
        conns.push_back({fd, now});
        char buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) bytes += static_cast<uint64_t>(n);
      }
      if (stopping) break;
    }
    const std::string out = absl::StrCat(connections, " ", bytes);
    (void)!::write(report, out.data(), out.size());
    ::unlink(path_.c_str());
    ::_exit(0);
  }

  std::string path_;
  pid_t pid_ = -1;
  int stop_ = -1;
  int report_ = -1;
  bool listening_ = false;
  std::pair<uint64_t, uint64_t> counts_{0, 0};
};

// The pid of whatever listens on `path` (SO_PEERCRED), or -1.
pid_t ListenerPid(const std::string& path) {
  const int fd = testing::ConnectRaw(path);
  if (fd < 0) return -1;
  ucred cred{};
  socklen_t len = sizeof(cred);
  const int rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
  ::close(fd);
  return rc == 0 ? cred.pid : -1;
}

class ClientSecurityE2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    // /tmp/pfmd-65534 is one machine-wide name: two runs of this test at
    // once (--runs_per_test, two users) would move each other's fixtures.
    lock_fd_ = ::open("/tmp/pfm-client-security-e2e.lock",
                      O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    ASSERT_GE(lock_fd_, 0) << strerror(errno);
    ASSERT_EQ(::flock(lock_fd_, LOCK_EX), 0) << strerror(errno);
    // A copy of pfmctl that uid 65534 can execute.
    char tmpl[] = "/tmp/pfmctl-bin-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    bin_dir_ = tmpl;
    ASSERT_EQ(::chmod(bin_dir_.c_str(), 0755), 0);
    const std::string copy = bin_dir_ + "/pfmctl";
    std::error_code ec;
    fs::copy_file(testing::PfmctlPath(), copy, ec);
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_EQ(::chmod(copy.c_str(), 0755), 0);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!bin_dir_.empty()) fs::remove_all(bin_dir_, ec);
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
    lock_fd_ = -1;
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: pfmctl runs as uid 65534";
    // Whatever already sits at /tmp/pfmd-65534 is someone's: set it aside
    // for the test and put it back afterwards.
    struct stat st;
    if (::lstat(kNobodyDir, &st) == 0) {
      aside_ = absl::StrCat(kNobodyDir, ".aside-", ::getpid());
      ASSERT_EQ(::rename(kNobodyDir, aside_.c_str()), 0) << strerror(errno);
    }
  }
  void TearDown() override {
    if (::geteuid() != 0) return;
    // An embedded daemon the test started and did not stop is ours to end.
    const pid_t left = ListenerPid(absl::StrCat(kNobodyDir, "/pfmd.sock"));
    if (left > 0) ::kill(left, SIGKILL);
    std::error_code ec;
    fs::remove_all(kNobodyDir, ec);
    fs::remove_all(link_target_, ec);
    if (!aside_.empty()) {
      EXPECT_EQ(::rename(aside_.c_str(), kNobodyDir), 0);
    }
  }

  // pfmctl as uid 65534 with no XDG_RUNTIME_DIR and no PFMD_SOCKET.
  static testing::Result PfmctlAsNobody(std::vector<std::string> args,
                                        const std::vector<std::string>& more_env = {}) {
    args.insert(args.begin(), bin_dir_ + "/pfmctl");
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/nonexistent"};
    env.insert(env.end(), more_env.begin(), more_env.end());
    return RunAs(kNobody, args, env);
  }
  // Whether `path` is gone within 2 s (a daemon told to shut down).
  static bool GoneSoon(const std::string& path) {
    for (int i = 0; i < 100 && ::access(path.c_str(), F_OK) == 0; ++i) ::usleep(20000);
    return ::access(path.c_str(), F_OK) != 0;
  }

  static std::string bin_dir_;
  static int lock_fd_;
  std::string aside_;
  // Where a test may point a symbolic link /tmp/pfmd-65534.
  const std::string link_target_ = absl::StrCat(kNobodyDir, ".link-target-", ::getpid());
};

std::string ClientSecurityE2e::bin_dir_;
int ClientSecurityE2e::lock_fd_ = -1;

// pfmctl must judge /tmp/pfmd-65534 before it connects to anything in it:
// a root-owned directory, one open to others, and a symbolic link (even to
// a private directory of the right owner) are each refused, the fake
// daemon listening inside is never connected to, and no embedded pfmd is
// started there.
TEST_F(ClientSecurityE2e, ForeignPrivateDirectoryIsRefusedBeforeAnyConnection) {
  struct Setup {
    const char* what;
    std::string expect;  // in the message: what pfmctl found
  };
  const std::string target = link_target_;
  for (const Setup& setup : {Setup{"root-owned", "a directory owned by uid 0, mode 0755"},
                             Setup{"open", "a directory owned by uid 65534, mode 0777"},
                             Setup{"symlink", "a symbolic link owned by uid 0"}}) {
    SCOPED_TRACE(setup.what);
    std::string listen_dir = kNobodyDir;
    const std::string what = setup.what;
    if (what == "root-owned") {
      ASSERT_EQ(::mkdir(kNobodyDir, 0755), 0);
      ASSERT_EQ(::chmod(kNobodyDir, 0755), 0);
    } else if (what == "open") {
      ASSERT_EQ(::mkdir(kNobodyDir, 0777), 0);
      ASSERT_EQ(::chmod(kNobodyDir, 0777), 0);
      ASSERT_EQ(::chown(kNobodyDir, kNobody, kNobody), 0);
    } else {
      ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
      ASSERT_EQ(::chown(target.c_str(), kNobody, kNobody), 0);
      ASSERT_EQ(::symlink(target.c_str(), kNobodyDir), 0);
      listen_dir = target;
    }
    // The fake runs as root: SO_PEERCRED would trust it, so only the
    // directory check stands between pfmctl and it.
    FakeDaemon fake(listen_dir + "/pfmd.sock", 0);
    ASSERT_TRUE(fake.listening());

    testing::Result r = PfmctlAsNobody({"status"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(StartsWith(r.err, absl::StrCat("pfmctl: PERMISSION_DENIED: ", kNobodyDir,
                                               " must be a directory owned by uid 65534")))
        << r.err;
    EXPECT_TRUE(Contains(r.err, setup.expect)) << r.err;
    EXPECT_EQ(r.out, "");
    // `session list` takes the same path; `shutdown` too.
    testing::Result list = PfmctlAsNobody({"session", "list"});
    EXPECT_TRUE(StartsWith(list.err, "pfmctl: PERMISSION_DENIED: ")) << list.err;
    testing::Result shutdown = PfmctlAsNobody({"shutdown"});
    EXPECT_TRUE(StartsWith(shutdown.err, "pfmctl: PERMISSION_DENIED: ")) << shutdown.err;

    const auto [connections, bytes] = fake.Stop();
    EXPECT_EQ(connections, 0u) << "pfmctl connected before checking the directory";
    EXPECT_EQ(bytes, 0u);
    // No embedded pfmd was started there (it would have left its log).
    EXPECT_NE(::access((listen_dir + "/pfmd.sock.log").c_str(), F_OK), 0);

    std::error_code ec;
    fs::remove_all(kNobodyDir, ec);
    fs::remove_all(target, ec);
  }
}

// The socket file inside a good private directory is checked too: a socket
// owned by another uid is refused before connecting.
TEST_F(ClientSecurityE2e, ForeignSocketInPrivateDirectoryIsRefused) {
  ASSERT_EQ(::mkdir(kNobodyDir, 0700), 0);
  ASSERT_EQ(::chown(kNobodyDir, kNobody, kNobody), 0);
  FakeDaemon fake(absl::StrCat(kNobodyDir, "/pfmd.sock"), 0);  // root's socket
  ASSERT_TRUE(fake.listening());
  testing::Result r = PfmctlAsNobody({"status"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(StartsWith(r.err, absl::StrCat("pfmctl: PERMISSION_DENIED: ", kNobodyDir,
                                             "/pfmd.sock must be a socket owned by uid "
                                             "65534, but it is a socket owned by uid 0")))
      << r.err;
  const auto [connections, bytes] = fake.Stop();
  EXPECT_EQ(connections, 0u);
  EXPECT_EQ(bytes, 0u);
}

// A daemon that is neither the caller nor root is refused right after
// connect(), before a byte is sent: for `status`, for `shutdown`, and for
// the library's Client::Connect itself.
TEST_F(ClientSecurityE2e, ServerOfAnotherUidIsRefusedBeforeAnyByte) {
  const std::string dir = testing::MakeSocketDir();
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  const std::string path = dir + "/fake.sock";
  FakeDaemon fake(path, kOther);
  ASSERT_TRUE(fake.listening());
  const std::string refusal =
      absl::StrCat("pfmctl: PERMISSION_DENIED: pfmd on ", path,
                   " runs as uid 65533, neither you (uid 65534) nor root: refusing to "
                   "talk to it\n");
  for (const char* cmd : {"status", "shutdown"}) {
    SCOPED_TRACE(cmd);
    testing::Result r = PfmctlAsNobody({"--socket", path, cmd});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, refusal);
    EXPECT_EQ(r.out, "");
  }
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(path);
    if (c.ok()) return {{"connected", true}};
    return {{"code", StatusCodeName(c.status().code())},
            {"message", std::string(c.status().message())}};
  });
  const json::value* code = got.if_contains("code");
  EXPECT_TRUE(code != nullptr && code->is_string() && code->as_string() == "PERMISSION_DENIED")
      << got;

  const auto [connections, bytes] = fake.Stop();
  EXPECT_EQ(connections, 3u) << "each client reached the fake, and left";
  EXPECT_EQ(bytes, 0u) << "a client sent bytes to a daemon it does not trust";
  ::rmdir(dir.c_str());
}

// The normal path: nothing at /tmp/pfmd-65534, so pfmctl creates it 0700,
// starts its embedded daemon there as uid 65534, finds it again on the
// next call (the existing socket passes the check), and `shutdown` stops it.
TEST_F(ClientSecurityE2e, EmbeddedDaemonStartsInAFreshPrivateDirectory) {
  testing::Result r = PfmctlAsNobody({"--driver", "sim", "--json", "status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  boost::system::error_code jec;
  json::value v = json::parse(r.out, jec);
  ASSERT_FALSE(jec) << r.out;
  EXPECT_EQ(v.at("driver").as_string(), "sim");

  struct stat st;
  ASSERT_EQ(::lstat(kNobodyDir, &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  const std::string sock = absl::StrCat(kNobodyDir, "/pfmd.sock");
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, kNobody);

  r = PfmctlAsNobody({"--json", "status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("driver").as_string(), "sim");

  // In `ps` it is the daemon, not the pfmctl command that started it.
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock.c_str());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ucred cred{};
    socklen_t len = sizeof(cred);
    ASSERT_EQ(::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len), 0);
    ::close(fd);
    const std::string proc = absl::StrCat("/proc/", cred.pid);
    EXPECT_EQ(testing::ReadFile(proc + "/comm"), "pfmd (embedded)\n");
    std::string cmdline = testing::ReadFile(proc + "/cmdline");
    while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
    EXPECT_EQ(cmdline, "pfmd (embedded) --socket " + sock);
  }

  r = PfmctlAsNobody({"shutdown"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(GoneSoon(sock)) << "the embedded pfmd did not stop";
}

// A $XDG_RUNTIME_DIR that pfmd's socket rule refuses (userspace/pfmd/
// socket_dir.h: here another uid's directory open to all; under `sudo -E`
// root gets a user's) is passed over: pfmctl creates nothing in it and
// starts its embedded daemon in /tmp/pfmd-65534. Before, it made
// $XDG_RUNTIME_DIR/pfmd there and the embedded pfmd refused to start.
TEST_F(ClientSecurityE2e, XdgRuntimeDirThatPfmdWouldRefuseIsPassedOver) {
  const std::string xdg = testing::MakeSocketDir();
  ASSERT_EQ(::chown(xdg.c_str(), kOther, kOther), 0);
  ASSERT_EQ(::chmod(xdg.c_str(), 0777), 0);
  const std::vector<std::string> xdg_env = {"XDG_RUNTIME_DIR=" + xdg};
  testing::Result r = PfmctlAsNobody({"--driver", "sim", "--json", "status"}, xdg_env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  boost::system::error_code jec;
  json::value v = json::parse(r.out, jec);
  ASSERT_FALSE(jec) << r.out;
  EXPECT_EQ(v.at("driver").as_string(), "sim");
  struct stat st;
  EXPECT_NE(::lstat((xdg + "/pfmd").c_str(), &st), 0) << "pfmctl used " << xdg;
  const std::string sock = absl::StrCat(kNobodyDir, "/pfmd.sock");
  ASSERT_EQ(::lstat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  r = PfmctlAsNobody({"shutdown"}, xdg_env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(GoneSoon(sock)) << "the embedded pfmd did not stop";
  std::error_code ec;
  fs::remove_all(xdg, ec);
}

// More sessions than one session_list page (1000): pfmctl pages with
// "after" and returns every session once, in id order, in --json and in
// the table.
TEST_F(ClientSecurityE2e, SessionListPagesPastOneThousandSessions) {
  Daemon d({"--driver", "sim", "--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "4",
            "--sim-paused", "--max-sessions-per-uid", "5000"});
  ASSERT_TRUE(d.started());
  constexpr int kSessions = 1200;
  absl::StatusOr<Client> c = Client::Connect(d.socket());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> created;
  for (int i = 0; i < kSessions; ++i) {
    json::object spec{{"pid", 1000 + i % 4},
                      {"counters", json::array{json::value("branch-instructions")}},
                      {"detached", false}};
    absl::StatusOr<Client::Reply> r = c->Call("session_create", {{"spec", spec}});
    ASSERT_TRUE(r.ok()) << "session " << i << ": " << r.status();
    created.push_back(r->result.at("id").to_number<uint64_t>());
  }
  // The daemon really pages: one request holds at most 1000.
  absl::StatusOr<Client::Reply> page = c->Call("session_list", {{"limit", 1000}});
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->result.as_array().size(), 1000u)
      << "pfmd ignores \"limit\": this test would not exercise paging";

  testing::Result r = testing::Pfmctl(d.socket(), {"session", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  boost::system::error_code jec;
  json::value v = json::parse(r.out, jec);
  ASSERT_FALSE(jec) << r.out.substr(0, 200);
  std::vector<uint64_t> listed;
  for (const json::value& s : v.as_array()) listed.push_back(s.at("id").to_number<uint64_t>());
  EXPECT_EQ(listed.size(), created.size());
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));
  EXPECT_EQ(std::set<uint64_t>(listed.begin(), listed.end()).size(), listed.size())
      << "a session listed twice";
  std::vector<uint64_t> want = created;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listed, want);

  r = testing::Pfmctl(d.socket(), {"session", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), created.size() + 1);  // the header, then one per session
  EXPECT_TRUE(StartsWith(lines[0], "ID ")) << lines[0];
  EXPECT_TRUE(StartsWith(lines[1], std::to_string(want.front()) + " ")) << lines[1];
  EXPECT_TRUE(StartsWith(lines.back(), std::to_string(want.back()) + " ")) << lines.back();
}

}  // namespace
}  // namespace pfm
