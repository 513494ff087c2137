// End to end, issue "Security first": the findings of the red-team pass,
// each reproduced against a root pfmd with the host driver and asserted
// fixed. The unprivileged side is uid 65534, through `setpriv` (for
// programs: copies of pfmctl and of a probe program in a world-readable
// directory, since the runfiles tree is not readable by that uid) or a
// forked child (AsUid) talking to the socket itself.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "pfm/client.h"
#include "pfm/wire.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Contains;
using testing::AsUid;
using testing::Daemon;
using testing::kNobody;
using testing::Pfmctl;
using testing::PfmctlJson;
using testing::ReadFile;
using testing::Result;

const std::vector<std::string> kAsNobody = {"/usr/bin/setpriv", "--reuid=65534",
                                            "--regid=65534", "--clear-groups",
                                            "--"};

std::vector<std::string> AsNobody(std::vector<std::string> argv) {
  std::vector<std::string> out = kAsNobody;
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool CopyTo(const std::string& from, const std::string& to, mode_t mode) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  out.close();
  return in && out && ::chmod(to.c_str(), mode) == 0;
}

// Processes whose command line is a tracer helper for `tracee`.
std::vector<pid_t> TracerHelpersOf(pid_t tracee) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::string cmd = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find("--pfm-tracer-helper 3 " + std::to_string(tracee) + " ") !=
            std::string::npos ||
        cmd == "pfm-tracer --pfm-tracer-helper 3 " + std::to_string(tracee) + " ")
      out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// A child that computes for about `seconds` and exits 0.
pid_t SpawnWorker(int seconds) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    volatile uint64_t x = 0;
    for (int i = 0; i < seconds * 20; ++i) {
      for (int j = 0; j < 20000; ++j) x += j;
      ::usleep(50000);
    }
    ::_exit(x == UINT64_MAX ? 1 : 0);  // reads x: the work is not dead code
  }
  return pid;
}

// One request on a raw connection, as plain JSON (the child of AsUid sends
// these: pfm::Client would refuse to talk from inside a user namespace).
json::object RawCall(int fd, json::object req) {
  const std::string body = json::serialize(req);
  if (!SendFrame(fd, body, {}).ok()) return {{"send_failed", true}};
  absl::StatusOr<Frame> f = RecvFrame(fd, 5000);
  if (!f.ok()) return {{"recv_failed", std::string(f.status().message())}};
  boost::system::error_code ec;
  json::value v = json::parse(f->body, ec);
  return ec || !v.is_object() ? json::object{{"bad_reply", f->body}} : v.as_object();
}

