// Over 600 lines, on purpose: the tracer thread's state machine (SoftBtsRun)
// is one class whose steps share the registers, the decode cache and the
// mapping regions; the instruction decoder already lives apart
// (branch_decoder.cc).
#include "kernel/drivers/ptrace/soft_bts.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>

#include "kernel/drivers/clock.h"
#include "kernel/drivers/ptrace/branch_decoder.h"

namespace pfm {
namespace {

uint64_t NowNs() { return MonotonicNs(); }

void NoopHandler(int) {}

void InstallWakeHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = NoopHandler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: waitpid must return EINTR
    sigaction(SoftBtsWakeSignal(), &sa, nullptr);
  });
}

bool FatalLooking(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
         sig == SIGABRT;
}

bool GroupStopSignal(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

// Reads up to 15 bytes of tracee code at `addr`. process_vm_readv does not
// split an iovec, so the read is split at the page boundary to get the bytes
// of an instruction that ends a mapping; PTRACE_PEEKTEXT (which can read
// execute-only pages) is the fallback.
size_t ReadCode(pid_t pid, uint64_t addr, uint8_t* buf) {
  const uint64_t page = 4096;
  const uint64_t first = std::min<uint64_t>(15, page - (addr & (page - 1)));
  iovec local = {buf, 15};
  iovec remote[2] = {{reinterpret_cast<void*>(addr), first},
                     {reinterpret_cast<void*>(addr + first), 15 - first}};
  const ssize_t n = process_vm_readv(pid, &local, 1, remote, first < 15 ? 2 : 1, 0);
  if (n > 0) return static_cast<size_t>(n);
  size_t got = 0;
  for (uint64_t off = 0; off < 16; off += 8) {
    errno = 0;
    const long w = ptrace(PTRACE_PEEKTEXT, pid, addr + off, nullptr);
    if (errno != 0) break;
    const size_t take = std::min<size_t>(8, 15 - got);
    std::memcpy(buf + got, &w, take);
    got += take;
  }
  return got;
}

// Field 39 of /proc/PID/stat ("processor": CPU last run on); fields are
// counted after the last ')' so a comm with spaces cannot shift them.
int ReadCpu(int stat_fd) {
  char buf[1024];
  const ssize_t n = pread(stat_fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  int field = 2;
  for (++p; *p != '\0'; ++p) {
    if (*p == ' ') {
      ++field;
      if (field == 39) return std::atoi(p + 1);
    }
  }
  return -1;
}

// Flat open-addressing cache of decoded instructions, keyed by address.
// Allocated once; a full probe window evicts the home slot.
class DecodeCache {
 public:
  explicit DecodeCache(uint32_t entries) {
    uint32_t n = 64;
    while (n < entries && n < (1u << 24)) n <<= 1;
    mask_ = n - 1;
    slots_.reset(new Slot[n]());
  }
  void Clear() { std::fill(slots_.get(), slots_.get() + mask_ + 1, Slot()); }
  // Returns the decoded instruction at `addr`; ok=false when it could not be
  // read or decoded.
  const DecodedInsn& Get(pid_t pid, uint64_t addr, bool* ok) {
    const uint32_t home = static_cast<uint32_t>((addr * 0x9E3779B97F4A7C15ull) >> 40) & mask_;
    for (uint32_t i = 0; i < kProbe; ++i) {
      Slot& s = slots_[(home + i) & mask_];
      if (s.used && s.addr == addr) {
        *ok = s.ok;
        return s.insn;
      }
      if (!s.used) return Fill(&s, pid, addr, ok);
    }
    return Fill(&slots_[home], pid, addr, ok);
  }
  uint64_t misses() const { return misses_; }

 private:
  static constexpr uint32_t kProbe = 8;
  struct Slot {
    uint64_t addr = 0;
    DecodedInsn insn;
    bool used = false;
    bool ok = false;
  };
  const DecodedInsn& Fill(Slot* s, pid_t pid, uint64_t addr, bool* ok) {
    ++misses_;
    uint8_t buf[16] = {};
    const size_t n = ReadCode(pid, addr, buf);
    s->used = true;
    s->addr = addr;
    s->insn = DecodedInsn();
    s->ok = DecodeInsn(buf, n, &s->insn) > 0;
    *ok = s->ok;
    return s->insn;
  }
  std::unique_ptr<Slot[]> slots_;
  uint32_t mask_ = 0;
  uint64_t misses_ = 0;
};

std::string ReadFile(const std::string& path) {
  std::string out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

// Registry of SpawnStopped children: pid -> write end of the release pipe.
std::mutex& SpawnMu() {
  static std::mutex mu;
  return mu;
}
std::map<pid_t, int>& SpawnFds() {
  static std::map<pid_t, int>* fds = new std::map<pid_t, int>();
  return *fds;
}

}  // namespace

int SoftBtsWakeSignal() { return SIGRTMAX - 2; }

// The tracer thread's state: lives on that thread's stack for one run.
class SoftBtsRun {
 public:
  explicit SoftBtsRun(SoftBtsTracer* t)
      : t_(t),
        pid_(t->pid_),
        task_{t->pid_, t->pid_},
        cache_(t->opt_.decode_cache_entries) {}
  ~SoftBtsRun() {
    if (stat_fd_ >= 0) close(stat_fd_);
  }

  void Run();

 private:
  enum StepMode { kStep, kBlockProbe, kBlock };

  void Drain(uint64_t now) {
    DsArea* area = t_->core_->TaskArea(task_);
    if (area == nullptr || area->bts_count() == 0) return;
    t_->core_->TaskDsInterrupt(task_, cpu_, now);
  }
  // A drain asked for from another thread (RequestDrain).
  void ServeDrainRequest() {
    if (!t_->drain_requested_.exchange(false, std::memory_order_acq_rel)) return;
    Drain(NowNs());
    t_->drains_served_.fetch_add(1, std::memory_order_release);
  }
  void Record(uint64_t from, uint64_t to) {
    pfm_bts_raw r{from, to, 0};
    t_->branches_.fetch_add(1, std::memory_order_relaxed);
    // The core's area for the task (none: no consumer wants branches now).
    DsArea* area = t_->core_->TaskArea(task_);
    if (area != nullptr && area->WriteBts(r) != DsArea::kStored) Drain(NowNs());
  }
  void RefreshMaps() {
    // Best effort: the maps change under the reader, and a tracer that
    // lost a line still steps correctly (it reads the registers there).
    std::vector<Mapping> m;
    ParseProcMaps(ReadFile("/proc/" + std::to_string(pid_) + "/maps"),
                  MalformedLine::kSkip, &m, nullptr);
    regions_.clear();
    for (const Mapping& e : m) {
      // Where a computed RIP may be trusted: code that can only change
      // through a syscall we watch (mmap/mprotect/munmap), so the decode
      // cache is current. Not writable or shared mappings (JITs, a second
      // writable alias), and not [vsyscall], whose calls the kernel
      // emulates (it returns to the caller without running the bytes).
      const bool trusted = !e.writable && !e.shared && e.path != "[vsyscall]" &&
                           e.end <= PFM_X86_USER_ADDR_END;
      regions_.push_back(Region{e.start, e.end, trusted});
    }
    std::sort(regions_.begin(), regions_.end(),
              [](const Region& a, const Region& b) { return a.start < b.start; });
    region_ = Region();
    std::lock_guard<std::mutex> lk(t_->mu_);
    t_->maps_.swap(m);
  }
  // Makes region_ the executable mapping holding `rip` (or an untrusted
  // one-byte region when none does).
  void FindRegion(uint64_t rip) {
    auto it = std::upper_bound(
        regions_.begin(), regions_.end(), rip,
        [](uint64_t a, const Region& r) { return a < r.start; });
    if (it != regions_.begin() && rip < std::prev(it)->end) {
      region_ = *std::prev(it);
    } else {
      region_ = Region{rip, rip + 1, false};
    }
  }
  // Whether this step's RIP may be computed from the previous one.
  bool CanComputeRip() const {
    const SoftBtsOptions& o = t_->opt_;
    if (!o.compute_rip || mode_ != kStep || !have_prev_ || !prev_ok_ ||
        !prev_insn_.sequential || maps_dirty_ || !region_.trusted)
      return false;
    if (o.max_computed_run != 0 && run_ >= o.max_computed_run) return false;
    // prev_rip_ is inside region_ (it was looked up or checked against it).
    return prev_rip_ + prev_insn_.length < region_.end;
  }
  bool ReadRegs(user_regs_struct* regs) {
    if (ptrace(PTRACE_GETREGS, pid_, nullptr, regs) != 0) return false;
    t_->reg_reads_.fetch_add(1, std::memory_order_relaxed);
    run_ = 0;
    return true;
  }
  void PollCpu(bool force) {
    if (!force && ++since_cpu_poll_ < t_->opt_.cpu_poll_steps) return;
    since_cpu_poll_ = 0;
    const int cpu = ReadCpu(stat_fd_);
    if (cpu < 0 || cpu == cpu_) return;
    const uint64_t now = NowNs();
    Drain(now);
    t_->core_->ContextSwitch(cpu_, now, task_, TaskId{}, true);
    t_->core_->ContextSwitch(cpu, now, TaskId{}, task_, false);
    cpu_ = cpu;
  }
  // Handles a completed step (or block) that started at prev_rip_.
  void OnStepStop();
  // Finds the taken branch that ended a block started at `start` and
  // arriving at `to`; 0 when it cannot be found.
  uint64_t BlockBranchFrom(uint64_t start, uint64_t to);
  // Waits for the next stop or exit of the tracee; false on EINTR.
  bool Wait(int* status) {
    const pid_t r = waitpid(pid_, status, __WALL);
    return r == pid_;
  }
  void Finish(int64_t status) {
    const uint64_t now = NowNs();
    Drain(now);
    t_->core_->TaskExit(task_, now, status);
  }
  bool SigtrapPending() {
    const std::string st =
        ReadFile("/proc/" + std::to_string(pid_) + "/status");
    const size_t at = st.find("SigPnd:");
    if (at == std::string::npos) return false;
    const unsigned long long mask =
        std::strtoull(st.c_str() + at + 7, nullptr, 16);
    return (mask & (1ull << (SIGTRAP - 1))) != 0;
  }
  // Detaches from a tracee in a ptrace-stop (wait status `st`), passing on
  // `sig`. Returns false if the tracee exited meanwhile (Finish was called).
  bool DetachFromStop(int st, int sig);
  void StopWhileRunning();

  SoftBtsTracer* t_;
  const pid_t pid_;
  const TaskId task_;
  DecodeCache cache_;
  int stat_fd_ = -1;
  int cpu_ = -1;
  uint32_t since_cpu_poll_ = 0;
  bool have_prev_ = false;
  uint64_t prev_rip_ = 0;
  DecodedInsn prev_insn_;
  bool prev_ok_ = false;
  bool maps_dirty_ = false;
  StepMode mode_ = kStep;
  int probe_left_ = 0;

  // Computed RIPs (see soft_bts.h).
  struct Region {
    uint64_t start = 0;
    uint64_t end = 0;
    bool trusted = false;
  };
  std::vector<Region> regions_;  // executable mappings, sorted by start
  Region region_;                // the one holding prev_rip_
  uint32_t run_ = 0;             // computed RIPs since the last register read
  bool prev_computed_ = false;   // prev_rip_ was computed, not read
};

namespace {

// Whether arriving at `next` after executing `insn` at `rip` is possible at
// all; only direct transfers and sequential instructions can be checked.
bool Reachable(const DecodedInsn& insn, uint64_t rip, uint64_t next) {
  const uint64_t fall = rip + insn.length;
  const uint64_t target = fall + static_cast<int64_t>(insn.rel);
  switch (insn.kind) {
    case BranchKind::kNone:
      return !insn.sequential || next == fall;
    case BranchKind::kCondRel:
      return next == fall || next == target;
    case BranchKind::kJmpRel:
    case BranchKind::kCallRel:
      return next == target;
    default:
      return true;
  }
}

}  // namespace

void SoftBtsRun::OnStepStop() {
  user_regs_struct regs;
  bool have_regs = false;
  uint64_t rip = 0;
  const bool computed = CanComputeRip();
  if (computed) {
    // A plain step over a sequential instruction: RIP moved by its length.
    // Nothing to record (it is not a branch).
    rip = prev_rip_ + prev_insn_.length;
    ++run_;
    t_->computed_.fetch_add(1, std::memory_order_relaxed);
    if (t_->opt_.verify_computed_rip) {
      if (ptrace(PTRACE_GETREGS, pid_, nullptr, &regs) != 0) {
        have_prev_ = false;
        return;
      }
      have_regs = true;
      if (regs.rip != rip) {
        t_->mispredictions_.fetch_add(1, std::memory_order_relaxed);
        rip = regs.rip;
      }
    }
  } else {
    if (!ReadRegs(&regs)) {
      have_prev_ = false;
      return;
    }
    have_regs = true;
    rip = regs.rip;
  }
  t_->steps_.fetch_add(1, std::memory_order_relaxed);
  if (maps_dirty_) {  // never with a computed RIP: CanComputeRip refuses
    maps_dirty_ = false;
    cache_.Clear();
    RefreshMaps();
  }
  if (have_prev_ && !computed) {
    if (mode_ == kBlockProbe && prev_ok_ &&
        prev_insn_.kind == BranchKind::kNone) {
      // After a non-branch, PTRACE_SINGLEBLOCK either stopped at the
      // fall-through (it stepped one instruction: branch-trap not honoured)
      // or ran on to a branch target (honoured). Until such a step is seen
      // the probe is processed as a single step, so nothing is lost.
      if (rip == prev_rip_ + prev_insn_.length) {
        mode_ = kStep;
      } else {
        mode_ = kBlock;
        t_->singleblock_.store(true, std::memory_order_relaxed);
      }
    } else if (mode_ == kBlockProbe && --probe_left_ <= 0) {
      mode_ = kStep;
    }
    if (mode_ == kBlock) {
      const uint64_t from = BlockBranchFrom(prev_rip_, rip);
      if (from != 0) Record(from, rip);
    } else if (prev_ok_) {
      if (prev_computed_ && !Reachable(prev_insn_, prev_rip_, rip)) {
        // The chain of computed RIPs that led to prev_rip_ went wrong
        // somewhere: a record from prev_rip_ would be invented.
        t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
      } else if (BranchTaken(prev_insn_, prev_rip_, rip)) {
        Record(prev_rip_, rip);
      }
    } else if (rip < prev_rip_ || rip > prev_rip_ + 15) {
      // Unreadable or undecodable code that moved RIP beyond any length it
      // could have: the best soft BTS can say is that it branched.
      Record(prev_rip_, rip);
    }
  }
  if (rip < region_.start || rip >= region_.end) FindRegion(rip);
  bool ok = false;
  const DecodedInsn* insn = &cache_.Get(pid_, rip, &ok);
  if (ok && insn->kind == BranchKind::kTrap) {
    if (!have_regs) {
      // The mmap check below needs the syscall's arguments; the read also
      // checks the chain of computed RIPs that led here.
      if (!ReadRegs(&regs)) {
        have_prev_ = false;
        return;
      }
      have_regs = true;
      if (regs.rip != rip) {
        t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
        rip = regs.rip;
        FindRegion(rip);
        insn = &cache_.Get(pid_, rip, &ok);
      }
    }
    if (ok && insn->kind == BranchKind::kTrap) {
      const uint64_t nr = regs.rax;
      const bool exec_prot = (regs.rdx & PROT_EXEC) != 0;
      if (((nr == SYS_mmap || nr == SYS_mprotect || nr == SYS_pkey_mprotect) &&
           exec_prot) ||
          nr == SYS_munmap)
        maps_dirty_ = true;  // refreshed at the stop after the syscall
    }
  }
  prev_insn_ = *insn;
  prev_ok_ = ok;
  prev_rip_ = rip;
  prev_computed_ = !have_regs;
  have_prev_ = true;
  PollCpu(false);
}

uint64_t SoftBtsRun::BlockBranchFrom(uint64_t start, uint64_t to) {
  uint64_t at = start;
  for (int i = 0; i < 4096; ++i) {
    bool ok = false;
    const DecodedInsn& d = cache_.Get(pid_, at, &ok);
    if (!ok) return 0;
    if (d.kind == BranchKind::kNone) {
      at += d.length;
      continue;
    }
    if (d.kind == BranchKind::kCondRel) {
      if (at + d.length + int64_t(d.rel) == to) return at;
      at += d.length;  // not taken: the block went on
      continue;
    }
    if (d.kind == BranchKind::kTrap) {
      if (at + d.length == to) return 0;  // trap ended the block, no branch
      return at;
    }
    return at;  // unconditional transfer ends the block
  }
  return 0;
}

bool SoftBtsRun::DetachFromStop(int st, int sig) {
  // A syscall that exits with the trap flag set queues a SIGTRAP for the
  // tracee (x86 user_single_step_report); if we detach at an event-stop
  // that came first, the trap would be delivered untraced and kill it.
  // Let it arrive while still traced and drop it.
  for (int i = 0; i < 4 && (st >> 16) != 0 && SigtrapPending(); ++i) {
    if (ptrace(PTRACE_CONT, pid_, nullptr, nullptr) != 0) break;
    pid_t r;
    do {
      r = waitpid(pid_, &st, __WALL);
    } while (r < 0 && errno == EINTR);
    if (r != pid_) return false;
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      Finish(st);
      return false;
    }
    if ((st >> 16) == 0) {
      if (WSTOPSIG(st) != SIGTRAP) sig = WSTOPSIG(st);
      break;
    }
  }
  Drain(NowNs());
  ptrace(PTRACE_DETACH, pid_, nullptr, reinterpret_cast<void*>(long(sig)));
  return true;
}

void SoftBtsRun::StopWhileRunning() {
  // The tracee is running (a step is in flight, possibly inside a blocking
  // syscall): interrupt it and detach at whatever stop comes first.
  ptrace(PTRACE_INTERRUPT, pid_, nullptr, nullptr);
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, __WALL);
    if (r < 0 && errno == EINTR) continue;
    if (r != pid_) return;  // gone
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      Finish(st);
      return;
    }
    if (WIFSTOPPED(st)) {
      const int sig = WSTOPSIG(st);
      const bool signal_delivery = (st >> 16) == 0 && sig != SIGTRAP;
      DetachFromStop(st, signal_delivery ? sig : 0);
      return;
    }
  }
}

