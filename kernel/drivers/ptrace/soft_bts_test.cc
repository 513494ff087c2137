// Soft BTS on real processes. Needs ptrace (root or same uid); the
// permission test also needs root to drop to uid 65534.
#include "kernel/drivers/ptrace/soft_bts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

std::string TestProgram(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  std::string base = srcdir != nullptr ? srcdir : ".";
  return base + "/" + (ws != nullptr ? ws : "pfm") + "/kernel/drivers/ptrace/" +
         name;
}

std::string TmpPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

uint64_t ReadHexFile(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  in >> s;
  return s.empty() ? 0 : std::strtoull(s.c_str(), nullptr, 16);
}

int CountDir(const char* path) {
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// Collects everything the tracer reports, in order.
class RecordingSink : public SoftBtsSink {
 public:
  void Drain(DsArea& area, TaskId task, int cpu, uint64_t now_ns) override {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < area.bts_count(); ++i)
      records_.push_back(area.bts_records()[i]);
    area.ResetBts();
    ++drains_;
  }
  bool Held(TaskId) override { return false; }
  void Switch(int cpu, uint64_t, TaskId prev, TaskId next, bool) override {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(next.pid != 0 ? "switch_in" : "switch_out");
  }
  void Exited(TaskId task, uint64_t, int64_t status) override {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back("exited");
    status_ = status;
    exited_ = true;
    cv_.notify_all();
  }
  void Signaled(TaskId, uint64_t, int signo) override {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back("signaled:" + std::to_string(signo));
    records_at_signal_ = records_.size();
  }

  int64_t WaitExit() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return exited_; });
    return status_;
  }
  std::vector<pfm_bts_raw> records() {
    std::lock_guard<std::mutex> lk(mu_);
    return records_;
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lk(mu_);
    return events_;
  }
  int drains() {
    std::lock_guard<std::mutex> lk(mu_);
    return drains_;
  }
  size_t records_at_signal() {
    std::lock_guard<std::mutex> lk(mu_);
    return records_at_signal_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<pfm_bts_raw> records_;
  std::vector<std::string> events_;
  size_t records_at_signal_ = 0;
  int drains_ = 0;
  bool exited_ = false;
  int64_t status_ = 0;
};

const TraceeMapping* FindMap(const std::vector<TraceeMapping>& maps, uint64_t addr) {
  for (const TraceeMapping& m : maps)
    if (addr >= m.start && addr < m.end) return &m;
  return nullptr;
}

TEST(ParseExecutableMaps, KeepsExecutableMappingsWithPaths) {
  const std::string text =
      "00400000-00401000 r--p 00000000 08:01 123 /bin/prog\n"
      "00401000-00402000 r-xp 00001000 08:01 123 /bin/prog with space\n"
      "7ffd0000-7ffd2000 r-xp 00000000 00:00 0                  [vdso]\n"
      "7ffe0000-7ffe1000 r-xp 00000000 00:00 0\n"
      "garbage line\n";
  const std::vector<TraceeMapping> m = ParseExecutableMaps(text);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].start, 0x401000u);
  EXPECT_EQ(m[0].end, 0x402000u);
  EXPECT_EQ(m[0].offset, 0x1000u);
  EXPECT_EQ(m[0].path, "/bin/prog with space");
  EXPECT_EQ(m[1].path, "[vdso]");
  EXPECT_EQ(m[2].path, "");
}

TEST(SoftBts, TracesBinTrueFromBeforeExecThroughLdSoAndLibc) {
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({"/bin/true"}, &pid, &d), 0) << d.message;
  RecordingSink sink;
  std::unique_ptr<SoftBtsTracer> t;
  ASSERT_EQ(SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &t, &d), 0)
      << d.message;
  ASSERT_EQ(Release(pid, &d), 0) << d.message;
  const int64_t status = sink.WaitExit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  t->Stop();
  EXPECT_TRUE(t->done());

  const std::vector<pfm_bts_raw> recs = sink.records();
  const SoftBtsTracer::Stats st = t->stats();
  EXPECT_GE(recs.size(), 1000u);
  EXPECT_EQ(st.branches, recs.size());
  EXPECT_GT(st.steps, st.branches);
  std::printf("bin/true: %llu steps, %llu branches, singleblock honoured: %d\n",
              (unsigned long long)st.steps, (unsigned long long)st.branches,
              st.singleblock_honoured);

  const std::vector<TraceeMapping> maps = t->maps();
  size_t in_ld = 0, in_libc = 0;
  for (const pfm_bts_raw& r : recs) {
    const TraceeMapping* m = FindMap(maps, r.from);
    if (m == nullptr) continue;
    if (m->path.find("/ld-linux") != std::string::npos) ++in_ld;
    if (m->path.find("/libc.so") != std::string::npos) ++in_libc;
  }
  EXPECT_GT(in_ld, 100u);
  EXPECT_GT(in_libc, 10u);
}

TEST(SoftBts, CountsEveryBackwardBranchOfAKnownLoop) {
  constexpr long kIterations = 2000;
  const std::string out = TmpPath("loop_addr");
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({TestProgram("testdata_loop_bin"),
                          std::to_string(kIterations), out},
                         &pid, &d),
            0)
      << d.message;
  RecordingSink sink;
  std::unique_ptr<SoftBtsTracer> t;
  SoftBtsOptions opt;
  opt.ds_records = 64;  // many threshold drains: none may lose a record
  opt.decode_cache_entries = 64;  // and a cache that must evict
  ASSERT_EQ(SoftBtsTracer::Start(pid, opt, &sink, &t, &d), 0) << d.message;
  ASSERT_EQ(Release(pid, &d), 0);
  const int64_t status = sink.WaitExit();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_GT(sink.drains(), static_cast<int>(kIterations / 64));
  EXPECT_EQ(sink.records().size(), t->stats().branches);
  const uint64_t spin = ReadHexFile(out);
  ASSERT_NE(spin, 0u);
  size_t backward = 0;
  for (const pfm_bts_raw& r : sink.records()) {
    if (r.from >= spin && r.from < spin + 0x80 && r.to >= spin && r.to < r.from)
      ++backward;
  }
  EXPECT_GE(backward, static_cast<size_t>(kIterations));
  EXPECT_LE(backward, static_cast<size_t>(kIterations) + 1);
}