class SecurityHostE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
    ASSERT_NO_FATAL_FAILURE(StartDaemon({"--driver", "host"}));
    ASSERT_TRUE(d_->OpenToOtherUids());
    dir_ = testing::MakeSocketDir();
    ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
    pfmctl_ = dir_ + "/pfmctl";
    probe_ = dir_ + "/probe";
    setuid_probe_ = dir_ + "/probe-setuid";
    ASSERT_TRUE(CopyTo(testing::PfmctlPath(), pfmctl_, 0755));
    const std::string probe = testing::Runfile("tests/setuid_probe");
    ASSERT_TRUE(CopyTo(probe, probe_, 0755));
    ASSERT_TRUE(CopyTo(probe, setuid_probe_, 0755));
    ASSERT_EQ(::chown(setuid_probe_.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(setuid_probe_.c_str(), 04755), 0);
  }
  void TearDown() override {
    for (pid_t p : children_) {
      if (p <= 0) continue;  // a failed fork: never kill(-1)
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (!dir_.empty()) testing::Run({"rm", "-rf", dir_});
  }
  // pfmctl as uid 65534, on the root daemon.
  Result NobodyPfmctl(std::vector<std::string> args, int timeout_s = 60) {
    std::vector<std::string> argv = {pfmctl_, "--socket", socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(AsNobody(argv), {}, timeout_s);
  }
  // The probe run setuid root by uid 65534 prints euid 0 (else this
  // machine does not honour setuid here and the test says so).
  void RequireSetuidWorks() {
    Result r = testing::Run(AsNobody({setuid_probe_, "euid"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (r.out.find("euid=0 ruid=65534") == std::string::npos)
      GTEST_SKIP() << "setuid does not take effect in " << dir_ << ": " << r.out;
  }
  uint64_t Sessions() {
    return PfmctlJson(socket(), {"status"}).at("sessions").to_number<uint64_t>();
  }

  std::string dir_, pfmctl_, probe_, setuid_probe_;
  std::vector<pid_t> children_;
};

// Finding 3a: a traced program that execs a setuid-root binary must not get
// root while an unprivileged client traces it.
TEST_F(SecurityHostE2e, SetuidExecOfATracedProgramKeepsTheCallersIds) {
  RequireSetuidWorks();
  if (HasFatalFailure() || IsSkipped()) return;
  const std::string trace = dir_ + "/setuid.trace";
  Result r = NobodyPfmctl({"record", "--bts", "lossless", "-o", trace, "--",
                           setuid_probe_, "euid"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("euid=65534 ruid=65534"), std::string::npos)
      << "the traced setuid program ran with other ids: " << r.out;
  EXPECT_EQ(r.out.find("euid=0"), std::string::npos) << r.out;
  // The trace is the client's and holds the program's branches.
  Result rep = NobodyPfmctl({"report", trace});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find(" branch"), std::string::npos) << rep.out;
  EXPECT_EQ(Sessions(), 0u);
}

// The issue's check with passwd. `passwd -S root` refuses uid 65534 whatever
// its euid (passwd checks the real uid), so the check that can fail is the
// user's own status: only with euid 0 can passwd read /etc/shadow for it.
// Untraced, the setuid program shows the shadow fields; traced by uid
// 65534's pfm session it must run without them.
TEST_F(SecurityHostE2e, PasswdTracedAsNobodyDoesNotRunAsRoot) {
  testing::Result control = testing::Run(AsNobody({"/usr/bin/passwd", "-S"}));
  if (control.exit_code != 0 || control.out.rfind("nobody ", 0) != 0)
    GTEST_SKIP() << "passwd -S as uid 65534 does not run setuid here: "
                 << control.out << control.err;
  const std::string trace = dir_ + "/passwd.trace";
  Result r = NobodyPfmctl(
      {"record", "--bts", "lossless", "-o", trace, "--", "/usr/bin/passwd", "-S"}, 280);
  ASSERT_NE(r.err.find("recorded"), std::string::npos) << r.err;
  EXPECT_NE(r.out, control.out)
      << "traced passwd read /etc/shadow, i.e. ran as root: " << r.out;
  // And root's status is refused as for any unprivileged caller.
  EXPECT_EQ(r.out.find("root "), std::string::npos) << r.out;
}

// Finding 3b: the kernel refuses a direct PTRACE_ATTACH to one's own
// non-dumpable process; so does pfmd, with the kernel's reason.
TEST_F(SecurityHostE2e, NonDumpableOwnProcessIsRefusedWithTheKernelsReason) {
  const pid_t nd = ::fork();
  if (nd == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 ||
        ::setuid(kNobody) != 0)
      ::_exit(3);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execl(probe_.c_str(), "probe", "nondumpable", "30", nullptr);
    ::_exit(127);
  }
  children_.push_back(nd);
  const pid_t dumpable = ::fork();
  if (dumpable == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 ||
        ::setuid(kNobody) != 0)
      ::_exit(3);
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  children_.push_back(dumpable);
  // Until the probe has made itself non-dumpable (its /proc files turn to
  // root's).
  for (int i = 0; i < 200; ++i) {
    struct stat st;
    if (::stat(absl::StrCat("/proc/", nd, "/status").c_str(), &st) == 0 &&
        st.st_uid == 0)
      break;
    ::usleep(10000);
  }
  for (std::vector<std::string> extra :
       {std::vector<std::string>{"--bts", "history"},
        std::vector<std::string>{"--counter", "task-clock"}}) {
    std::vector<std::string> args = {"session", "create", "--role", "debugger",
                                     "--pid", std::to_string(nd)};
    args.insert(args.end(), extra.begin(), extra.end());
    Result r = NobodyPfmctl(args);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find("PERMISSION_DENIED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the kernel refuses"), std::string::npos) << r.err;
  }
  // The same user's dumpable process is fine.
  Result ok = NobodyPfmctl({"session", "create", "--pid", std::to_string(dumpable),
                            "--counter", "task-clock"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(Sessions(), 1u);
}

// A detached session keeps its tracer after its process exits (for its
// stats and maps), but that tracer is no process any more: its helper is
// reaped at the next request (no zombie child of pfmd, its socket closed)
// and it does not count against --max-tracers-per-uid. With a cap of 1,
// uid 65534 traces a process that then exits, and traces another one
// while the first session is still there.
TEST_F(SecurityHostE2e, AnExitedProcessesTracerIsReapedAndFreesItsUidsSlot) {
  Daemon d({"--driver", "host", "--max-tracers-per-uid", "1"});
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(d.OpenToOtherUids());
  auto nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {pfmctl_, "--socket", d.socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(AsNobody(argv));
  };
  auto spawn = [&] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0)
        ::_exit(3);
      ::execl("/bin/sleep", "sleep", "30", nullptr);
      ::_exit(127);
    }
    return pid;
  };
  // Until the child runs /bin/sleep as uid 65534 (exec made it dumpable).
  auto wait_exec = [](pid_t pid) {
    for (int i = 0; i < 500; ++i) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n") return true;
      ::usleep(10000);
    }
    return false;
  };
  // pfmd's children in state Z.
  auto zombies = [&] {
    std::vector<pid_t> out;
    DIR* dir = ::opendir("/proc");
    while (const dirent* e = dir != nullptr ? ::readdir(dir) : nullptr) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 &&
          ppid == d.pid() && state == 'Z')
        out.push_back(pid);
    }
    if (dir != nullptr) ::closedir(dir);
    return out;
  };
  const pid_t first = spawn();
  ASSERT_GT(first, 0);
  children_.push_back(first);
  ASSERT_TRUE(wait_exec(first));
  Result a = nobody({"--json", "session", "create", "--role", "profiler", "--pid",
                     std::to_string(first), "--bts", "lossless"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(TracerHelpersOf(first).size(), 1u);
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  // The session sees its process's end, and stays.
  json::value shown;
  for (int i = 0; i < 500; ++i) {
    shown = PfmctlJson(d.socket(), {"session", "list"});
    if (shown.as_array().size() == 1 && shown.as_array()[0].at("state") == "exited") break;
    ::usleep(10000);
  }
  ASSERT_EQ(shown.as_array().size(), 1u) << shown;
  ASSERT_EQ(shown.as_array()[0].at("state"), "exited") << shown;
  // A request later (any request reaps, once pfmd has seen the helper's
  // end), the helper is gone, not a zombie. Without the reaping it stays a
  // zombie until the session is killed, however many requests come.
  bool reaped = false;
  for (int i = 0; i < 500 && !reaped; ++i) {
    PfmctlJson(d.socket(), {"status"});
    reaped = TracerHelpersOf(first).empty() && zombies().empty();
    if (!reaped) ::usleep(10000);
  }
  EXPECT_TRUE(reaped) << "pfmd has unreaped children";
  const pid_t second = spawn();
  ASSERT_GT(second, 0);
  children_.push_back(second);
  ASSERT_TRUE(wait_exec(second));
  Result b = nobody({"--json", "session", "create", "--role", "profiler", "--pid",
                     std::to_string(second), "--bts", "lossless"});
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(PfmctlJson(d.socket(), {"session", "list"}).as_array().size(), 2u);
  // The cap still holds for processes that run: a third is refused.
  const pid_t third = spawn();
  ASSERT_GT(third, 0);
  children_.push_back(third);
  ASSERT_TRUE(wait_exec(third));
  Result c = nobody({"session", "create", "--role", "profiler", "--pid",
                     std::to_string(third), "--bts", "lossless"});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_EQ(c.err, absl::StrCat("pfmctl: RESOURCE_EXHAUSTED: soft BTS on pid ", third,
                                ": uid 65534 has 1 soft-BTS tracer processes (limit 1, "
                                "--max-tracers-per-uid)\n"));
}

// The files a process has open, as (device, inode) of what each fd names,
// but fds 0-2 and anonymous inodes (every epoll, eventfd, pidfd and perf
// event shares one inode: they cannot be told apart this way).
std::set<std::pair<dev_t, ino_t>> OpenFilesOf(pid_t pid) {
  std::set<std::pair<dev_t, ino_t>> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = d != nullptr ? ::readdir(d) : nullptr) {
    const int fd = std::atoi(e->d_name);
    const std::string path = dir + "/" + e->d_name;
    char link[256] = {};
    struct stat st;
    if (fd > 2 && ::readlink(path.c_str(), link, sizeof(link) - 1) > 0 &&
        std::strncmp(link, "anon_inode:", 11) != 0 && ::stat(path.c_str(), &st) == 0)
      out.insert({st.st_dev, st.st_ino});
  }
  if (d != nullptr) ::closedir(d);
  return out;
}