void SoftBtsRun::Run() {
  SoftBtsTracer* t = t_;
  if (ptrace(PTRACE_SEIZE, pid_, nullptr,
             reinterpret_cast<void*>(long(PTRACE_O_TRACEEXEC))) != 0) {
    const int e = errno;
    t->start_detail_.Set(-e, "cannot trace pid %d: PTRACE_SEIZE failed: %s%s",
                         pid_, strerror(e),
                         e == EPERM ? " (need the same uid or CAP_SYS_PTRACE)"
                                    : "");
    t->ReportStarted(-e);
    return;
  }
  if (ptrace(PTRACE_INTERRUPT, pid_, nullptr, nullptr) != 0) {
    const int e = errno;
    ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
    t->start_detail_.Set(-e, "PTRACE_INTERRUPT of pid %d failed: %s", pid_,
                         strerror(e));
    t->ReportStarted(-e);
    return;
  }
  int st = 0;
  int pending_sig = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &st, __WALL);
    if (r < 0 && errno == EINTR) continue;
    if (r != pid_ || WIFEXITED(st) || WIFSIGNALED(st)) {
      t->start_detail_.Set(-ESRCH, "pid %d exited while being attached", pid_);
      t->ReportStarted(-ESRCH);
      return;
    }
    if ((st >> 16) == PTRACE_EVENT_STOP) break;
    // A signal raced with the interrupt: keep it for the tracee.
    if (WSTOPSIG(st) != SIGTRAP) pending_sig = WSTOPSIG(st);
    ptrace(PTRACE_CONT, pid_, nullptr, nullptr);
  }
  stat_fd_ = open(("/proc/" + std::to_string(pid_) + "/stat").c_str(),
                  O_RDONLY | O_CLOEXEC);
  cpu_ = ReadCpu(stat_fd_);
  if (cpu_ < 0) cpu_ = 0;
  RefreshMaps();
  t->core_->ContextSwitch(cpu_, NowNs(), TaskId{}, task_, false);
  if (t->opt_.try_singleblock) {
    mode_ = kBlockProbe;
    probe_left_ = 64;
  }
  t->ReportStarted(0);

  // Each iteration resumes the stopped tracee for one step and waits.
  for (;;) {
    if (t->stop_.load(std::memory_order_acquire)) {
      DetachFromStop(st, pending_sig);
      return;
    }
    ServeDrainRequest();
    if (t->core_->TaskHeld(task_)) {
      const timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
      continue;
    }
    const auto req = mode_ == kStep ? PTRACE_SINGLESTEP : PTRACE_SINGLEBLOCK;
    if (ptrace(req, pid_, nullptr, reinterpret_cast<void*>(long(pending_sig))) != 0) {
      if (mode_ != kStep && errno == EIO) {  // kernel without SINGLEBLOCK
        mode_ = kStep;
        continue;
      }
      // ESRCH: killed (SIGKILL) while stopped; its exit is collected below.
    }
    pending_sig = 0;
    for (;;) {
      const pid_t r = waitpid(pid_, &st, __WALL);
      if (r == pid_) break;
      if (r < 0 && errno == EINTR) {
        if (t->stop_.load(std::memory_order_acquire)) {
          StopWhileRunning();
          return;
        }
        // The tracee runs (e.g. blocked in a syscall); only this thread
        // writes the area, so draining it now is safe.
        ServeDrainRequest();
        continue;
      }
      Finish(-1);  // ECHILD: reaped elsewhere; the status is unknown
      return;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      Finish(st);
      return;
    }
    if (!WIFSTOPPED(st)) continue;
    const int sig = WSTOPSIG(st);
    const int event = st >> 16;
    if (event == PTRACE_EVENT_EXEC) {
      have_prev_ = false;
      cache_.Clear();
      RefreshMaps();
      continue;
    }
    if (event == PTRACE_EVENT_STOP) {
      have_prev_ = false;
      if (GroupStopSignal(sig)) {
        // Honour job control: stay stopped until SIGCONT (or Stop()).
        ptrace(PTRACE_LISTEN, pid_, nullptr, nullptr);
        for (;;) {
          const pid_t r = waitpid(pid_, &st, __WALL);
          if (r == pid_) break;
          if (r < 0 && errno == EINTR && t->stop_.load()) {
            StopWhileRunning();
            return;
          }
          if (r < 0 && errno != EINTR) {
            Finish(-1);
            return;
          }
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
          Finish(st);
          return;
        }
        if (WIFSTOPPED(st) && (st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP)
          pending_sig = WSTOPSIG(st);
      }
      continue;
    }
    if (event != 0) {
      have_prev_ = false;
      continue;
    }
    if (sig == SIGTRAP) {
      OnStepStop();
      continue;
    }
    // Signal-delivery-stop: the instruction at RIP did not complete.
    have_prev_ = false;
    if (FatalLooking(sig)) {
      const uint64_t now = NowNs();
      Drain(now);
      t->core_->TaskSignaled(task_, now, sig);
    }
    pending_sig = sig;
  }
}