TEST(SoftBts, CrashIsSignaledBeforeExitWithLastBranchIntoCrashingFunction) {
  const std::string out = TmpPath("crash_addr");
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({TestProgram("testdata_crash_bin"), out}, &pid, &d), 0);
  RecordingSink sink;
  std::unique_ptr<SoftBtsTracer> t;
  ASSERT_EQ(SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &t, &d), 0)
      << d.message;
  ASSERT_EQ(Release(pid, &d), 0);
  const int64_t status = sink.WaitExit();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) << status;

  const std::vector<std::string> ev = sink.events();
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0], "switch_in");
  EXPECT_EQ(ev[ev.size() - 2], "signaled:" + std::to_string(SIGSEGV));
  EXPECT_EQ(ev.back(), "exited");

  const uint64_t crash_here = ReadHexFile(out);
  ASSERT_NE(crash_here, 0u);
  const std::vector<pfm_bts_raw> recs = sink.records();
  // The history was complete when Signaled ran: nothing came after it.
  ASSERT_EQ(sink.records_at_signal(), recs.size());
  ASSERT_FALSE(recs.empty());
  EXPECT_GE(recs.back().to, crash_here);
  EXPECT_LT(recs.back().to, crash_here + 0x20);
}

TEST(SoftBts, RefusesToTraceAProcessWeMayNotTrace) {
  pid_t target = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({"/bin/true"}, &target, &d), 0);  // runs as root
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    RecordingSink sink;
    std::unique_ptr<SoftBtsTracer> t;
    ErrorDetail cd;
    const int rc = SoftBtsTracer::Start(target, SoftBtsOptions(), &sink, &t, &cd);
    _exit(rc == -EPERM && std::string(cd.message).find("pid") !=
                              std::string::npos
              ? 0
              : 11);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 10) GTEST_SKIP() << "cannot drop to uid 65534 (not root)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "Start() as nobody did not give -EPERM";
  ASSERT_EQ(Abandon(target, &d), 0);
  ASSERT_EQ(waitpid(target, &st, 0), target);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 126);
}

TEST(SoftBts, RefusesAGonePidAndBadArguments) {
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({"/bin/true"}, &pid, &d), 0);
  ASSERT_EQ(Abandon(pid, &d), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);  // reaped: the pid is free now
  RecordingSink sink;
  std::unique_ptr<SoftBtsTracer> t;
  EXPECT_EQ(SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &t, &d), -ESRCH);
  EXPECT_EQ(SoftBtsTracer::Start(getpid(), SoftBtsOptions(), &sink, &t, &d),
            -EINVAL);
  EXPECT_EQ(SoftBtsTracer::Start(1, SoftBtsOptions(), nullptr, &t, &d), -EINVAL);
  EXPECT_EQ(Release(pid, &d), -ENOENT);
  EXPECT_EQ(SpawnStopped({}, &pid, &d), -EINVAL);
}

TEST(SoftBts, StopMidRunLeavesTheTraceeRunningUntraced) {
  const std::string fifo = TmpPath("stop_fifo");
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({TestProgram("testdata_wait_fifo_bin"), fifo}, &pid, &d), 0);
  RecordingSink sink;
  std::unique_ptr<SoftBtsTracer> t;
  ASSERT_EQ(SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &t, &d), 0)
      << d.message;
  ASSERT_EQ(Release(pid, &d), 0);
  // Let it get well into its polling loop (count work, not time).
  while (t->stats().steps < 30000 && !t->done()) usleep(1000);
  ASSERT_FALSE(t->done());
  t->Stop();
  t->Stop();  // safe twice
  EXPECT_TRUE(t->done());

  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line, tracer;
  while (std::getline(status, line))
    if (line.rfind("TracerPid:", 0) == 0) tracer = line;
  EXPECT_EQ(tracer, "TracerPid:\t0");

  // Still running its loop: it sees the byte and exits 7.
  const int w = open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(w, 0);
  ASSERT_EQ(write(w, "x", 1), 1);
  close(w);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7) << st;
}

TEST(SoftBts, StopsWhileTheTraceeBlocksInASyscallAndLeaksNothing) {
  const int fds_before = CountDir("/proc/self/fd");
  const int threads_before = CountDir("/proc/self/task");
  pid_t pid = 0;
  ErrorDetail d;
  ASSERT_EQ(SpawnStopped({"/bin/true"}, &pid, &d), 0);
  {
    RecordingSink sink;
    std::unique_ptr<SoftBtsTracer> t;
    ASSERT_EQ(SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &t, &d), 0)
        << d.message;
    EXPECT_EQ(CountDir("/proc/self/task"), threads_before + 1);
    // The child sits in read() until released: the tracer is blocked in
    // waitpid() and must be woken to stop.
    t->Stop();
    EXPECT_TRUE(t->done());
  }
  ASSERT_EQ(Release(pid, &d), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(CountDir("/proc/self/fd"), fds_before);
  EXPECT_EQ(CountDir("/proc/self/task"), threads_before);
}

}  // namespace
}  // namespace pfm