// Makes close_range fail with ENOSYS (as on Linux before 5.9, or under a
// container's seccomp policy) for this process and what it execs.
void FailCloseRange() {
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_close_range, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    ::_exit(125);
}

// The descriptors >= 3 of a process that are not close-on-exec, by number
// (the "flags:" line of /proc/PID/fdinfo/FD, octal).
std::vector<int> InheritableFdsOf(pid_t pid) {
  std::vector<int> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/fdinfo");
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = d != nullptr ? ::readdir(d) : nullptr) {
    const int fd = std::atoi(e->d_name);
    if (fd < 3) continue;
    const std::string info = ReadFile(dir + "/" + e->d_name);
    const size_t at = info.find("flags:");
    if (at != std::string::npos &&
        (std::strtoul(info.c_str() + at + 6, nullptr, 8) & O_CLOEXEC) == 0)
      out.push_back(fd);
  }
  if (d != nullptr) ::closedir(d);
  return out;
}

// A tracer helper runs as the client: none of pfmd's files reaches it. Two
// layers: pfmd opens (or marks) every descriptor close-on-exec, its
// listening socket and client connections too, which Boost.Asio opens
// without SOCK_CLOEXEC; and the helper's child closes everything above its
// channel before the exec (closefrom: close_range, or /proc/self/fd where
// close_range is refused, as on Linux before 5.9 or under a seccomp
// policy). pfmd is given a file it inherits on purpose (not close-on-exec,
// so only the second layer keeps it from the helper), and a client
// connection is open while the helper is forked; both with close_range
// working and refused by a seccomp filter.
TEST_F(SecurityHostE2e, TracerHelpersGetNoneOfPfmdsFiles) {
  const std::string inherited = dir_ + "/inherited";
  ASSERT_TRUE(std::ofstream(inherited).good());
  struct stat ist;
  ASSERT_EQ(::stat(inherited.c_str(), &ist), 0);
  for (const bool filtered : {false, true}) {
    SCOPED_TRACE(filtered ? "close_range fails" : "close_range works");
    Daemon d({"--driver", "host"}, [&] {
      // Not close-on-exec, and above the helper's fd 3 (which the helper's
      // child replaces with its channel anyway).
      const int fd = ::open(inherited.c_str(), O_RDONLY);
      if (fd < 0 || ::dup2(fd, 100) != 100) ::_exit(124);
      ::close(fd);
      if (filtered) FailCloseRange();
    });
    ASSERT_TRUE(d.started());
    const int conn = testing::ConnectRaw(d.socket());
    ASSERT_GE(conn, 0);
    ASSERT_TRUE(SendFrame(conn, "{\"op\":\"ping\"}", {}).ok());
    ASSERT_TRUE(RecvFrame(conn, 5000).ok());  // accepted: pfmd holds it
    const pid_t worker = SpawnWorker(5);
    ASSERT_GT(worker, 0);
    children_.push_back(worker);
    PfmctlJson(d.socket(), {"session", "create", "--role", "profiler", "--pid",
                            std::to_string(worker), "--bts", "lossless"});
    const std::vector<pid_t> helpers = TracerHelpersOf(worker);
    ASSERT_EQ(helpers.size(), 1u);
    const std::set<std::pair<dev_t, ino_t>> pfmd = OpenFilesOf(d.pid());
    const std::set<std::pair<dev_t, ino_t>> helper = OpenFilesOf(helpers[0]);
    ASSERT_EQ(pfmd.count({ist.st_dev, ist.st_ino}), 1u) << "pfmd did not inherit the file";
    EXPECT_GE(pfmd.size(), 4u);  // its socket, the connection, the session's, the file
    EXPECT_FALSE(helper.empty());  // its channel to pfmd (fd 3), at least
    for (const auto& f : helper)
      EXPECT_EQ(pfmd.count(f), 0u) << "the helper has pfmd's inode " << f.second;
    // Every descriptor of pfmd's own is close-on-exec: only the inherited
    // file is not.
    const std::vector<int> open = InheritableFdsOf(d.pid());
    ASSERT_EQ(open.size(), 1u) << "pfmd fds without close-on-exec: " << open.size();
    struct stat fst;
    ASSERT_EQ(::stat(absl::StrCat("/proc/", d.pid(), "/fd/", open[0]).c_str(), &fst), 0);
    EXPECT_EQ(fst.st_ino, ist.st_ino);
    ::close(conn);
  }
}