SoftBtsTracer::SoftBtsTracer(pid_t pid, const SoftBtsOptions& opt,
                             CoreHooks* core)
    : pid_(pid), opt_(opt), core_(core) {}

SoftBtsTracer::~SoftBtsTracer() { Stop(); }

void SoftBtsTracer::ReportStarted(int rc) {
  std::lock_guard<std::mutex> lk(mu_);
  started_ = true;
  start_rc_ = rc;
  cv_.notify_all();
}

void SoftBtsTracer::Run() {
  {
    SoftBtsRun run(this);
    run.Run();
  }
  done_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lk(mu_);
  thread_exited_ = true;
  cv_.notify_all();
}

int SoftBtsTracer::Start(pid_t pid, const SoftBtsOptions& opt,
                         CoreHooks* core, std::unique_ptr<SoftBtsTracer>* out,
                         ErrorDetail* d) {
  if (pid <= 0 || pid == getpid())
    return SetError(d, -EINVAL, "soft BTS needs another process's pid, got %d",
                    pid);
  if (core == nullptr || out == nullptr)
    return SetError(d, -EINVAL, "soft BTS needs a core and an output pointer");
  if (opt.ds_records == 0)
    return SetError(d, -EINVAL, "soft BTS DS area must hold at least one record");
  InstallWakeHandler();
  std::unique_ptr<SoftBtsTracer> t(new SoftBtsTracer(pid, opt, core));
  t->thread_ = std::thread(&SoftBtsTracer::Run, t.get());
  int rc;
  {
    std::unique_lock<std::mutex> lk(t->mu_);
    t->cv_.wait(lk, [&] { return t->started_; });
    rc = t->start_rc_;
  }
  if (rc < 0) {
    t->thread_.join();
    if (d != nullptr) *d = t->start_detail_;
    return rc;
  }
  *out = std::move(t);
  return 0;
}