// Finding 1: root of a user namespace is root of nothing pfmd serves.
TEST_F(SecurityHostE2e, RootOfAUserNamespaceGetsNothingOfRoots) {
  const pid_t target = SpawnWorker(30);
  children_.push_back(target);
  const uint64_t id = PfmctlJson(socket(), {"session", "create", "--pid",
                                            std::to_string(target), "--counter",
                                            "task-clock"})
                          .at("id")
                          .to_number<uint64_t>();
  const std::string socket = d_->socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    // setuid() made this child non-dumpable, which hides its own uid_map.
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (::unshare(CLONE_NEWUSER) != 0) return {{"no_userns", true}};
    auto write = [](const char* path, const char* text) {
      const int fd = ::open(path, O_WRONLY);
      const bool ok = fd >= 0 && ::write(fd, text, std::strlen(text)) > 0;
      if (fd >= 0) ::close(fd);
      return ok;
    };
    write("/proc/self/setgroups", "deny");
    if (!write("/proc/self/uid_map", "0 65534 1") ||
        !write("/proc/self/gid_map", "0 65534 1") || ::getuid() != 0)
      return {{"no_userns", true}};
    const int fd = testing::ConnectRaw(socket);
    if (fd < 0) return {{"connect_failed", true}};
    json::object out{
        {"ping", RawCall(fd, {{"op", "ping"}})},
        {"trace_root",
         RawCall(fd, {{"op", "session_create"},
                      {"spec", {{"pid", target}, {"bts", "history"}, {"detached", false}}}})},
        {"cpu", RawCall(fd, {{"op", "session_create"},
                             {"spec", {{"cpu", 0},
                                       {"counters", json::array{"task-clock"}},
                                       {"detached", false}}}})},
        {"list", RawCall(fd, {{"op", "session_list"}})},
        {"kill", RawCall(fd, {{"op", "session_kill"}, {"id", id}})},
        {"shutdown", RawCall(fd, {{"op", "shutdown"}})}};
    ::close(fd);
    return out;
  });
  if (got.contains("no_userns")) GTEST_SKIP() << "user namespaces are not available";
  ASSERT_FALSE(got.contains("child_failed")) << got;
  EXPECT_EQ(got.at("ping").at("result").at("peer_uid").to_number<uint64_t>(), kNobody)
      << got;
  for (const char* op : {"trace_root", "cpu", "shutdown"}) {
    EXPECT_EQ(got.at(op).at("code"), "PERMISSION_DENIED") << op << ": " << got.at(op);
  }
  EXPECT_EQ(got.at("kill").at("code"), "NOT_FOUND") << got.at("kill");
  EXPECT_TRUE(got.at("list").at("result").as_array().empty()) << got.at("list");
  // Root's session is untouched and the daemon still serves.
  EXPECT_EQ(Sessions(), 1u);
}