uint64_t SoftBtsTracer::RequestDrain() {
  const uint64_t ticket = drains_served_.load(std::memory_order_acquire);
  drain_requested_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable() && !thread_exited_)
    pthread_kill(thread_.native_handle(), SoftBtsWakeSignal());
  return ticket;
}

void SoftBtsTracer::Stop() {
  std::lock_guard<std::mutex> stop_lk(stop_mu_);
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  {
    std::unique_lock<std::mutex> lk(mu_);
    // A signal sent just before the tracer blocks in waitpid is lost, so
    // keep kicking until it is out.
    while (!thread_exited_) {
      pthread_kill(thread_.native_handle(), SoftBtsWakeSignal());
      cv_.wait_for(lk, std::chrono::milliseconds(10));
    }
  }
  thread_.join();
}

SoftBtsTracer::Stats SoftBtsTracer::stats() const {
  Stats s;
  s.steps = steps_.load(std::memory_order_relaxed);
  s.branches = branches_.load(std::memory_order_relaxed);
  s.singleblock_honoured = singleblock_.load(std::memory_order_relaxed);
  s.reg_reads = reg_reads_.load(std::memory_order_relaxed);
  s.computed = computed_.load(std::memory_order_relaxed);
  s.mispredictions = mispredictions_.load(std::memory_order_relaxed);
  s.resyncs = resyncs_.load(std::memory_order_relaxed);
  return s;
}