// Finding 2: a client that connects, then execs a setuid-root program that
// keeps the socket, is still the uid that connected.
TEST_F(SecurityHostE2e, ConnectThenExecSetuidIsStillTheConnectingUid) {
  RequireSetuidWorks();
  if (HasFatalFailure() || IsSkipped()) return;
  const std::string socket = d_->socket(), probe = setuid_probe_;
  auto via_setuid = [&](const std::string& request) {
    return AsUid(kNobody, [&]() -> json::object {
      const int fd = testing::ConnectRaw(socket);
      if (fd < 0) return {{"connect_failed", true}};
      int out[2];
      if (::pipe(out) != 0) return {{"pipe_failed", true}};
      const pid_t c = ::fork();
      if (c == 0) {
        ::dup2(out[1], 1);
        // The connection survives the exec as fd 3 (dup2 clears CLOEXEC;
        // if it already is 3, clear it by hand).
        if (fd == 3) {
          ::fcntl(3, F_SETFD, 0);
        } else {
          ::dup2(fd, 3);
        }
        ::execl(probe.c_str(), "probe", "request", "3", request.c_str(), nullptr);
        ::_exit(127);
      }
      ::close(out[1]);
      ::close(fd);
      std::string text;
      char buf[4096];
      for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;)
        text.append(buf, static_cast<size_t>(n));
      ::waitpid(c, nullptr, 0);
      return {{"out", text}};
    });
  };
  json::object ping = via_setuid(R"({"op":"ping"})");
  ASSERT_TRUE(ping.contains("out")) << ping;
  const std::string ping_out(ping.at("out").as_string());
  EXPECT_NE(ping_out.find("euid=0"), std::string::npos)
      << "the probe did not run setuid root: " << ping_out;
  EXPECT_NE(ping_out.find("\"peer_uid\":65534"), std::string::npos) << ping_out;
  json::object cpu = via_setuid(
      R"({"op":"session_create","spec":{"cpu":0,"counters":["task-clock"],"detached":false}})");
  const std::string cpu_out(cpu.at("out").as_string());
  EXPECT_NE(cpu_out.find("PERMISSION_DENIED"), std::string::npos) << cpu_out;
  EXPECT_EQ(Sessions(), 0u);
}

// --admin-group: its members are privileged like root.
TEST_F(SecurityHostE2e, AdminGroupMembersSeeEverySession) {
  Daemon admin({"--driver", "host", "--admin-group", "65534"});
  ASSERT_TRUE(admin.started());
  const std::string socket = admin.socket();
  ASSERT_TRUE(admin.OpenToOtherUids());
  const pid_t target = SpawnWorker(30);
  children_.push_back(target);
  PfmctlJson(socket, {"session", "create", "--pid", std::to_string(target),
                      "--counter", "task-clock"});
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) return {{"connect", std::string(c.status().message())}};
    absl::StatusOr<Client::Reply> r = c->Call("session_list", {});
    if (!r.ok()) return {{"list", std::string(r.status().message())}};
    return {{"n", r->result.as_array().size()}};
  });
  ASSERT_TRUE(got.contains("n")) << got;
  EXPECT_EQ(got.at("n").to_number<uint64_t>(), 1u);
}

// A process's end is kept per session (no longer per pid): a new process at
// a recycled pid is not the old one, and does not show its exit.
TEST_F(SecurityHostE2e, RecycledPidDoesNotInheritAnExitedProcessesState) {
  const pid_t old = ::fork();
  if (old == 0) {
    ::usleep(300000);
    ::_exit(7);
  }
  const std::string old_id = absl::StrCat(
      PfmctlJson(socket(), {"session", "create", "--role", "debugger", "--pid",
                            std::to_string(old), "--bts", "history"})
          .at("id")
          .to_number<uint64_t>());
  int st = 0;
  ASSERT_EQ(::waitpid(old, &st, 0), old);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  json::value shown;
  for (int i = 0; i < 200; ++i) {
    shown = PfmctlJson(socket(), {"session", "show", old_id});
    if (shown.as_object().contains("exit_status")) break;
    ::usleep(10000);
  }
  ASSERT_EQ(shown.at("state"), "exited") << shown;
  ASSERT_EQ(shown.at("exit_status").to_number<int64_t>(), 7 << 8) << shown;
  // The same pid again: ns_last_pid makes the next fork take it (retried if
  // some other process forks in between).
  const pid_t reused = testing::ForkPausedAt(old, 20);
  children_.push_back(reused);
  if (reused != old) GTEST_SKIP() << "could not get pid " << old << " again";
  const std::string new_id = absl::StrCat(
      PfmctlJson(socket(), {"session", "create", "--pid", std::to_string(old),
                            "--counter", "task-clock"})
          .at("id")
          .to_number<uint64_t>());
  json::value fresh = PfmctlJson(socket(), {"session", "show", new_id});
  EXPECT_EQ(fresh.at("state"), "running") << fresh;
  EXPECT_FALSE(fresh.as_object().contains("exit_status")) << fresh;
  // The old session still tells the old process's end.
  shown = PfmctlJson(socket(), {"session", "show", old_id});
  EXPECT_EQ(shown.at("state"), "exited") << shown;
  EXPECT_EQ(shown.at("exit_status").to_number<int64_t>(), 7 << 8) << shown;
}