std::vector<Mapping> SoftBtsTracer::maps() const {
  std::lock_guard<std::mutex> lk(mu_);
  return maps_;
}

int SpawnStopped(const std::vector<std::string>& argv, pid_t* pid,
                 ErrorDetail* d) {
  if (argv.empty() || pid == nullptr)
    return SetError(d, -EINVAL, "SpawnStopped needs a program and a pid pointer");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // A socket pair, not a pipe: send(MSG_NOSIGNAL) to a dead child returns
  // EPIPE instead of raising SIGPIPE in the caller.
  int p[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0)
    return SetError(d, -errno, "socketpair failed: %s", strerror(errno));
  std::lock_guard<std::mutex> lk(SpawnMu());
  const pid_t c = fork();
  if (c < 0) {
    const int e = errno;
    close(p[0]);
    close(p[1]);
    return SetError(d, -e, "fork failed: %s", strerror(e));
  }
  if (c == 0) {
    // Only async-signal-safe calls between fork and exec. Close the other
    // waiting children's release sockets (the registry is stable: SpawnMu
    // is held across fork) so Abandon() reaches them even before we exec.
    close(p[1]);
    for (const auto& kv : SpawnFds()) close(kv.second);
    char b = 0;
    ssize_t r;
    do {
      r = read(p[0], &b, 1);
    } while (r < 0 && errno == EINTR);
    if (r != 1 || b != 'g') _exit(126);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(p[0]);
  SpawnFds()[c] = p[1];
  *pid = c;
  return 0;
}

static int SendGo(pid_t pid, bool go, ErrorDetail* d) {
  int fd;
  {
    std::lock_guard<std::mutex> lk(SpawnMu());
    auto it = SpawnFds().find(pid);
    if (it == SpawnFds().end())
      return SetError(d, -ENOENT, "pid %d is not a waiting SpawnStopped child",
                      pid);
    fd = it->second;
    SpawnFds().erase(it);
  }
  int rc = 0;
  if (go) {
    const char b = 'g';
    ssize_t n;
    do {
      n = send(fd, &b, 1, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != 1) rc = SetError(d, -EPIPE, "pid %d is gone before release", pid);
  }
  close(fd);
  return rc;
}

int Release(pid_t pid, ErrorDetail* d) { return SendGo(pid, true, d); }

int Abandon(pid_t pid, ErrorDetail* d) { return SendGo(pid, false, d); }

}  // namespace pfm