// On the host too, every byte charged is a byte held: the core's rings and
// the traced task's own DS buffers (written by its tracer through the
// core), plus the tracer process and the sessions' bookkeeping; and the
// sessions' charges add up to the uid totals.
TEST_F(SecurityHostE2e, ChargesEqualWhatTheDaemonHolds) {
  const pid_t worker = SpawnWorker(5);
  children_.push_back(worker);
  const std::string pid = std::to_string(worker);
  PfmctlJson(socket(), {"session", "create", "--role", "profiler", "--pid", pid, "--bts",
                        "lossless", "--counter", "task-clock"});
  PfmctlJson(socket(), {"session", "create", "--role", "debugger", "--pid", pid, "--bts",
                        "history", "--buffer", "2KiB"});
  auto check = [&] {
    json::value st = PfmctlJson(socket(), {"status"});
    const json::object& m = st.at("memory").as_object();
    uint64_t by_uid = 0;
    for (const json::value& c : m.at("charged").as_array())
      by_uid += c.at("bytes").to_number<uint64_t>();
    uint64_t by_session = 0;
    const json::value list = PfmctlJson(socket(), {"session", "list"});
    for (const json::value& s : list.as_array())
      by_session += s.at("charged_bytes").to_number<uint64_t>();
    EXPECT_EQ(by_uid, m.at("allocated").to_number<uint64_t>()) << st;
    EXPECT_EQ(by_session, m.at("allocated").to_number<uint64_t>()) << st;
    EXPECT_EQ(m.at("allocated").to_number<uint64_t>(), m.at("held").to_number<uint64_t>())
        << st;
    return m.at("allocated").to_number<uint64_t>();
  };
  EXPECT_GT(check(), 4u << 20) << "the tracer process is charged";
  // While it traces (the branches go through the task's own buffer).
  ::usleep(300000);
  check();
  const json::value list = PfmctlJson(socket(), {"session", "list"});
  for (const json::value& s : list.as_array())
    Pfmctl(socket(), {"session", "kill", std::to_string(s.at("id").to_number<uint64_t>())});
  EXPECT_EQ(check(), 0u);
}

// Finding 4: whatever pfmd dies of, a traced process runs on untraced.
TEST_F(SecurityHostE2e, SigkillOfPfmdLeavesTheTraceeRunning) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    Daemon d({"--driver", "host"});
    ASSERT_TRUE(d.started());
    const pid_t worker = SpawnWorker(2);
    const std::string id = absl::StrCat(
        PfmctlJson(d.socket(), {"session", "create", "--role", "profiler", "--pid",
                                std::to_string(worker), "--bts", "lossless"})
            .at("id")
            .to_number<uint64_t>());
    // Mid-trace: the tracer has stepped.
    uint64_t steps = 0;
    for (int i = 0; i < 200 && steps == 0; ++i) {
      json::value s = PfmctlJson(d.socket(), {"session", "show", id});
      if (const json::value* sb = s.as_object().if_contains("soft_bts"))
        steps = sb->at("steps").to_number<uint64_t>() +
                sb->at("int3_stops").to_number<uint64_t>();
      if (steps == 0) ::usleep(10000);
    }
    ASSERT_GT(steps, 0u);
    ASSERT_EQ(TracerHelpersOf(worker).size(), 1u);
    const int killed = d.Kill(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL);
    int st = 0;
    ASSERT_EQ(::waitpid(worker, &st, 0), worker);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "the tracee died: status " << st
        << (WIFSIGNALED(st) ? absl::StrCat(" (signal ", WTERMSIG(st), ")") : "");
    // The tracer process left by itself.
    std::vector<pid_t> left = TracerHelpersOf(worker);
    for (int i = 0; i < 500 && !left.empty(); ++i) {
      ::usleep(10000);
      left = TracerHelpersOf(worker);
    }
    EXPECT_TRUE(left.empty()) << "a tracer helper outlived its daemon";
  }
}

// A tracer helper killed outright cannot give the tasks it ran on its CPU
// their affinity back (SoftBtsOptions::bind_cpu), but it told pfmd what
// each one's is (kBound), and pfmd gives it back when the helper's channel
// ends. Before, the program stayed on one CPU for good.
TEST_F(SecurityHostE2e, ASigkilledTracerHelpersTaskGetsItsCpusBack) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "one CPU: nothing is bound";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", "30", nullptr);
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  children_.push_back(pid);
  for (int i = 0; i < 500 && ReadFile(absl::StrCat("/proc/", pid, "/comm")) != "sleep\n"; ++i)
    ::usleep(10000);
  auto cpus = [pid] {
    cpu_set_t s;
    CPU_ZERO(&s);
    EXPECT_EQ(::sched_getaffinity(pid, sizeof(s), &s), 0);
    return s;
  };
  PfmctlJson(socket(), {"session", "create", "--role", "profiler", "--pid", std::to_string(pid),
                        "--bts", "lossless"});
  cpu_set_t now = cpus();
  for (int i = 0; i < 500 && CPU_COUNT(&now) != 1; ++i) {
    ::usleep(10000);
    now = cpus();
  }
  ASSERT_EQ(CPU_COUNT(&now), 1) << "never bound";
  const std::vector<pid_t> helpers = TracerHelpersOf(pid);
  ASSERT_EQ(helpers.size(), 1u);
  ASSERT_EQ(::kill(helpers[0], SIGKILL), 0);
  for (int i = 0; i < 500 && !CPU_EQUAL(&now, &mine); ++i) {
    ::usleep(10000);
    now = cpus();
  }
  EXPECT_TRUE(CPU_EQUAL(&now, &mine)) << "still on " << CPU_COUNT(&now) << " CPU(s)";
  EXPECT_EQ(::kill(pid, 0), 0) << "the tracee is gone";
}

// pfmctl gdbserver is a session like any other: uid 65534 cannot attach
// to root's process (the refusal names the reason, nothing is left in
// pfmd, the process is not traced), while a program it launches itself is
// its to debug.
TEST_F(SecurityHostE2e, GdbserverOnlyForTheCallersOwnProcesses) {
  const pid_t worker = SpawnWorker(30);
  children_.push_back(worker);
  const std::string in = dir_ + "/rsp.in";
  std::ofstream(in) << "$?#3f$D#44";
  ASSERT_EQ(::chmod(in.c_str(), 0644), 0);
  const Result r = testing::Run(
      AsNobody({"/bin/sh", "-c",
                pfmctl_ + " --socket " + socket() + " gdbserver --pid " +
                    std::to_string(worker) + " < " + in}),
      {}, 60);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Contains(r.err, "PERMISSION_DENIED: uid 65534 may not trace pid " +
                                  std::to_string(worker)))
      << r.err;
  EXPECT_FALSE(Contains(r.out, "$T05")) << r.out;  // no stop of root's process
  EXPECT_EQ(Sessions(), 0u);
  EXPECT_TRUE(TracerHelpersOf(worker).empty());
  EXPECT_EQ(::kill(worker, 0), 0);

  // Its own launched program: stopped at exec, then killed (vKill).
  const std::string own = dir_ + "/rsp-own.in";
  std::ofstream(own) << "$?#3f$vKill;1#6e";
  ASSERT_EQ(::chmod(own.c_str(), 0644), 0);
  const Result mine = testing::Run(
      AsNobody({"/bin/sh", "-c",
                pfmctl_ + " --socket " + socket() + " gdbserver -- " + probe_ + " euid < " +
                    own}),
      {}, 60);
  EXPECT_TRUE(Contains(mine.out, "$T05thread:")) << mine.out << mine.err;
  EXPECT_EQ(Sessions(), 0u);
}

}  // namespace
}  // namespace pfm
