// Over 600 lines, on purpose: the tracer thread's state machine (SoftBtsRun)
// is one class whose steps share the registers, the decode cache and the
// mapping regions; the instruction decoder already lives apart
// (branch_decoder.cc).
#include "kernel/drivers/ptrace/soft_bts.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/hw_breakpoint.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/kcmp.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "kernel/drivers/clock.h"
#include "kernel/drivers/perf/perf_events.h"
#include "kernel/drivers/ptrace/branch_decoder.h"
#include "kernel/drivers/ptrace/branch_emulator.h"
#include "kernel/drivers/ptrace/function_entries.h"

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

// The int3s a branch-stepping tracer planted in one address space (an mm:
// the threads of a process share it, and so does a vfork child until it
// execs): address -> the byte the int3 replaced.
using PlantMap = std::unordered_map<uint64_t, uint8_t>;

// Flat open-addressing cache of decoded instructions, keyed by address.
// Allocated once; a full probe window evicts the home slot. Code is read
// with the planted int3s (overlay) replaced by the bytes they hide.
class DecodeCache {
 public:
  explicit DecodeCache(uint32_t entries) {
    uint32_t n = 64;
    while (n < entries && n < (1u << 24)) n <<= 1;
    mask_ = n - 1;
    slots_.reset(new Slot[n]());
  }
  void Clear() { std::fill(slots_.get(), slots_.get() + mask_ + 1, Slot()); }
  void set_overlay(const PlantMap* plants) { overlay_ = plants; }
  // Returns the decoded instruction at `addr`; ok=false when it could not be
  // read or decoded. *bytes (optional): its bytes (d.length of them).
  const DecodedInsn& Get(pid_t pid, uint64_t addr, bool* ok,
                         const uint8_t** bytes = nullptr) {
    const uint32_t home = static_cast<uint32_t>((addr * 0x9E3779B97F4A7C15ull) >> 40) & mask_;
    for (uint32_t i = 0; i < kProbe; ++i) {
      Slot& s = slots_[(home + i) & mask_];
      if (s.used && s.addr == addr) {
        *ok = s.ok;
        if (bytes != nullptr) *bytes = s.bytes;
        return s.insn;
      }
      if (!s.used) return Fill(&s, pid, addr, ok, bytes);
    }
    return Fill(&slots_[home], pid, addr, ok, bytes);
  }
  uint64_t misses() const { return misses_; }

 private:
  static constexpr uint32_t kProbe = 8;
  struct Slot {
    uint64_t addr = 0;
    DecodedInsn insn;
    bool used = false;
    bool ok = false;
    uint8_t bytes[15] = {};
  };
  const DecodedInsn& Fill(Slot* s, pid_t pid, uint64_t addr, bool* ok,
                          const uint8_t** bytes) {
    ++misses_;
    uint8_t buf[16] = {};
    const size_t n = ReadCode(pid, addr, buf);
    if (overlay_ != nullptr && !overlay_->empty()) {
      for (size_t k = 0; k < n; ++k) {
        auto it = overlay_->find(addr + k);
        if (it != overlay_->end()) buf[k] = it->second;
      }
    }
    s->used = true;
    s->addr = addr;
    s->insn = DecodedInsn();
    s->ok = DecodeInsn(buf, n, &s->insn) > 0;
    std::memcpy(s->bytes, buf, sizeof(s->bytes));
    *ok = s->ok;
    if (bytes != nullptr) *bytes = s->bytes;
    return s->insn;
  }
  std::unique_ptr<Slot[]> slots_;
  uint32_t mask_ = 0;
  uint64_t misses_ = 0;
  const PlantMap* overlay_ = nullptr;
};

// The tracee's memory for the branch emulator: /proc/PID/mem of its mm.
class MemFdMemory : public EmuMemory {
 public:
  explicit MemFdMemory(int fd) : fd_(fd) {}
  int Read(uint64_t addr, void* buf, size_t n) override {
    const ssize_t r = pread(fd_, buf, n, static_cast<off_t>(addr));
    return r == static_cast<ssize_t>(n) ? 0 : -EFAULT;
  }
  int Write(uint64_t addr, const void* buf, size_t n) override {
    const ssize_t r = pwrite(fd_, buf, n, static_cast<off_t>(addr));
    return r == static_cast<ssize_t>(n) ? 0 : -EFAULT;
  }

 private:
  int fd_;
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
  explicit SoftBtsRun(SoftBtsTracer* t) : t_(t), root_(t->pid_) {
    filtering_ = t->opt_.branch_step && t->opt_.filtering();
    started_ = t->opt_.start_at == 0;
  }
  ~SoftBtsRun() {
    for (auto& [tid, task] : tasks_)
      if (task->stat_fd >= 0) close(task->stat_fd);
  }

  void Run();

 private:
  // kBranch: branch stepping (soft_bts.h, SoftBtsOptions::branch_step).
  enum StepMode { kStep, kBlockProbe, kBlock, kBranch };

  // Where a computed RIP may be trusted (see RefreshMaps).
  struct Region {
    uint64_t start = 0;
    uint64_t end = 0;
    bool trusted = false;
  };
  // The int3s planted in one mm (branch stepping), written and read
  // through its /proc/PID/mem, which works while its threads run.
  struct Plants {
    ~Plants() {
      if (mem_fd >= 0) close(mem_fd);
    }
    int mem_fd = -1;
    PlantMap orig;  // address -> the byte the int3 replaced
    // Int3s taken out (LiftPlants), with the lift's generation (lift_gen_)
    // and the byte put back: a thread running freely when one was lifted
    // may have trapped on it just before (OwnLiftedTrap), and a process
    // forked before the lift still has it in its copy (ChildPlants). Pruned
    // to recent generations.
    struct Lifted {
      uint64_t gen;
      uint8_t orig;
    };
    std::unordered_map<uint64_t, Lifted> lifted;
  };
  // What the threads of one process share: the code, so the decode cache
  // and the executable mappings.
  struct AddressSpace {
    AddressSpace(pid_t p, uint32_t cache_entries) : pid(p), cache(cache_entries) {}
    void SetPlants(std::shared_ptr<Plants> p) {
      plants = std::move(p);
      cache.set_overlay(plants != nullptr ? &plants->orig : nullptr);
    }
    pid_t pid;
    DecodeCache cache;
    std::vector<Region> regions;  // executable mappings, sorted by start
    bool maps_dirty = false;      // refresh at the next step stop
    int tasks = 0;
    // Branch stepping: the int3s of this mm (null: none planted yet), and
    // per block start the address of the branch that ends the block (0:
    // the block cannot run natively, single-step it). Cleared with the
    // decode cache.
    std::shared_ptr<Plants> plants;
    std::unordered_map<uint64_t, uint64_t> blocks;
    // Address filters: whether the filter's ranges apply (the root's
    // program as at Start, and its children until they exec); the filter
    // here, sorted [lo, hi) pairs; the gates planted (function entries and
    // return addresses inside it); and the return addresses of the calls
    // seen inside it (where a gate may go: an instruction's start).
    bool image = false;
    std::vector<std::pair<uint64_t, uint64_t>> in;
    std::set<uint64_t> gates;
    std::set<uint64_t> ret_sites;
  };
  // One traced thread.
  struct Task {
    TaskId id;
    std::shared_ptr<AddressSpace> as;
    // kNew: attached, its first stop not seen yet; kDetach: to be let go at
    // its first stop (a process created while not inheriting).
    enum State { kNew, kDetach, kRunning, kStopped, kListening } state = kNew;
    int status = 0;       // wait status of the current stop
    int pending_sig = 0;  // to deliver at the next resume
    bool held = false;    // stopped because a blocking consumer is full
    // Stopped at PTRACE_EVENT_VFORK (the child created, not yet run): then
    // resumed with PTRACE_CONT, no trap flag (it runs nothing of its own
    // before its PTRACE_EVENT_VFORK_DONE stop), and asleep in the kernel
    // until that child execs or exits, where no PTRACE_INTERRUPT reaches
    // it: DetachAll lets the child go first. Cleared at its next stop.
    pid_t vfork_child = 0;
    // Step state.
    bool have_prev = false;
    uint64_t prev_rip = 0;
    DecodedInsn prev_insn;
    bool prev_ok = false;
    bool prev_computed = false;  // prev_rip was computed, not read
    StepMode mode = kStep;
    int probe_left = 0;
    Region region;  // the one holding prev_rip
    uint32_t run = 0;  // computed RIPs since the last register read
    // Branch stepping: resume with PTRACE_CONT towards the int3 at
    // bs_expect (else single-step); how it was last resumed; an int3 lifted
    // to single-step the branch under it, to plant again at the next stop.
    bool bs_cont = false;
    bool bs_conted = false;
    uint64_t conted_gen = 0;  // lift_gen_ when last resumed (any resume)
    // Address filters: running untraced outside the filter (resumed with
    // PTRACE_SYSCALL), since gap_from.
    bool outside = false;
    uint64_t gap_from = 0;
    uint64_t bs_expect = 0;
    uint64_t bs_replant = 0;
    // A process not followed (kDetach): the int3s its memory holds (its
    // creator's, and those lifted from it since detach_since: ChildPlants),
    // to take out before it is let go, and whether it shares the mm.
    std::shared_ptr<Plants> detach_plants;
    bool detach_shared_mm = false;
    uint64_t detach_since = 0;
    // bind_cpu: on the one CPU (bound), and the affinity to give it back
    // at detach (its own when bound, its creator's for a task created on
    // the one CPU, or what it set itself since: FinishAffinityCall). A
    // task created by a bound one and let go (kDetach) has `orig_cpus` too.
    bool bound = false;
    bool has_orig = false;
    bool orig_inherited = false;  // orig_cpus is a creator's (maybe guessed)
    cpu_set_t orig_cpus;
    // A sched_getaffinity/sched_setaffinity it was stepped into (aff_rip:
    // the syscall instruction, 0: none), finished at its next stop.
    uint64_t aff_rip = 0;
    uint64_t aff_nr = 0;
    // Where it runs.
    int cpu = -1;
    int stat_fd = -1;
    uint32_t since_cpu_poll = 0;
    // Kernel switch records (null: inferred from CPU changes).
    std::unique_ptr<PerfSampler> sw;
    // Switch-record state machine (see ReadSwitches).
    bool expect_in = true;        // the next SWITCH_IN is the resume's
    bool out_pending = false;     // a SWITCH_OUT waiting to know what it was
    uint64_t out_time = 0;
    int out_cpu = 0;
    bool out_preempt = false;
    bool stop_out_due = false;    // the stop's own SWITCH_OUT not yet seen
    uint64_t resumed_ns = 0;      // when the tracer last resumed it
    // After an exec: its entry point. The execve was single-stepped, so the
    // kernel reports a SIGTRAP at the syscall's exit (x86
    // user_single_step_report) before the first instruction runs: that
    // stop, at the entry point, is no step (counted as one, it would put
    // the chain of computed RIPs one instruction ahead of the task).
    uint64_t exec_entry = 0;
    // The debugger's hardware points on this thread, [i] for dbg_.hw[i].
    std::vector<std::unique_ptr<PerfSampler>> hw;
    // Debug control (root process only): held stopped for the debugger;
    // to stop after its next step; an event that came while the process
    // was being stopped, to report at the next resume.
    bool dbg_stopped = false;
    bool dbg_step = false;
    bool dbg_pending = false;
    int dbg_pending_sig = 0;
    bool dbg_pending_swbreak = false;
    int dbg_pending_hw_kind = 0;
    uint64_t dbg_pending_hw_addr = 0;
  };
  // Why a task stopped, for the debugger (DebugOnStop).
  enum class StopCause { kStep, kSignal, kInterrupt, kExec, kOther };
  struct DebugState {
    bool active = false;
    bool stop_at_exec = false;
    bool stopping = false;  // stopping the root process's threads
    bool stopped = false;   // all stopped and reported
    DebugEventFn events;
    DebugStopEvent report;  // what `stopping` will report
    std::set<uint64_t> breakpoints;
    struct HwPoint {
      int kind;
      uint64_t addr;
      uint32_t len;
    };
    std::vector<HwPoint> hw;  // DebugHwPoint
    std::multiset<uint64_t> hw_exec;  // addresses of the kDebugHwExec ones
  };
  // A preemption this soon after a resume is the tracer's own doing: the
  // woken tracee is switched out again until the tracer, still on the CPU,
  // blocks in waitpid (measured here: a few microseconds; a real
  // preemption lasts a time slice of another task).
  static constexpr uint64_t kTracerWakePreemptNs = 100000;
  // Record: the records a bound task holds when another one takes the CPU
  // from which they are drained.
  static constexpr size_t kHandOverRecords = 256;

  Task* Find(pid_t tid) {
    auto it = tasks_.find(tid);
    return it == tasks_.end() ? nullptr : it->second.get();
  }
  // Starts tracking `tid` (of process `tgid`), created by `parent` (null for
  // the threads found at attach). Reports it to the core unless it is to be
  // detached.
  // `parent` created it if `at_event` (its clone, fork or vfork event),
  // else it is a task of the process that did.
  Task* Adopt(pid_t tgid, pid_t tid, const Task* parent, bool detach, bool at_event);
  void ForgetTask(pid_t tid);

  void Drain(Task* t, uint64_t now) {
    DsArea* area = t_->core_->TaskArea(t->id);
    if (area == nullptr || area->bts_count() == 0) return;
    t_->core_->TaskDsInterrupt(t->id, t->cpu, now);
  }
  void DrainAll(uint64_t now) {
    for (auto& [tid, t] : tasks_) Drain(t.get(), now);
  }
  // A drain asked for from another thread (RequestDrain).
  void ServeDrainRequest() {
    if (!t_->drain_requested_.exchange(false, std::memory_order_acq_rel)) return;
    DrainAll(NowNs());
    t_->drains_served_.fetch_add(1, std::memory_order_release);
  }
  // A branch, or with PFM_BTS_RAW_GAP an address filter's gap.
  void Record(Task* t, uint64_t from, uint64_t to, uint64_t flags = 0) {
    pfm_bts_raw r{from, to, flags};
    (flags == 0 ? t_->branches_ : t_->gaps_).fetch_add(1, std::memory_order_relaxed);
    // The core's area for the task (none: no consumer wants branches now).
    // Tasks of one context may share one area (an in-process core): hand
    // over another task's records before writing this one's.
    DsArea* area = t_->core_->TaskArea(t->id);
    if (area == nullptr) return;
    if (area == last_area_ && last_writer_ != t->id && area->bts_count() != 0) {
      if (Task* w = Find(last_writer_.tid)) Drain(w, NowNs());
    } else if (t->bound && last_writer_ != t->id && tasks_.size() > 1) {
      // Tasks bound to one CPU take turns at every stop (bind_cpu), and
      // never change CPU, where an area is drained: the one that ran before
      // hands over what it holds once that is kHandOverRecords or more, as
      // at a context switch on hardware; else a history ring would get one
      // task's whole area (8192) at a time
      // (HostTasksE2e.HistorySnapshotsOfARunningThreadedProcessAreUnbrokenPerThread).
      // Not at every turn: through pfmd a drain is a message (a drain per
      // turn cut three spinning threads from 21,380 records in 300 ms to
      // 8,232).
      if (Task* w = Find(last_writer_.tid)) {
        const DsArea* wa = t_->core_->TaskArea(w->id);
        if (wa != nullptr && wa->bts_count() >= kHandOverRecords) Drain(w, NowNs());
      }
    }
    last_area_ = area;
    last_writer_ = t->id;
    if (area->WriteBts(r) != DsArea::kStored) Drain(t, NowNs());
  }
  void RefreshMaps(AddressSpace* as);
  // Makes t->region the executable mapping holding `rip` (or an untrusted
  // one-byte region when none does).
  void FindRegion(Task* t, uint64_t rip) {
    const std::vector<Region>& regions = t->as->regions;
    auto it = std::upper_bound(
        regions.begin(), regions.end(), rip,
        [](uint64_t a, const Region& r) { return a < r.start; });
    if (it != regions.begin() && rip < std::prev(it)->end) {
      t->region = *std::prev(it);
    } else {
      t->region = Region{rip, rip + 1, false};
    }
  }
  // Whether this step's RIP may be computed from the previous one.
  bool CanComputeRip(const Task* t) const {
    const SoftBtsOptions& o = t_->opt_;
    if (!o.compute_rip || t->mode != kStep || !t->have_prev || !t->prev_ok ||
        !t->prev_insn.sequential || t->as->maps_dirty || !t->region.trusted)
      return false;
    if (o.max_computed_run != 0 && t->run >= o.max_computed_run) return false;
    // prev_rip is inside region (it was looked up or checked against it).
    return t->prev_rip + t->prev_insn.length < t->region.end;
  }
  bool ReadRegs(Task* t, user_regs_struct* regs) {
    if (ptrace(PTRACE_GETREGS, t->id.tid, nullptr, regs) != 0) return false;
    t_->reg_reads_.fetch_add(1, std::memory_order_relaxed);
    t->run = 0;
    return true;
  }
  void ReportSwitch(Task* t, int cpu, uint64_t now, bool in, bool preempt) {
    t_->switches_.fetch_add(1, std::memory_order_relaxed);
    if (in)
      t_->core_->ContextSwitch(cpu, now, TaskId{}, t->id, preempt);
    else
      t_->core_->ContextSwitch(cpu, now, t->id, TaskId{}, preempt);
  }
  // A CPU change seen while the task was stopped by the tracer (the CPU of
  // a resume's switch-in): its records so far ran on the old CPU, the next
  // ones carry the new one. No switch records: the task did not switch by
  // itself (the kernel's records of real switches carry their CPUs).
  void Migrate(Task* t, int cpu, uint64_t now) {
    if (cpu < 0 || cpu == t->cpu) return;
    Drain(t, now);
    t->cpu = cpu;
  }
  // Inferred: a CPU change, as a switch out of the old CPU and into the new.
  void InferredMigrate(Task* t, int cpu, uint64_t now) {
    if (cpu < 0 || cpu == t->cpu) return;
    Drain(t, now);
    ReportSwitch(t, t->cpu, now, false, true);
    ReportSwitch(t, cpu, now, true, false);
    t->cpu = cpu;
  }
  // Inferred switches (no kernel records): the CPU as /proc shows it.
  void PollCpu(Task* t, bool force) {
    if (t->sw != nullptr || t->stat_fd < 0) return;
    if (!force && ++t->since_cpu_poll < t_->opt_.cpu_poll_steps) return;
    t->since_cpu_poll = 0;
    const int cpu = ReadCpu(t->stat_fd);
    if (cpu >= 0) InferredMigrate(t, cpu, NowNs());
  }
  // Reads the task's kernel switch records at one of its ptrace stops.
  void ReadSwitches(Task* t);
  void OpenSwitches(Task* t);
  // Handles a completed step (or block) of `t` that started at prev_rip;
  // `pre`: its registers, when already read.
  void OnStepStop(Task* t, const user_regs_struct* pre = nullptr);
  // Branch stepping (see SoftBtsOptions::branch_step).
  // A SIGTRAP of a task in kBranch: an int3 of ours, a step, or a signal.
  void OnBranchModeTrap(Task* t);
  // `t` is stopped at regs->rip, nothing recorded for that instruction
  // yet: emulates the branches it stands on (may_emulate), then plants the
  // int3 at the end of the block it goes on with (bs_cont) or sets it up to
  // single-step. Writes the registers back when they changed (dirty).
  void Plan(Task* t, user_regs_struct* regs, bool dirty, bool may_emulate);
  // The address of the branch that ends the block starting at `start`, if
  // the block may run natively (trusted code, only `native` instructions
  // before a branch EmulateBranch takes); else 0.
  uint64_t BlockEnd(Task* t, uint64_t start);
  std::shared_ptr<Plants> NewPlants(pid_t pid);
  bool Plant(AddressSpace* as, uint64_t addr);
  // Puts back the bytes of the int3s in [start, end) of `p` (every one
  // when end is 0) and forgets them; the threads of that mm running
  // towards one are interrupted, to plan again.
  void LiftPlants(Plants* p, uint64_t start, uint64_t end);
  // An int3 of `p` at `at` taken out (its byte `orig` put back) by other
  // means than LiftPlants (for one step, or where the filter says not to
  // trace): a lift of its own generation, for OwnLiftedTrap, the step check
  // and ChildPlants. PruneLifted bounds the history.
  void NoteLifted(Plants* p, uint64_t at, uint8_t orig);
  void PruneLifted(Plants* p);
  bool Planted(const AddressSpace* as, uint64_t addr) const {
    return as->plants != nullptr && as->plants->orig.count(addr) != 0;
  }
  // Whether `t`, stopped by a SIGTRAP with RIP at + 1, ran into our int3 at
  // `at`: it ran freely towards one, or was about to run that instruction
  // (a step from there, or from an unknown place after a signal or event).
  bool StoppedByPlant(const Task* t, uint64_t at) const {
    return Planted(t->as.get(), at) &&
           (t->bs_conted || !t->have_prev || t->prev_rip == at);
  }
  // Whether `t`, resumed with PTRACE_CONT and stopped by a SIGTRAP with RIP
  // at + 1, ran into an int3 of ours that has been lifted since: the one it
  // was sent towards, or one that was lifted while it ran (LiftPlants takes
  // them out one by one while the task runs on: it may pass a lifted one
  // and trap on the next before that is lifted too). Not the program's own
  // SIGTRAP then.
  bool OwnLiftedTrap(const Task* t, uint64_t at) const {
    if (!t->bs_conted) return false;
    if (at == t->bs_expect) return true;
    const Plants* p = t->as != nullptr ? t->as->plants.get() : nullptr;
    if (p == nullptr) return false;
    auto it = p->lifted.find(at);
    return it != p->lifted.end() && it->second.gen > t->conted_gen;
  }
  // The int3s of a process forked from an mm whose int3s are `from`: it got
  // a copy of that memory at some moment after the lift generation `since`
  // (ForkSince), so it holds those of from's int3s that were in place then:
  // the ones planted now and the ones lifted after `since`, as far as its
  // memory still shows an int3 there (one planted after the copy is not in
  // it). Null when its memory cannot be opened.
  std::shared_ptr<Plants> ChildPlants(pid_t child, const Plants& from, uint64_t since);
  // The lift generation before which a process created by `creator`, or by
  // a thread of process `pid` when the creating thread is not known (null),
  // was surely not yet forked: the creator's last resume, else the
  // earliest last resume of that process's threads.
  uint64_t ForkSince(const Task* creator, pid_t pid) const;
  // Whether the SIGTRAP `t` is stopped for came from an int3 (the kernel
  // sends SI_KERNEL for one, TRAP_TRACE for a single-step).
  bool TrapWasInt3(const Task* t) const {
    siginfo_t si{};
    return ptrace(PTRACE_GETSIGINFO, t->id.tid, nullptr, &si) == 0 && si.si_code == SI_KERNEL;
  }
  // Before a syscall that changes mappings runs (the tracer single-steps
  // syscalls): lifts the int3s where it acts.
  void BeforeMapSyscall(Task* t, const user_regs_struct& regs);
  // Takes the int3s out of every traced mm (Stop(), debug control).
  void LiftAll();
  // A task of branch stepping that has just stopped with SIGTRAP: if an
  // int3 of ours stopped it and it will not be planned from there (Stop(),
  // debug control), puts its RIP back onto the int3's address. True then.
  bool UndoInt3(Task* t);
  // Finds the taken branch that ended a block started at `start` and
  // arriving at `to`; 0 when it cannot be found.
  uint64_t BlockBranchFrom(Task* t, uint64_t start, uint64_t to);
  // Handles one wait status of a traced (or newly auto-attached) task.
  void Handle(pid_t tid, int st);
  void OnExec(Task* t);
  // Resumes a stopped task for one step (or holds it).
  void Resume(Task* t);
  void RetryHeld();
  // The task is gone: hand over its records and report its exit.
  void Gone(Task* t, int64_t status);
  // /proc/TID/stat says the task is in a ptrace-stop ('t').
  bool InTracingStop(pid_t tid) {
    const std::string st = ReadFile("/proc/" + std::to_string(tid) + "/stat");
    const size_t at = st.rfind(')');
    return at != std::string::npos && at + 2 < st.size() && st[at + 2] == 't';
  }
  bool SigtrapPending(pid_t tid) {
    const std::string st = ReadFile("/proc/" + std::to_string(tid) + "/status");
    const size_t at = st.find("SigPnd:");
    if (at == std::string::npos) return false;
    const unsigned long long mask =
        std::strtoull(st.c_str() + at + 7, nullptr, 16);
    return (mask & (1ull << (SIGTRAP - 1))) != 0;
  }
  // Detaches from a task in a ptrace-stop, passing on `sig`. Returns false
  // if the task exited meanwhile (Gone was called).
  bool DetachFromStop(Task* t, int sig);
  // Stop(): interrupts the running tasks and detaches from every one.
  void DetachAll();
  // Lets a kDetach task go at its first stop, the int3s of its memory out.
  void LetGoUnfollowed(Task* t);
  // Attaches to the root process's threads; reports Start's result.
  bool AttachAll();
  int SeizeOptions() const {
    long o = PTRACE_O_TRACEEXEC | PTRACE_O_TRACECLONE;
    // Branch stepping follows every child even when not inheriting: its
    // copy of the code (or, after vfork, the very same code) holds the
    // int3s, which must be taken out before it runs untraced.
    if (t_->opt_.inherit || t_->opt_.branch_step)
      o |= PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEVFORKDONE;
    if (filtering_) o |= PTRACE_O_TRACESYSGOOD;  // outside: syscall stops
    return static_cast<int>(o);
  }
  void UpdateTaskCount() {
    t_->tasks_.store(tasks_.size(), std::memory_order_relaxed);
  }

 public:
  // Debug control (soft_bts.h): run on the tracer thread by RunOnTracer.
  int DebugEnable(bool stop_at_exec, DebugEventFn events);
  int DebugInterrupt();
  int DebugResume(const DebugResumeSpec& spec);
  int DebugGetRegs(pid_t tid, DebugRegs* out);
  int DebugSetRegs(pid_t tid, const DebugRegs& in);
  int DebugReadMemory(uint64_t addr, size_t len, std::string* out);
  int DebugWriteMemory(uint64_t addr, const std::string& bytes);
  int DebugBreakpoint(uint64_t addr, bool insert);
  int DebugHwPoint(int kind, uint64_t addr, uint32_t len, bool insert, std::string* err);
  // Opens dbg_.hw[i] on `t`: 0, or the negative errno with `err` saying
  // why (perf_events.h validates length and alignment).
  int DebugArmHw(Task* t, size_t i, std::string* err);
  // The watchpoint that `t`'s last instruction hit (index into dbg_.hw),
  // or -1; consumes the samples.
  int DebugHwHit(Task* t);
  int DebugThreads(std::vector<pid_t>* out);
  int DebugKill();
  int DebugDisable(bool kill);

 private:
  void ServeDebugCalls();
  // A task of the root process stopped: whether the debugger keeps it
  // stopped (true: do not resume it).
  bool DebugOnStop(Task* t, StopCause cause, int sig);
  void DebugHold(Task* t);
  void DebugStopAll(Task* reporter, int sig, bool swbreak, int hw_kind = 0,
                    uint64_t hw_addr = 0);
  // Reports the stop once every thread of the root process is held.
  void DebugMaybeReport();
  void DebugRelease(Task* t, int sig);
  // Makes the task's step state start at `rip` (after the debugger moved
  // it, or a stop that lost the chain).
  void Reanchor(Task* t, uint64_t rip);
  Task* DebugTask(pid_t tid) {
    Task* t = Find(tid);
    return t != nullptr && t->id.pid == root_ && t->state != Task::kDetach ? t : nullptr;
  }

  DebugState dbg_;
  PerfCaps perf_caps_;  // probed at the first hardware point
  bool perf_caps_probed_ = false;

  SoftBtsTracer* t_;
  const pid_t root_;
  std::map<pid_t, std::unique_ptr<Task>> tasks_;  // by tid
  int held_ = 0;                  // tasks held (not resumed)
  // Run's round: the stops collected before any is handled.
  struct Waited {
    pid_t tid;
    int st;
    bool known;  // traced when its status was collected
  };
  std::vector<Waited> round_;
  uint64_t lift_gen_ = 0;         // LiftPlants calls that lifted something
  // SoftBtsOptions::bind_cpu (docs/host_drivers.md, "One CPU"): the CPU
  // (-1: binding off), the tracer thread's own affinity, the one-CPU mask,
  // whether this thread is on it now; each task's own is in Task.
  int bind_cpu_ = -1;
  bool state_attaching_ = false;  // AttachAll adopting the threads it seized
  bool detaching_ = false;
  bool tracer_bound_ = false;
  bool same_pid_ns_ = false;  // the root's pid namespace is this thread's
  cpu_set_t tracer_affinity_;
  cpu_set_t bound_affinity_;
  // Chooses the CPU (AttachAll); binds nothing yet.
  void SetUpBinding();
  // Puts `t` (and this thread, the first time) on the one CPU, keeping the
  // affinity to give it back; `creator`: the task whose clone, fork or
  // vfork created it (it inherited the creator's affinity).
  void BindTask(Task* t, const Task* creator);
  // SoftBtsOptions::on_bound for a bound task (pfmd must know the task:
  // after its TaskCreated).
  void ReportBound(const Task* t);
  // This thread's own affinity back (DetachAll, the end of Run).
  void UnbindTracer();
  // Gives `tid` back `orig` if it still has just the one CPU (else someone
  // outside the trace chose its affinity since, and that stands).
  void Unbind(pid_t tid, const cpu_set_t& orig);
  // A sched_getaffinity the program made sees the affinity it would have
  // untraced; a sched_setaffinity it made is what it gets back at detach,
  // and it stays on the one CPU meanwhile (docs/host_drivers.md).
  void NoteAffinityCall(Task* t, const user_regs_struct& regs);
  void FinishAffinityCall(Task* t);
  int64_t root_status_ = -1;
  DsArea* last_area_ = nullptr;   // Record's last area, and whose records it holds
  TaskId last_writer_;

  // Address filters (SoftBtsOptions::filter_ranges): whether any applies
  // (off under debug control), whether the start address was reached (or
  // there is none), and the function entries of the files read so far.
  bool filtering_ = false;
  bool started_ = true;
  std::map<std::string, ElfCode> elf_code_;
  bool HasRanges() const {
    return !t_->opt_.filter_ranges.empty() || !t_->opt_.filter_files.empty();
  }
  bool InFilter(const AddressSpace* as, uint64_t a) const {
    if (!filtering_) return true;
    if (!started_) return false;
    if (!HasRanges()) return true;
    auto it = std::upper_bound(as->in.begin(), as->in.end(), std::make_pair(a, UINT64_MAX));
    return it != as->in.begin() && a < std::prev(it)->second;
  }
  // Recomputes as->in from `maps` and plants its gates.
  void ComputeFilter(AddressSpace* as, const std::vector<Mapping>& maps);
  // Plan() found `t` at regs->rip outside the filter: it runs untraced.
  void GoOutside(Task* t, const user_regs_struct& regs);
  // `t` runs inside the filter again from `at`: the gap record.
  void GoInside(Task* t, uint64_t at);
  // Stops of a task running outside: a SIGTRAP, a syscall stop, and any
  // other stop (where it may be inside again: interrupted, exec, ...).
  void OnOutsideTrap(Task* t);
  void OnOutsideSyscall(Task* t);
  void ReconsiderOutside(Task* t);
  void NoteCall(Task* t, const DecodedInsn& d, uint64_t from) {
    if (filtering_ && (d.kind == BranchKind::kCallRel || d.kind == BranchKind::kCallInd))
      t->as->ret_sites.insert(from + d.length);
  }
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

// The Tgid and PPid of a task, from /proc/TID/status; false if it is gone.
bool ReadTaskIds(pid_t tid, pid_t* tgid, pid_t* ppid) {
  const std::string st = ReadFile("/proc/" + std::to_string(tid) + "/status");
  const size_t a = st.find("\nTgid:");
  const size_t b = st.find("\nPPid:");
  if (a == std::string::npos || b == std::string::npos) return false;
  *tgid = static_cast<pid_t>(std::atol(st.c_str() + a + 6));
  *ppid = static_cast<pid_t>(std::atol(st.c_str() + b + 6));
  return *tgid > 0;
}

// The pid of the task's tracer (TracerPid in /proc/TID/status); 0 for none
// or when it is gone.
pid_t TracerOf(pid_t tid) {
  const std::string st = ReadFile("/proc/" + std::to_string(tid) + "/status");
  const size_t at = st.find("\nTracerPid:");
  return at == std::string::npos ? 0 : static_cast<pid_t>(std::atol(st.c_str() + at + 11));
}

// The tids of /proc/PID/task.
std::vector<pid_t> ListThreads(pid_t pid) {
  std::vector<pid_t> out;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const long tid = std::atol(e->d_name);
    if (tid > 0) out.push_back(static_cast<pid_t>(tid));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Whether the thread runs with a user shadow stack (CET): an emulated
// call or ret would not update it, so the thread is single-stepped.
bool ShadowStack(pid_t tid) {
  const std::string st = ReadFile("/proc/" + std::to_string(tid) + "/status");
  const size_t at = st.find("x86_Thread_features:");
  if (at == std::string::npos) return false;
  const size_t eol = st.find('\n', at);
  return st.substr(at, eol == std::string::npos ? std::string::npos : eol - at)
             .find("shstk") != std::string::npos;
}

}  // namespace

void SoftBtsRun::RefreshMaps(AddressSpace* as) {
  // Best effort: the maps change under the reader, and a tracer that
  // lost a line still steps correctly (it reads the registers there).
  std::vector<Mapping> m;
  bool cut = false;
  ParseProcMaps(ReadFile("/proc/" + std::to_string(as->pid) + "/maps"),
                MalformedLine::kSkip, &m, nullptr, &cut);
  as->regions.clear();
  as->blocks.clear();
  for (const Mapping& e : m) {
    // Where a computed RIP may be trusted: code that can only change
    // through a syscall we watch (mmap/mprotect/munmap), so the decode
    // cache is current. Not writable or shared mappings (JITs, a second
    // writable alias), and not [vsyscall], whose calls the kernel
    // emulates (it returns to the caller without running the bytes).
    const bool trusted = !e.writable && !e.shared && e.path != "[vsyscall]" &&
                         e.end <= PFM_X86_USER_ADDR_END;
    as->regions.push_back(Region{e.start, e.end, trusted});
  }
  std::sort(as->regions.begin(), as->regions.end(),
            [](const Region& a, const Region& b) { return a.start < b.start; });
  for (auto& [tid, t] : tasks_)
    if (t->as.get() == as) t->region = Region();
  if (filtering_) ComputeFilter(as, m);
  std::lock_guard<std::mutex> lk(t_->mu_);
  t_->maps_[as->pid].swap(m);
  if (cut) {
    t_->maps_cut_.insert(as->pid);
  } else {
    t_->maps_cut_.erase(as->pid);
  }
}

void SoftBtsRun::ComputeFilter(AddressSpace* as, const std::vector<Mapping>& maps) {
  const SoftBtsOptions& o = t_->opt_;
  as->in.clear();
  if (as->image)
    for (const SoftBtsOptions::AddrRange& r : o.filter_ranges) as->in.emplace_back(r.lo, r.hi);
  for (const Mapping& m : maps)
    if (std::find(o.filter_files.begin(), o.filter_files.end(), m.path) != o.filter_files.end())
      as->in.emplace_back(m.start, m.end);
  std::sort(as->in.begin(), as->in.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : as->in) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  as->in.swap(merged);
  // Gates: the function entries inside the filter of every file mapped
  // there, and the start address.
  std::vector<uint64_t> gates;
  for (const Mapping& m : maps) {
    if (m.path.empty() || m.path[0] != '/') continue;
    bool overlaps = false;
    for (const auto& r : as->in) overlaps = overlaps || (r.first < m.end && m.start < r.second);
    if (!overlaps) continue;
    auto it = elf_code_.find(m.path);
    if (it == elf_code_.end()) {
      ElfCode code;
      ReadElfCode(m.path, &code);
      it = elf_code_.emplace(m.path, std::move(code)).first;
    }
    std::vector<uint64_t> entries;
    MappedEntries(it->second, m, &entries);
    const bool ranges_before = started_;
    started_ = true;  // InFilter by the ranges alone
    for (uint64_t a : entries)
      if (InFilter(as, a)) gates.push_back(a);
    started_ = ranges_before;
  }
  if (!started_ && as->image) gates.push_back(o.start_at);
  for (uint64_t g : gates)
    if (as->gates.count(g) != 0 || Plant(as, g)) as->gates.insert(g);
}

void SoftBtsRun::GoOutside(Task* t, const user_regs_struct& regs) {
  AddressSpace* as = t->as.get();
  t->outside = true;
  t->gap_from = regs.rip;
  t->bs_cont = false;
  t->have_prev = false;
  if (!started_ || as->plants == nullptr) return;
  // Left by a call, or by a jump from a PLT stub: the return address is
  // where it comes back, on top of the stack, or under the two words the
  // lazy-binding stub (PLT0) pushes. A gate on each of the top words that
  // is the return address of a call seen inside (so an instruction's
  // start; a word that only looks like one costs a needless gate).
  uint64_t top[3] = {};
  const ssize_t n = pread(as->plants->mem_fd, top, sizeof top, static_cast<off_t>(regs.rsp));
  for (ssize_t i = 0; i < n / 8; ++i) {
    const uint64_t ret = top[i];
    if (as->ret_sites.count(ret) != 0 && as->gates.count(ret) == 0 && InFilter(as, ret) &&
        Plant(as, ret))
      as->gates.insert(ret);
  }
}

void SoftBtsRun::GoInside(Task* t, uint64_t at) {
  Record(t, t->gap_from, at, PFM_BTS_RAW_GAP);
  t->outside = false;
  t->have_prev = false;
  t->bs_cont = false;
}

void SoftBtsRun::OnOutsideTrap(Task* t) {
  user_regs_struct regs;
  if (!ReadRegs(t, &regs)) return;
  AddressSpace* as = t->as.get();
  const uint64_t at = regs.rip - 1;
  if (!Planted(as, at)) {  // not ours: the task's own SIGTRAP
    t->pending_sig = SIGTRAP;
    return;
  }
  regs.rip = at;
  if (!started_ && as->image && at == t_->opt_.start_at) {
    // The start: every task is traced from now on where the filter says;
    // the ones running outside look again at their next stop.
    started_ = true;
    for (auto& [tid, o] : tasks_)
      if (o.get() != t && o->outside && o->state == Task::kRunning)
        ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  }
  if (!InFilter(as, at)) {
    // An int3 of ours where this task is not traced (the start address
    // outside the filter, or a plant of a range the maps no longer have):
    // taken out, and the task runs on over it.
    Plants* p = as->plants.get();
    const uint8_t orig = p->orig[at];
    (void)!pwrite(p->mem_fd, &orig, 1, static_cast<off_t>(at));
    p->orig.erase(at);
    NoteLifted(p, at, orig);
    as->gates.erase(at);
    as->blocks.clear();
    if (ptrace(PTRACE_SETREGS, t->id.tid, nullptr, &regs) != 0) t->have_prev = false;
    return;
  }
  GoInside(t, at);
  Plan(t, &regs, true, true);
}

// PTRACE_GET_SYSCALL_INFO's reply (linux/ptrace.h, struct
// ptrace_syscall_info; glibc's sys/ptrace.h has the request only).
struct SyscallInfo {
  uint8_t op;  // 1 entry, 2 exit, 3 seccomp
  uint8_t pad[3];
  uint32_t arch;
  uint64_t instruction_pointer;
  uint64_t stack_pointer;
  union {
    struct {
      uint64_t nr;
      uint64_t args[6];
    } entry;
    struct {
      int64_t rval;
      uint8_t is_error;
    } exit;
  };
};

void SoftBtsRun::OnOutsideSyscall(Task* t) {
  SyscallInfo info{};
  if (ptrace(PTRACE_GET_SYSCALL_INFO, t->id.tid, reinterpret_cast<void*>(sizeof info),
             &info) <= 0)
    return;
  AddressSpace* as = t->as.get();
  if (info.op == 1) {
    // As OnStepStop before a syscall instruction: mapping changes.
    user_regs_struct r{};
    r.rax = info.entry.nr;
    r.rdi = info.entry.args[0];
    r.rsi = info.entry.args[1];
    r.rdx = info.entry.args[2];
    r.r10 = info.entry.args[3];
    const uint64_t nr = r.rax;
    if (((nr == SYS_mmap || nr == SYS_mprotect || nr == SYS_pkey_mprotect) &&
         (r.rdx & PROT_EXEC) != 0) ||
        nr == SYS_munmap)
      as->maps_dirty = true;
    BeforeMapSyscall(t, r);
    return;
  }
  if (info.op == 2) {
    if (as->maps_dirty) {
      as->maps_dirty = false;
      as->cache.Clear();
      RefreshMaps(as);
    }
    // A syscall instruction inside the filter (a static program's own).
    if (InFilter(as, info.instruction_pointer)) GoInside(t, info.instruction_pointer);
  }
}

void SoftBtsRun::ReconsiderOutside(Task* t) {
  if (t->mode != kBranch) return;
  if (!filtering_) {
    if (t->outside) {
      t->outside = false;
      t->have_prev = false;
    }
    return;
  }
  user_regs_struct regs;
  if (!ReadRegs(t, &regs)) return;
  const bool in = InFilter(t->as.get(), regs.rip);
  if (t->outside && in) {
    GoInside(t, regs.rip);
  } else if (!t->outside && !in) {
    GoOutside(t, regs);
  }
}

void SoftBtsRun::OpenSwitches(Task* t) {
  if (!t_->opt_.kernel_switches) {
    t_->switch_errno_.store(-EOPNOTSUPP, std::memory_order_relaxed);
    return;
  }
  ErrorDetail d;
  const int rc = PerfSampler::OpenSwitchWatcher(
      PerfTarget::Task(t->id.tid), t_->opt_.switch_ring_pages, &t->sw, &d);
  if (rc < 0) {
    t->sw.reset();
    t_->switch_errno_.store(rc, std::memory_order_relaxed);
  }
}

// The kernel's switch records of a task under ptrace, in order: every resume
// by the tracer brings a SWITCH_IN (the task is scheduled in), every ptrace
// stop a SWITCH_OUT (it schedules out to wait for the tracer); between them,
// the switches the task made while running come in OUT/IN pairs (it must run
// again to reach the next stop). Read at each stop, the records since the
// last read are: the resume's IN, complete OUT/IN pairs, and the stop's OUT
// if the kernel wrote it already (the tracer can see a stop before the task
// has left the CPU; the next resume waits until it has). So: the first IN is
// an artifact (its CPU tells where the task ran: a change is a migration);
// a pair is real; a trailing OUT is the stop's, and when it is missing, the
// first OUT of the next read is. A lost record (PERF_RECORD_LOST) resets the
// machine to "expecting the resume's IN".
void SoftBtsRun::ReadSwitches(Task* t) {
  if (t->sw == nullptr) return;
  ErrorDetail d;
  const int rc = t->sw->Read(
      [&](const PerfRecord& r) {
        if (r.type == PERF_RECORD_LOST) {
          t->expect_in = true;
          t->out_pending = false;
          t->stop_out_due = false;
          return;
        }
        if (r.type != PERF_RECORD_SWITCH) return;
        const int cpu = static_cast<int>(r.sample_id.cpu);
        if (r.switch_out) {
          if (t->stop_out_due) {  // the previous stop's own
            t->stop_out_due = false;
            t_->switch_artifacts_.fetch_add(1, std::memory_order_relaxed);
            return;
          }
          t->out_pending = true;
          t->out_time = r.sample_id.time;
          t->out_cpu = cpu;
          t->out_preempt = r.switch_preempt;
          return;
        }
        t->stop_out_due = false;
        if (t->expect_in || !t->out_pending) {
          // The resume's switch-in.
          t->expect_in = false;
          t->out_pending = false;
          t_->switch_artifacts_.fetch_add(1, std::memory_order_relaxed);
          Migrate(t, cpu, r.sample_id.time);
          return;
        }
        t->out_pending = false;
        if (t->out_preempt && t->out_time >= t->resumed_ns &&
            t->out_time - t->resumed_ns < kTracerWakePreemptNs) {
          // Preempted by its tracer right after the resume.
          t_->switch_artifacts_.fetch_add(2, std::memory_order_relaxed);
          Migrate(t, cpu, r.sample_id.time);
          return;
        }
        // A real OUT/IN pair.
        Drain(t, t->out_time);
        ReportSwitch(t, t->out_cpu, t->out_time, false, t->out_preempt);
        ReportSwitch(t, cpu, r.sample_id.time, true, false);
        t->cpu = cpu;
      },
      &d);
  (void)rc;
  // At a stop: a pending OUT is the stop's; none yet means it is due.
  if (t->out_pending) {
    t->out_pending = false;
    t_->switch_artifacts_.fetch_add(1, std::memory_order_relaxed);
  } else if (!t->expect_in) {
    t->stop_out_due = true;
  }
  t->expect_in = true;  // the next record of substance is the resume's IN
}

SoftBtsRun::Task* SoftBtsRun::Adopt(pid_t tgid, pid_t tid, const Task* parent,
                                    bool detach, bool at_event) {
  auto task = std::make_unique<Task>();
  Task* t = task.get();
  t->id = TaskId{tgid, tid};
  tasks_[tid] = std::move(task);
  // A new process shares its creator's mm (vfork, clone with CLONE_VM) or
  // has a copy of it, int3s included.
  bool shared_mm = false;
  const bool new_process = parent != nullptr && parent->id.pid != tgid;
  if (new_process && parent->as != nullptr && parent->as->plants != nullptr) {
    const long same = syscall(SYS_kcmp, parent->id.tid, tid, KCMP_VM, 0, 0);
    shared_mm = same == 0;
  }
  if (parent != nullptr && parent->has_orig) {
    // Created on the one CPU: its own affinity is its creator's.
    t->orig_cpus = parent->orig_cpus;
    t->has_orig = true;
    t->orig_inherited = true;
  }
  if (detach) {
    t->state = Task::kDetach;
    // (Even with none planted now: some may have been lifted since the
    // fork, ChildPlants.)
    if (new_process && parent->as != nullptr && parent->as->plants != nullptr) {
      t->detach_plants = parent->as->plants;
      t->detach_shared_mm = shared_mm;
      t->detach_since = ForkSince(at_event ? parent : nullptr, parent->id.pid);
    }
    return t;
  }
  t_->tasks_seen_.fetch_add(1, std::memory_order_relaxed);
  BindTask(t, parent);
  // Threads share their process's address space; a new process gets its
  // own (a copy of the parent's code until it execs).
  for (auto& [otid, o] : tasks_)
    if (o.get() != t && o->as != nullptr && o->id.pid == tgid) {
      t->as = o->as;
      break;
    }
  if (t->as == nullptr) {
    t->as = std::make_shared<AddressSpace>(tgid, t_->opt_.decode_cache_entries);
    t_->processes_seen_.fetch_add(1, std::memory_order_relaxed);
    // The filter's ranges are the root program's, and its children's
    // until they exec (their copy of it); so are the gates they hold.
    if (parent == nullptr) {
      t->as->image = tgid == root_;
    } else if (new_process && parent->as != nullptr) {
      t->as->image = parent->as->image;
      t->as->gates = parent->as->gates;
      t->as->ret_sites = parent->as->ret_sites;
    }
    if (new_process && parent->as != nullptr && parent->as->plants != nullptr) {
      if (shared_mm) {
        t->as->SetPlants(parent->as->plants);
      } else if (std::shared_ptr<Plants> copy = ChildPlants(
                     tgid, *parent->as->plants,
                     ForkSince(at_event ? parent : nullptr, parent->id.pid))) {
        t->as->SetPlants(std::move(copy));  // fork copied them too
      }
    }
    RefreshMaps(t->as.get());
  }
  ++t->as->tasks;
  t->stat_fd = open(("/proc/" + std::to_string(tid) + "/stat").c_str(),
                    O_RDONLY | O_CLOEXEC);
  t->cpu = t->stat_fd >= 0 ? ReadCpu(t->stat_fd) : -1;
  if (t->cpu < 0) t->cpu = parent != nullptr ? parent->cpu : 0;
  if (t_->opt_.branch_step && !dbg_.active && !ShadowStack(tid)) {
    t->mode = kBranch;
  } else if (t_->opt_.try_singleblock && !dbg_.active) {
    t->mode = kBlockProbe;
    t->probe_left = 64;
  }
  OpenSwitches(t);
  UpdateTaskCount();
  const uint64_t now = NowNs();
  if (parent != nullptr) t_->core_->TaskCreated(parent->id, t->id, now);
  t_->core_->ContextSwitch(t->cpu, now, TaskId{}, t->id, false);
  ReportBound(t);  // after TaskCreated: pfmd knows no task before that
  return t;
}

void SoftBtsRun::ForgetTask(pid_t tid) {
  auto it = tasks_.find(tid);
  if (it == tasks_.end()) return;
  Task* t = it->second.get();
  if (t->held) --held_;
  if (t->stat_fd >= 0) close(t->stat_fd);
  if (t->as != nullptr && --t->as->tasks == 0) {
    std::lock_guard<std::mutex> lk(t_->mu_);
    if (t->as->pid != root_) {
      t_->maps_.erase(t->as->pid);
      t_->maps_cut_.erase(t->as->pid);
    }
  }
  if (last_writer_ == t->id) last_area_ = nullptr;
  tasks_.erase(it);
  UpdateTaskCount();
}

void SoftBtsRun::Gone(Task* t, int64_t status) {
  if (t->state == Task::kDetach) {
    ForgetTask(t->id.tid);
    return;
  }
  const uint64_t now = NowNs();
  Drain(t, now);
  if (t->id.tid == root_) root_status_ = status;
  t_->core_->TaskExit(t->id, now, status);
  const bool root = t->id.tid == root_;
  ForgetTask(t->id.tid);
  if (root && dbg_.active && dbg_.events) {
    // The process is gone (its main thread's status comes last).
    DebugStopEvent e;
    if (status >= 0 && WIFSIGNALED(status)) {
      e.kind = DebugStopEvent::kKilled;
      e.signo = WTERMSIG(status);
    } else {
      e.kind = DebugStopEvent::kExited;
      e.exit_code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    dbg_.stopping = false;
    dbg_.stopped = true;
    dbg_.events(e);
  }
}

void SoftBtsRun::OnStepStop(Task* t, const user_regs_struct* pre) {
  const pid_t tid = t->id.tid;
  user_regs_struct regs;
  bool have_regs = false;
  uint64_t rip = 0;
  // Whether the instruction just stepped was a syscall (or another trap).
  const bool stepped_trap =
      t->have_prev && t->prev_ok && t->prev_insn.kind == BranchKind::kTrap;
  const bool computed = pre == nullptr && CanComputeRip(t);
  if (computed) {
    // A plain step over a sequential instruction: RIP moved by its length.
    // Nothing to record (it is not a branch).
    rip = t->prev_rip + t->prev_insn.length;
    ++t->run;
    t_->computed_.fetch_add(1, std::memory_order_relaxed);
    if (t_->opt_.verify_computed_rip) {
      if (ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) {
        t->have_prev = false;
        return;
      }
      have_regs = true;
      if (regs.rip != rip) {
        t_->mispredictions_.fetch_add(1, std::memory_order_relaxed);
        rip = regs.rip;
      }
    }
  } else {
    if (pre != nullptr) {
      regs = *pre;
    } else if (!ReadRegs(t, &regs)) {
      t->have_prev = false;
      return;
    }
    have_regs = true;
    rip = regs.rip;
  }
  t_->steps_.fetch_add(1, std::memory_order_relaxed);
  AddressSpace* as = t->as.get();
  if (as->maps_dirty) {  // never with a computed RIP: CanComputeRip refuses
    as->maps_dirty = false;
    as->cache.Clear();
    RefreshMaps(as);
  }
  if (t->have_prev && !computed) {
    if (t->mode == kBlockProbe && t->prev_ok &&
        t->prev_insn.kind == BranchKind::kNone) {
      // After a non-branch, PTRACE_SINGLEBLOCK either stopped at the
      // fall-through (it stepped one instruction: branch-trap not honoured)
      // or ran on to a branch target (honoured). Until such a step is seen
      // the probe is processed as a single step, so nothing is lost.
      if (rip == t->prev_rip + t->prev_insn.length) {
        t->mode = kStep;
      } else {
        t->mode = kBlock;
        t_->singleblock_.store(true, std::memory_order_relaxed);
      }
    } else if (t->mode == kBlockProbe && --t->probe_left <= 0) {
      t->mode = kStep;
    }
    if (t->mode == kBlock) {
      const uint64_t from = BlockBranchFrom(t, t->prev_rip, rip);
      if (from != 0) Record(t, from, rip);
    } else if (t->prev_ok) {
      if (t->prev_computed && !Reachable(t->prev_insn, t->prev_rip, rip)) {
        // The chain of computed RIPs that led to prev_rip went wrong
        // somewhere: a record from prev_rip would be invented.
        t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
      } else if (BranchTaken(t->prev_insn, t->prev_rip, rip)) {
        NoteCall(t, t->prev_insn, t->prev_rip);
        Record(t, t->prev_rip, rip);
      }
    } else if (rip < t->prev_rip || rip > t->prev_rip + 15) {
      // Unreadable or undecodable code that moved RIP beyond any length it
      // could have: the best soft BTS can say is that it branched.
      Record(t, t->prev_rip, rip);
    }
  }
  if (rip < t->region.start || rip >= t->region.end) FindRegion(t, rip);
  bool ok = false;
  const DecodedInsn* insn = &as->cache.Get(tid, rip, &ok);
  if (ok && insn->kind == BranchKind::kTrap) {
    if (!have_regs) {
      // The mmap check below needs the syscall's arguments; the read also
      // checks the chain of computed RIPs that led here.
      if (!ReadRegs(t, &regs)) {
        t->have_prev = false;
        return;
      }
      have_regs = true;
      if (regs.rip != rip) {
        t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
        rip = regs.rip;
        FindRegion(t, rip);
        insn = &as->cache.Get(tid, rip, &ok);
      }
    }
    if (ok && insn->kind == BranchKind::kTrap) {
      const uint64_t nr = regs.rax;
      const bool exec_prot = (regs.rdx & PROT_EXEC) != 0;
      if (((nr == SYS_mmap || nr == SYS_mprotect || nr == SYS_pkey_mprotect) &&
           exec_prot) ||
          nr == SYS_munmap)
        as->maps_dirty = true;  // refreshed at the stop after the syscall
      if (t->mode == kBranch) BeforeMapSyscall(t, regs);
      NoteAffinityCall(t, regs);
    }
  }
  t->prev_insn = *insn;
  t->prev_ok = ok;
  t->prev_rip = rip;
  t->prev_computed = !have_regs;
  t->have_prev = true;
  PollCpu(t, false);
  if (t->mode == kBranch && have_regs) {
    // A syscall that is to be restarted moves RIP back onto it only after
    // this stop (arch_do_signal_or_restart), so its registers are not
    // final: no emulation, and no native run from a RIP that will change.
    const int64_t rax = static_cast<int64_t>(regs.rax);
    if (stepped_trap && rax >= -516 && rax <= -512) return;  // -ERESTART*
    Plan(t, &regs, false, !stepped_trap);
  }
}

uint64_t SoftBtsRun::BlockBranchFrom(Task* t, uint64_t start, uint64_t to) {
  uint64_t at = start;
  for (int i = 0; i < 4096; ++i) {
    bool ok = false;
    const DecodedInsn& d = t->as->cache.Get(t->id.tid, at, &ok);
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

// ---------------------------------------------------------------------------
// Branch stepping (SoftBtsOptions::branch_step, docs/host_drivers.md).

std::shared_ptr<SoftBtsRun::Plants> SoftBtsRun::NewPlants(pid_t pid) {
  auto p = std::make_shared<Plants>();
  p->mem_fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  if (p->mem_fd < 0) return nullptr;
  return p;
}

bool SoftBtsRun::Plant(AddressSpace* as, uint64_t addr) {
  if (as->plants == nullptr) {
    std::shared_ptr<Plants> p = NewPlants(as->pid);
    if (p == nullptr) return false;
    as->SetPlants(std::move(p));
  }
  Plants* p = as->plants.get();
  if (p->orig.count(addr) != 0) return true;
  uint8_t orig = 0;
  if (pread(p->mem_fd, &orig, 1, static_cast<off_t>(addr)) != 1) return false;
  const uint8_t int3 = 0xCC;
  if (orig == int3) return false;  // its own int3 (or one not ours): never
  if (pwrite(p->mem_fd, &int3, 1, static_cast<off_t>(addr)) != 1) return false;
  p->orig.emplace(addr, orig);
  t_->planted_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void SoftBtsRun::LiftPlants(Plants* p, uint64_t start, uint64_t end) {
  if (p == nullptr || p->orig.empty()) return;
  std::vector<std::pair<uint64_t, uint8_t>> lifted;
  for (auto it = p->orig.begin(); it != p->orig.end();) {
    if (end != 0 && (it->first < start || it->first >= end)) {
      ++it;
      continue;
    }
    uint8_t now = 0;
    // Only an int3 still there is ours to take back (the code may be gone).
    if (pread(p->mem_fd, &now, 1, static_cast<off_t>(it->first)) == 1 && now == 0xCC)
      (void)!pwrite(p->mem_fd, &it->second, 1, static_cast<off_t>(it->first));
    lifted.emplace_back(it->first, it->second);
    it = p->orig.erase(it);
  }
  if (lifted.empty()) return;
  ++lift_gen_;
  PruneLifted(p);
  for (const auto& [a, orig] : lifted) p->lifted[a] = Plants::Lifted{lift_gen_, orig};
  std::sort(lifted.begin(), lifted.end());
  for (auto& [tid, o] : tasks_) {
    if (o->as == nullptr || o->as->plants.get() != p) continue;
    o->as->blocks.clear();  // blocks ending at a lifted int3 must not run natively
    if (o->state == Task::kRunning && o->bs_conted &&
        std::binary_search(lifted.begin(), lifted.end(), std::make_pair(o->bs_expect, uint8_t{0}),
                           [](const auto& a, const auto& b) { return a.first < b.first; })) {
      // It runs towards an int3 that is gone: stop it and plan again.
      ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
      t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void SoftBtsRun::PruneLifted(Plants* p) {
  if (p->lifted.size() <= 65536) return;
  // A task that ran when one of these was lifted has long since stopped
  // (and a fork that began before it has long been met).
  for (auto it = p->lifted.begin(); it != p->lifted.end();)
    it = it->second.gen + 4096 < lift_gen_ ? p->lifted.erase(it) : std::next(it);
}

void SoftBtsRun::NoteLifted(Plants* p, uint64_t at, uint8_t orig) {
  ++lift_gen_;
  PruneLifted(p);
  p->lifted[at] = Plants::Lifted{lift_gen_, orig};
}

std::shared_ptr<SoftBtsRun::Plants> SoftBtsRun::ChildPlants(pid_t child, const Plants& from,
                                                         uint64_t since) {
  std::shared_ptr<Plants> own = NewPlants(child);
  if (own == nullptr) return nullptr;
  std::vector<std::pair<uint64_t, uint8_t>> cand(from.orig.begin(), from.orig.end());
  for (const auto& [a, l] : from.lifted)
    if (l.gen > since && from.orig.count(a) == 0) cand.emplace_back(a, l.orig);
  std::sort(cand.begin(), cand.end());
  // The child's bytes, a page at a time (int3s cluster in the hot code).
  constexpr uint64_t kPage = 4096;
  uint8_t page[kPage];
  uint64_t have = 1;  // no page read yet (page addresses are aligned)
  ssize_t got = 0;
  for (const auto& [a, orig] : cand) {
    const uint64_t base = a & ~(kPage - 1);
    if (base != have) {
      got = pread(own->mem_fd, page, kPage, static_cast<off_t>(base));
      have = base;
    }
    const uint64_t off = a - base;
    if (got > 0 && off < static_cast<uint64_t>(got) && page[off] == 0xCC) own->orig.emplace(a, orig);
  }
  return own;
}

uint64_t SoftBtsRun::ForkSince(const Task* creator, pid_t pid) const {
  if (creator != nullptr) return creator->conted_gen;
  // A thread not yet at its first stop has not run.
  uint64_t since = UINT64_MAX;
  for (const auto& [tid, o] : tasks_)
    if (o->id.pid == pid && o->state != Task::kNew) since = std::min(since, o->conted_gen);
  return since == UINT64_MAX ? 0 : since;
}

void SoftBtsRun::SetUpBinding() {
  // With address filters a thread runs outside them at full speed, stopped
  // only at syscalls: no ping-pong there to save, parallelism to lose.
  if (!t_->opt_.bind_cpu || filtering_) return;
  cpu_set_t root;
  CPU_ZERO(&root);
  if (sched_getaffinity(root_, sizeof(root), &root) != 0) return;
  if (CPU_COUNT(&root) < 2) return;  // nothing to gain
  CPU_ZERO(&tracer_affinity_);
  if (sched_getaffinity(0, sizeof(tracer_affinity_), &tracer_affinity_) != 0) return;
  int cpu = t_->opt_.cpu;
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &root)) cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &root)) {
    cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c)
      if (CPU_ISSET(c, &root)) cpu = c;
  }
  if (cpu < 0) return;
  CPU_ZERO(&bound_affinity_);
  CPU_SET(cpu, &bound_affinity_);
  bind_cpu_ = cpu;
  struct stat mine {}, theirs {};
  same_pid_ns_ = stat("/proc/thread-self/ns/pid", &mine) == 0 &&
                 stat(("/proc/" + std::to_string(root_) + "/ns/pid").c_str(), &theirs) == 0 &&
                 mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

void SoftBtsRun::BindTask(Task* t, const Task* creator) {
  if (bind_cpu_ < 0 || detaching_ || state_attaching_ || t->bound ||
      t->state == Task::kDetach)
    return;
  if (!tracer_bound_) {
    // This thread first (a cpuset that forbids the CPU: no binding).
    if (sched_setaffinity(0, sizeof(bound_affinity_), &bound_affinity_) != 0) return;
    tracer_bound_ = true;
    t_->bound_cpu_.store(bind_cpu_, std::memory_order_relaxed);
  }
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(t->id.tid, sizeof(now), &now) != 0) return;
  const bool inherited = creator != nullptr && creator->has_orig && CPU_EQUAL(&now, &bound_affinity_);
  if (!inherited) {
    if (sched_setaffinity(t->id.tid, sizeof(bound_affinity_), &bound_affinity_) != 0) return;
    t->orig_cpus = now;
  }
  t->has_orig = true;  // (inherited: set by Adopt from the creator)
  t->orig_inherited = inherited;
  t->bound = true;
}

void SoftBtsRun::ReportBound(const Task* t) {
  if (t->bound && t_->opt_.on_bound) t_->opt_.on_bound(t->id, bind_cpu_, t->orig_cpus);
}

void SoftBtsRun::NoteAffinityCall(Task* t, const user_regs_struct& regs) {
  if (bind_cpu_ < 0 || (regs.rax != SYS_sched_getaffinity && regs.rax != SYS_sched_setaffinity))
    return;
  // x86-64's `syscall` (0F 05) only: `int 0x80` and `sysenter` take the
  // i386 numbers, where these two are other calls.
  bool ok = false;
  const uint8_t* bytes = nullptr;
  const DecodedInsn& d = t->as->cache.Get(t->id.tid, regs.rip, &ok, &bytes);
  if (!ok || bytes == nullptr || d.length != 2 || bytes[0] != 0x0f || bytes[1] != 0x05) return;
  t->aff_rip = regs.rip;
  t->aff_nr = regs.rax;
}

void SoftBtsRun::FinishAffinityCall(Task* t) {
  user_regs_struct regs;
  if (ptrace(PTRACE_GETREGS, t->id.tid, nullptr, &regs) != 0) return;
  if (regs.rip == t->aff_rip) return;  // not run yet (a signal came first)
  const uint64_t at = t->aff_rip, nr = t->aff_nr;
  t->aff_rip = 0;
  if (regs.rip != at + 2) return;  // `syscall` is 2 bytes; elsewhere: not run
  const int64_t ret = static_cast<int64_t>(regs.rax);
  const pid_t who = static_cast<pid_t>(regs.rdi);
  // Another task named by its pid as the program sees it: the same as ours
  // only in this thread's pid namespace.
  Task* target = who == 0 ? t : same_pid_ns_ ? Find(who) : nullptr;
  if (ret < 0 || target == nullptr || !target->bound) return;
  if (nr == SYS_sched_getaffinity) {
    // The kernel copied `ret` bytes of the one-CPU mask: the task's own
    // instead (glibc zeroes the rest of the caller's buffer).
    const size_t n = std::min(static_cast<size_t>(ret), sizeof(target->orig_cpus));
    iovec local{&target->orig_cpus, n};
    iovec remote{reinterpret_cast<void*>(regs.rdx), n};
    (void)process_vm_writev(t->id.tid, &local, 1, &remote, 1, 0);
    return;
  }
  // sched_setaffinity succeeded: what it set (as the kernel applied it) is
  // the task's own now, and it goes back on the one CPU.
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(target->id.tid, sizeof(now), &now) != 0) return;
  target->orig_cpus = now;
  if (!CPU_EQUAL(&now, &bound_affinity_) &&
      sched_setaffinity(target->id.tid, sizeof(bound_affinity_), &bound_affinity_) != 0) {
    target->bound = false;  // (its cpuset forbids the CPU now) it runs where it chose
    return;
  }
  target->orig_inherited = false;
  ReportBound(target);
}

void SoftBtsRun::UnbindTracer() {
  if (!tracer_bound_) return;
  (void)sched_setaffinity(0, sizeof(tracer_affinity_), &tracer_affinity_);
  tracer_bound_ = false;
  t_->bound_cpu_.store(-1, std::memory_order_relaxed);
}

void SoftBtsRun::Unbind(pid_t tid, const cpu_set_t& orig) {
  if (bind_cpu_ < 0) return;
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(tid, sizeof(now), &now) != 0 || !CPU_EQUAL(&now, &bound_affinity_)) return;
  (void)sched_setaffinity(tid, sizeof(orig), &orig);
}

void SoftBtsRun::LiftAll() {
  std::set<Plants*> all;
  for (auto& [tid, t] : tasks_)
    if (t->as != nullptr && t->as->plants != nullptr) all.insert(t->as->plants.get());
  for (Plants* p : all) LiftPlants(p, 0, 0);
}

bool SoftBtsRun::UndoInt3(Task* t) {
  if (t->as == nullptr) return false;
  user_regs_struct regs;
  if (ptrace(PTRACE_GETREGS, t->id.tid, nullptr, &regs) != 0) return false;
  const uint64_t at = regs.rip - 1;
  if (!OwnLiftedTrap(t, at) && !StoppedByPlant(t, at)) return false;
  regs.rip = at;
  return ptrace(PTRACE_SETREGS, t->id.tid, nullptr, &regs) == 0;
}

void SoftBtsRun::BeforeMapSyscall(Task* t, const user_regs_struct& regs) {
  AddressSpace* as = t->as.get();
  const uint64_t nr = regs.rax;
  const uint64_t addr = regs.rdi;
  const uint64_t len = regs.rsi;
  switch (nr) {
    case SYS_mmap:
      if (addr == 0 || (regs.r10 & MAP_FIXED) == 0) return;  // never over a mapping
      break;
    case SYS_munmap:
    case SYS_mprotect:
    case SYS_pkey_mprotect:
    case SYS_mremap:   // moves pages, int3s included
    case SYS_madvise:  // MADV_DONTNEED and friends drop the copied pages
      break;
    default:
      return;
  }
  // Protection, mapping or page changes: the code there may become
  // writable, move or revert to the file's bytes. Take the int3s out first
  // and see the mappings again after the syscall.
  as->maps_dirty = true;
  const uint64_t page = 4096;
  const uint64_t start = addr & ~(page - 1);
  const uint64_t end = len > PFM_X86_USER_ADDR_END ? PFM_X86_USER_ADDR_END
                                                   : ((addr + len + page - 1) & ~(page - 1));
  if (as->plants != nullptr && end > start) LiftPlants(as->plants.get(), start, end);
}

uint64_t SoftBtsRun::BlockEnd(Task* t, uint64_t start) {
  AddressSpace* as = t->as.get();
  auto hit = as->blocks.find(start);
  if (hit != as->blocks.end()) return hit->second;
  uint64_t end = 0;
  if (start < t->region.start || start >= t->region.end) FindRegion(t, start);
  if (t->region.trusted && !as->maps_dirty) {
    uint64_t at = start;
    for (int i = 0; i < 4096; ++i) {
      bool ok = false;
      const uint8_t* bytes = nullptr;
      const DecodedInsn& d = as->cache.Get(t->id.tid, at, &ok, &bytes);
      if (!ok || at + d.length > t->region.end) break;
      if (d.kind == BranchKind::kNone) {
        if (!d.native) break;
        at += d.length;
        continue;
      }
      if (CanEmulateBranch(bytes, d.length, d)) end = at;
      break;
    }
  }
  as->blocks.emplace(start, end);
  return end;
}

void SoftBtsRun::Plan(Task* t, user_regs_struct* regs, bool dirty, bool may_emulate) {
  constexpr uint64_t kTrapFlag = 0x100;  // RFLAGS.TF
  AddressSpace* as = t->as.get();
  const pid_t tid = t->id.tid;
  if (t->bs_replant != 0) {
    Plant(as, std::exchange(t->bs_replant, 0));
  }
  t->bs_cont = false;
  bool left = false;
  for (int i = 0; i < 256; ++i) {
    const uint64_t r = regs->rip;
    if (filtering_ && !InFilter(as, r)) {
      GoOutside(t, *regs);
      left = true;
      break;
    }
    const uint64_t e = BlockEnd(t, r);
    if (e == 0) break;
    // Standing on an int3 of ours that is not this block's branch (an
    // address filter's gate): single-step it first.
    if (e != r && Planted(as, r)) break;
    if (e != r) {
      if (!Plant(as, e)) break;
      t->bs_cont = true;
      t->bs_expect = e;
      t->have_prev = false;  // the next stop is the int3's (or a signal's)
      break;
    }
    if (!may_emulate || as->plants == nullptr) break;
    bool ok = false;
    const uint8_t* bytes = nullptr;
    const DecodedInsn& d = as->cache.Get(tid, r, &ok, &bytes);
    if (!ok) break;
    MemFdMemory mem(as->plants->mem_fd);
    bool taken = false;
    if (EmulateBranch(bytes, d.length, d, regs, &mem, &taken) != EmuResult::kDone) break;
    dirty = true;
    t_->emulated_.fetch_add(1, std::memory_order_relaxed);
    if (BranchTaken(d, r, regs->rip)) {
      NoteCall(t, d, r);
      Record(t, r, regs->rip);
    }
  }
  if (!t->bs_cont && !left) {
    // Single-step from here, as the single-step tracer does (OnStepStop
    // records its branch). An int3 of ours under RIP is lifted for the
    // step and planted again at the next stop.
    const uint64_t r = regs->rip;
    if (Planted(as, r)) {
      Plants* p = as->plants.get();
      const uint8_t orig = p->orig[r];
      if (pwrite(p->mem_fd, &orig, 1, static_cast<off_t>(r)) == 1) {
        p->orig.erase(r);
        NoteLifted(p, r, orig);
        t->bs_replant = r;
      }
    }
    if (r < t->region.start || r >= t->region.end) FindRegion(t, r);
    bool ok = false;
    t->prev_insn = as->cache.Get(tid, r, &ok);
    t->prev_ok = ok;
    t->prev_rip = r;
    t->prev_computed = false;
    t->have_prev = true;
  }
  if ((t->bs_cont || left) && (regs->eflags & kTrapFlag) != 0) {
    // A single-stepped POPF (or IRET) left the trap flag it pushed while
    // being stepped; the kernel then takes it for the task's own and keeps
    // it across PTRACE_CONT, which would trap after the next instruction.
    regs->eflags &= ~kTrapFlag;
    dirty = true;
  }
  if (dirty && ptrace(PTRACE_SETREGS, tid, nullptr, regs) != 0) {
    t->have_prev = false;
    t->bs_cont = false;
  }
}

void SoftBtsRun::OnBranchModeTrap(Task* t) {
  user_regs_struct regs;
  if (!ReadRegs(t, &regs)) {
    t->have_prev = false;
    return;
  }
  const uint64_t at = regs.rip - 1;
  // The int3 may have been lifted after the task ran into it (LiftPlants:
  // a mapping change or a code write, then an interrupt, whose stop comes
  // first: see PTRACE_EVENT_STOP in Handle): the trap is still ours, as
  // UndoInt3 takes it (OwnLiftedTrap).
  bool ours = StoppedByPlant(t, at) || OwnLiftedTrap(t, at);
  if (!t->bs_conted) {
    // A single-step. Another thread may have planted an int3 where this one
    // was to step after its step was planned: the step ran the int3 (RIP
    // one past it), and the int3 may even have been lifted again since.
    // Or the step ran a 1-byte instruction there and an int3 was planted
    // after it. Only the signal tells which (seen with testdata/fork_lift.c
    // before 2026-11-27: the trap taken for the step's end, the task ran on
    // from the middle of a jmp and died of SIGSEGV).
    const Plants* p = t->as->plants.get();
    bool lifted_since = false;
    if (p != nullptr && (!t->have_prev || t->prev_rip == at)) {
      auto it = p->lifted.find(at);
      lifted_since = it != p->lifted.end() && it->second.gen > t->conted_gen;
    }
    if (ours || lifted_since) ours = TrapWasInt3(t);
  }
  if (ours) {
    // Stopped by an int3 of ours: the task stands on the branch at `at`.
    if (t->bs_conted && at != t->bs_expect && t->as->gates.count(at) == 0)
      t_->resyncs_.fetch_add(1, std::memory_order_relaxed);  // ran past the block's end
    t_->branch_stops_.fetch_add(1, std::memory_order_relaxed);
    regs.rip = at;
    Plan(t, &regs, true, true);
    return;
  }
  if (t->bs_conted) {
    // A SIGTRAP while running freely that no int3 of ours raised: sent to
    // it (its own int3s are never run freely: a block ends before a trap).
    // The task's signal.
    t->have_prev = false;
    t->pending_sig = SIGTRAP;
    return;
  }
  OnStepStop(t, &regs);
}

void SoftBtsRun::Resume(Task* t) {
  if (t->state != Task::kStopped || t->dbg_stopped) return;
  if (t_->core_->TaskHeld(t->id)) {
    if (!t->held) {
      t->held = true;
      ++held_;
    }
    return;
  }
  if (t->held) {
    t->held = false;
    --held_;
  }
  const auto req = t->vfork_child != 0 ? PTRACE_CONT
                   : t->mode == kBranch ? (t->outside  ? PTRACE_SYSCALL
                                          : t->bs_cont ? PTRACE_CONT
                                                       : PTRACE_SINGLESTEP)
                   : t->mode == kStep ? PTRACE_SINGLESTEP
                                      : PTRACE_SINGLEBLOCK;
  t->bs_conted = req == PTRACE_CONT && t->vfork_child == 0;
  t->conted_gen = lift_gen_;
  if (t->sw != nullptr) t->resumed_ns = NowNs();
  if (ptrace(req, t->id.tid, nullptr,
             reinterpret_cast<void*>(long(t->pending_sig))) != 0) {
    if ((t->mode == kBlock || t->mode == kBlockProbe) && errno == EIO) {  // no SINGLEBLOCK
      t->mode = kStep;
      Resume(t);
      return;
    }
    // ESRCH: killed (SIGKILL) while stopped; its exit is collected later.
  }
  t->pending_sig = 0;
  t->state = Task::kRunning;
}

void SoftBtsRun::RetryHeld() {
  if (held_ == 0) return;
  std::vector<Task*> held;
  for (auto& [tid, t] : tasks_)
    if (t->held) held.push_back(t.get());
  for (Task* t : held) Resume(t);
}

void SoftBtsRun::OnExec(Task* t) {
  // The exec'ing thread carries on as the process's leader (tid == pid);
  // the other threads are gone (their exits come as exit statuses, except
  // the old leader's when another thread exec'd: the exec'ing one took its
  // tid).
  const uint64_t now = NowNs();
  Drain(t, now);
  auto as = std::make_shared<AddressSpace>(t->id.pid, t_->opt_.decode_cache_entries);
  --t->as->tasks;
  t->as = as;
  ++as->tasks;
  t->region = Region();
  t->have_prev = false;
  RefreshMaps(as.get());
  t_->core_->TaskExec(t->id, now);
}

void SoftBtsRun::Handle(pid_t tid, int st) {
  Task* t = Find(tid);
  const bool gone = WIFEXITED(st) || WIFSIGNALED(st);
  if (t == nullptr) {
    if (gone || !WIFSTOPPED(st)) return;  // not one of ours any more
    // An auto-attached child whose first stop came before its parent's
    // event: who it is comes from /proc.
    pid_t tgid = 0, ppid = 0;
    if (!ReadTaskIds(tid, &tgid, &ppid)) return;
    // (Its process's main thread if traced, as the likeliest creator: its
    // event, when it comes, names the creator, and the affinity it
    // inherited is corrected then.)
    const Task* parent = nullptr;
    for (auto& [otid, o] : tasks_)
      if (o->state != Task::kDetach &&
          (o->id.pid == tgid || (parent == nullptr && o->id.pid == ppid)) &&
          !(parent != nullptr && parent->id.pid == tgid && parent->id.tid == tgid))
        parent = o.get();
    const bool thread = parent != nullptr && parent->id.pid == tgid;
    t = Adopt(tgid, tid, parent, !thread && !t_->opt_.inherit, false);
    t_->children_first_.fetch_add(1, std::memory_order_relaxed);
  }
  if (gone) {
    Gone(t, st);
    return;
  }
  if (!WIFSTOPPED(st)) return;
  const int sig = WSTOPSIG(st);
  const int event = st >> 16;
  if (t->state == Task::kDetach) {
    LetGoUnfollowed(t);
    return;
  }
  const bool first = t->state == Task::kNew;
  t->state = Task::kStopped;
  t->status = st;
  if (t->aff_rip != 0) FinishAffinityCall(t);
  t->vfork_child = 0;
  t->bs_cont = false;  // single-step on unless Plan finds a block to run
  ReadSwitches(t);
  if (first) {  // its attach stop
    if (dbg_.active && t->id.pid == root_) {
      // A thread created under the debugger gets its hardware points (a
      // thread the kernel has no free register for goes without).
      std::string err;
      for (size_t i = 0; i < dbg_.hw.size(); ++i) DebugArmHw(t, i, &err);
    }
    if (DebugOnStop(t, StopCause::kOther, 0)) return;
    if (filtering_) ReconsiderOutside(t);
    Resume(t);
    return;
  }
  StopCause cause = StopCause::kOther;
  bool outside_seen = false;  // a stop of the outside run handled
  switch (event) {
    case PTRACE_EVENT_CLONE:
    case PTRACE_EVENT_FORK:
    case PTRACE_EVENT_VFORK: {
      unsigned long child = 0;
      ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child);
      const pid_t c = static_cast<pid_t>(child);
      // Not adopted again when its own first stop came first and it is
      // gone or let go since (a task that would never stop, which
      // DetachAll would wait for): only a task this thread traces.
      if (Task* ct = c > 0 ? Find(c) : nullptr;
          ct != nullptr && ct->orig_inherited && t->has_orig) {
        // Adopted at its own first stop, before this event, from a guessed
        // creator (Handle): the affinity it inherited is this task's.
        ct->orig_cpus = t->orig_cpus;
        ReportBound(ct);
      }
      if (c > 0 && Find(c) == nullptr && TracerOf(c) == static_cast<pid_t>(::gettid())) {
        pid_t tgid = 0, ppid = 0;
        const bool thread = event == PTRACE_EVENT_CLONE &&
                            ReadTaskIds(c, &tgid, &ppid) && tgid == t->id.pid;
        const pid_t pid_of = thread ? t->id.pid : c;
        Adopt(pid_of, c, t, !thread && !t_->opt_.inherit, true);
      }
      if (event == PTRACE_EVENT_VFORK && c > 0) t->vfork_child = c;
      t->have_prev = false;
      break;
    }
    case PTRACE_EVENT_VFORK_DONE:
      // Its vfork child exec'd or exited: it runs again from here (on its
      // way out of the syscall), stepped as before the vfork.
      t->have_prev = false;
      break;
    case PTRACE_EVENT_EXEC: {
      unsigned long former = 0;
      ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &former);
      if (static_cast<pid_t>(former) != tid) {
        // Another thread exec'd: it now has the leader's tid. The old
        // leader's task is this one; the exec'ing thread's is gone.
        if (Task* f = Find(static_cast<pid_t>(former))) {
          if (f->has_orig) {  // its affinity, not the old leader's
            t->orig_cpus = f->orig_cpus;
            t->has_orig = true;
            t->orig_inherited = f->orig_inherited;
            ReportBound(t);
          }
          Gone(f, 0);
        }
      }
      OnExec(t);
      user_regs_struct regs;
      t->exec_entry = ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 ? regs.rip : 0;
      cause = StopCause::kExec;
      break;
    }
    case PTRACE_EVENT_STOP:
      // The tracer's own PTRACE_INTERRUPT (a debugger stopping the
      // process): the step chain holds (an instruction completed before it
      // still reports its SIGTRAP after the resume).
      if (sig == SIGTRAP) {
        if (t->bs_conted && SigtrapPending(tid) &&
            ptrace(PTRACE_CONT, tid, nullptr, nullptr) == 0) {
          // Interrupted just after running into an int3 of ours: the
          // kernel reports the interrupt before it dequeues the trap's
          // SIGTRAP (get_signal() takes job-control traps first), so RIP
          // is one past the int3, in the middle of the branch instruction.
          // Planned from there, or shown to a debugger and resumed from
          // there, the task would run the branch's operand bytes as code
          // (seen in CI: GDB attached beside a lossless profiler, the
          // program died of SIGSEGV at call+4). Resumed, it runs nothing
          // before that SIGTRAP is delivered, and the SIGTRAP stop is
          // handled as the int3 stop it is (RIP back onto the branch).
          t->state = Task::kRunning;
          return;
        }
        cause = StopCause::kInterrupt;
        break;
      }
      t->have_prev = false;
      if (GroupStopSignal(sig)) {
        // Honour job control: stay stopped until SIGCONT (or Stop()).
        ptrace(PTRACE_LISTEN, tid, nullptr, nullptr);
        t->state = Task::kListening;
        return;
      }
      break;
    case 0:
      if (sig == (SIGTRAP | 0x80)) {  // a syscall stop (running outside a filter)
        if (t->outside) OnOutsideSyscall(t);
        outside_seen = true;
        break;
      }
      if (sig == SIGTRAP && t->outside) {
        OnOutsideTrap(t);
        outside_seen = true;
        cause = StopCause::kStep;
        break;
      }
      if (sig == SIGTRAP && t->bs_conted && t->mode != kBranch && UndoInt3(t)) {
        // Ran into an int3 after debug control turned branch stepping off.
        t->have_prev = false;
        cause = StopCause::kOther;
        break;
      }
      if (sig == SIGTRAP) {
        if (const uint64_t entry = std::exchange(t->exec_entry, 0); entry != 0) {
          user_regs_struct regs;
          if (ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 && regs.rip == entry) {
            // The trap at the exec's syscall exit: nothing ran, the chain
            // stays anchored at the entry point, and a debugger's step
            // from the exec stop is still to come.
            cause = StopCause::kOther;
            break;
          }
        }
        if (t->mode == kBranch)
          OnBranchModeTrap(t);
        else
          OnStepStop(t);
        cause = StopCause::kStep;
        break;
      }
      cause = StopCause::kSignal;
      // Signal-delivery-stop: the instruction at RIP did not complete.
      t->have_prev = false;
      if (FatalLooking(sig)) {
        const uint64_t now = NowNs();
        Drain(t, now);
        t_->core_->TaskSignaled(t->id, now, sig);
      }
      t->pending_sig = sig;
      break;
    default:
      t->have_prev = false;
  }
  // Any other stop of a task running outside the filter: it may be inside
  // now (the start was reached, an exec, a signal handler).
  if (t->outside && !outside_seen) ReconsiderOutside(t);
  if (DebugOnStop(t, cause, sig)) return;
  Resume(t);
}

void SoftBtsRun::LetGoUnfollowed(Task* t) {
  // A process we do not follow: let go at its first stop, without the
  // int3s it inherited.
  const pid_t tid = t->id.tid;
  if (t->detach_plants != nullptr) {
    if (t->detach_shared_mm) {
      // vfork: the int3s are its parent's too. Taken out for both (the
      // parent's threads plan again); planted anew when needed.
      LiftPlants(t->detach_plants.get(), 0, 0);
    } else if (std::shared_ptr<Plants> own =
                   ChildPlants(tid, *t->detach_plants, t->detach_since)) {
      LiftPlants(own.get(), 0, 0);
    }
    t->detach_plants.reset();
  }
  // Created by a bound task, it inherited the one CPU: the affinity it
  // would have had untraced.
  if (t->has_orig) Unbind(tid, t->orig_cpus);
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  ForgetTask(tid);
}

bool SoftBtsRun::DetachFromStop(Task* t, int sig) {
  const pid_t tid = t->id.tid;
  int st = t->status;
  // A syscall that exits with the trap flag set queues a SIGTRAP for the
  // tracee (x86 user_single_step_report); if we detach at an event-stop
  // that came first, the trap would be delivered untraced and kill it.
  // Let it arrive while still traced and drop it.
  // Not at a vfork event: no step trap can be queued there yet, and a CONT
  // would put the task to sleep until its (perhaps stopped) child execs.
  for (int i = 0; i < 4 && (st >> 16) != 0 && (st >> 16) != PTRACE_EVENT_VFORK &&
                  SigtrapPending(tid);
       ++i) {
    if (ptrace(PTRACE_CONT, tid, nullptr, nullptr) != 0) break;
    pid_t r;
    do {
      r = waitpid(tid, &st, __WALL);
    } while (r < 0 && errno == EINTR);
    if (r != tid) return false;
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      Gone(t, st);
      return false;
    }
    if ((st >> 16) == 0) {
      if (WSTOPSIG(st) != SIGTRAP) {
        sig = WSTOPSIG(st);
      } else {
        // The SIGTRAP may be an int3 of ours the task ran into just as it
        // was interrupted (its stop came first): its RIP is one past the
        // int3's address, whose instruction LiftAll has put back. Back
        // onto it, or the task resumes inside that instruction (SIGILL,
        // SIGSEGV: test RepeatedStopsNeverLeaveTheTraceeInsideAnInstruction).
        UndoInt3(t);
      }
      break;
    }
  }
  Drain(t, NowNs());
  ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(long(sig)));
  return true;
}

void SoftBtsRun::DetachAll() {
  // Every task gets its CPUs back first (bind_cpu), stopped or not; tasks
  // created meanwhile by the bound one are given them below (`late`).
  detaching_ = true;
  for (auto& [tid, t] : tasks_)
    if (t->has_orig) Unbind(tid, t->orig_cpus);
  UnbindTracer();
  // Interrupt every running task (a step in flight, possibly inside a
  // blocking syscall), then detach each at whatever stop comes first. A
  // task stopped for job control (LISTEN) is in a stop already.
  int running = 0;
  // A vfork parent sleeps in the kernel until its child execs or exits: it
  // cannot stop before that (and, the child traced, before the child is let
  // go below), so it is not waited for here but after everything else
  // (before 2026-11-27 it was: the wait hung, then timed out and left it
  // with the trap flag of its last single-step, which killed it with
  // SIGTRAP once the child exited).
  std::set<pid_t> vfork_parents, not_counted;
  for (auto& [tid, t] : tasks_) {
    if (t->state == Task::kRunning || t->state == Task::kNew ||
        t->state == Task::kDetach || t->state == Task::kListening) {
      // ESRCH: not (or no longer) our tracee, no stop to wait for; its
      // exit, if any, is collected below all the same.
      if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno == ESRCH) {
        not_counted.insert(tid);
        continue;
      }
      // Whether its child is still traced or already let go (not
      // followed), it stops only once that child execs or exits.
      if (t->state == Task::kRunning && t->vfork_child != 0) {
        vfork_parents.insert(tid);
        not_counted.insert(tid);
        continue;
      }
      ++running;
    }
  }
  // Bounded: a task whose stop this wait never gets must not hang the
  // detach, and with it the helper and the traced program (a vfork parent
  // did, above, until 2026-11-27). After the deadline the kernel's view
  // (/proc) decides, below.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  // Tasks created meanwhile, whose creator's event is one of the stops
  // collected here (never handled, so never adopted): tid -> its first stop
  // seen. Let go below, once the int3s their memory holds are out.
  struct Late {
    bool stopped = false;
    pid_t creator = 0;  // the task whose event named it (0: not known)
  };
  std::map<pid_t, Late> late;
  while (running > 0) {
    int st = 0;
    const pid_t r = waitpid(-1, &st, __WALL | __WNOTHREAD | WNOHANG);
    if (r == 0) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      const timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;  // none left
    Task* t = Find(r);
    if (t == nullptr) {
      if (WIFSTOPPED(st)) late[r].stopped = true;
      continue;
    }
    const bool was_running = t->state != Task::kStopped && !not_counted.count(r);
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (was_running) --running;
      Gone(t, st);
      continue;
    }
    if (!WIFSTOPPED(st)) continue;
    if (was_running) --running;
    if (t->state == Task::kDetach) {
      // A process not followed, at its first stop: let go as Handle would,
      // its copy of the int3s out (before 2026-11-27 it was detached below
      // as a followed task, int3s and all, to die of SIGTRAP).
      LetGoUnfollowed(t);
      continue;
    }
    if (const int event = st >> 16;
        event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_CLONE) {
      unsigned long child = 0;
      ptrace(PTRACE_GETEVENTMSG, r, nullptr, &child);
      const pid_t c = static_cast<pid_t>(child);
      if (c > 0 && Find(c) == nullptr) late[c].creator = r;
    }
    t->status = st;
    const int sig = WSTOPSIG(st);
    const bool signal_delivery = (st >> 16) == 0 && sig != SIGTRAP;
    if ((st >> 16) == 0 && sig == SIGTRAP) UndoInt3(t);
    t->state = Task::kStopped;
    if (signal_delivery) t->pending_sig = sig;
  }
  if (running > 0) {
    for (auto& [tid, t] : tasks_) {
      if (t->state == Task::kStopped || t->state == Task::kDetach ||
          vfork_parents.count(tid) || !InTracingStop(tid))
        continue;
      // Stopped in fact: detached from there, as from an event-stop (a
      // SIGTRAP its last step queued is taken while still traced).
      t->state = Task::kStopped;
      t->status = (PTRACE_EVENT_STOP << 16) | (SIGTRAP << 8) | 0x7f;
    }
  }
  // The first stop of each task created meanwhile (it comes at once: the
  // kernel attached it before its creator's event).
  for (auto& [tid, l] : late) {
    int st = 0;
    pid_t r = 0;
    while (!l.stopped && ((r = waitpid(tid, &st, __WALL | WNOHANG)) == 0 || (r < 0 && errno == EINTR))) {
      if (std::chrono::steady_clock::now() >= deadline + std::chrono::seconds(1)) break;
      const timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
    }
    if (r == tid) l.stopped = WIFSTOPPED(st);
  }
  // A process forked meanwhile has a copy of its parent's memory, int3s
  // included (branch stepping): they come out of its copy before it is let
  // go, as for a process not followed (Handle's kDetach). Before
  // 2026-11-27 it was let go at once and died of SIGTRAP at the first
  // one. A new thread shares its process's memory, which LiftAll clears.
  for (const auto& [tid, l] : late) {
    if (!l.stopped) continue;
    pid_t tgid = 0, ppid = 0;
    if (!ReadTaskIds(tid, &tgid, &ppid) || tgid != tid) continue;
    // Its creator: the task whose event named it, else its parent
    // (CLONE_PARENT makes the parent another process).
    const AddressSpace* from = nullptr;
    const Task* creator = l.creator != 0 ? Find(l.creator) : nullptr;
    if (creator != nullptr) from = creator->as.get();
    for (auto it = tasks_.begin(); from == nullptr && it != tasks_.end(); ++it)
      if (it->second->id.pid == ppid) from = it->second->as.get();
    if (from == nullptr || from->plants == nullptr) continue;
    if (std::shared_ptr<Plants> own =
            ChildPlants(tid, *from->plants, ForkSince(creator, creator != nullptr ? 0 : ppid)))
      LiftPlants(own.get(), 0, 0);
  }
  // A sched_getaffinity run since the stop at its `syscall` was handled
  // answered the one CPU: the task's own instead, as at any stop after it
  // (a sched_setaffinity needs nothing: the mask it set stays, Unbind
  // above leaves a mask that is not the one CPU alone).
  for (auto& [tid, t] : tasks_)
    if (t->state == Task::kStopped && t->aff_rip != 0 && t->aff_nr == SYS_sched_getaffinity)
      FinishAffinityCall(t.get());
  // Everything still tracked is stopped now (but a task past the deadline
  // that /proc does not show stopped, which PTRACE_DETACH refuses: the
  // kernel lets it go when this thread exits, with the trap flag of a
  // single-step if it had one, of which it would die): take out the int3s
  // before any thread runs untraced.
  LiftAll();
  for (const auto& [tid, l] : late) {
    // Created by a bound task: its creator's CPUs, else those of a task
    // of its process or its parent (which /proc names).
    const Task* from = l.creator != 0 ? Find(l.creator) : nullptr;
    if (from == nullptr || !from->has_orig) {
      pid_t tgid = 0, ppid = 0;
      from = nullptr;
      if (ReadTaskIds(tid, &tgid, &ppid))
        for (auto& [otid, o] : tasks_)
          if (o->has_orig && (o->id.pid == tgid || (from == nullptr && o->id.pid == ppid)))
            from = o.get();
    }
    if (from != nullptr && from->has_orig) Unbind(tid, from->orig_cpus);
    if (l.stopped) ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  }
  std::vector<Task*> all;
  for (auto& [tid, t] : tasks_) all.push_back(t.get());
  for (Task* t : all) {
    if (vfork_parents.count(t->id.tid) && t->state != Task::kStopped) continue;  // below
    if (t->state == Task::kDetach) {
      ptrace(PTRACE_DETACH, t->id.tid, nullptr, nullptr);
      ForgetTask(t->id.tid);
      continue;
    }
    if (t->state != Task::kStopped) {
      // Past the deadline and not stopped: nothing to detach from here (the
      // kernel lets it go when this process exits).
      t_->core_->TaskDetached(t->id, NowNs());
      ForgetTask(t->id.tid);
      continue;
    }
    const int sig = t->pending_sig;
    if (DetachFromStop(t, sig)) {
      t_->core_->TaskDetached(t->id, NowNs());
      ForgetTask(t->id.tid);
    }
  }
  // The vfork parents, now that their children run untraced: each stops
  // (PTRACE_EVENT_VFORK_DONE, or the interrupt) once its child exec'd or
  // exited, and is let go from there. Bounded as above; one whose child
  // runs on past it (a vfork child that never execs) is left to the kernel,
  // which detaches it when this process exits: resumed with PTRACE_CONT
  // from its vfork event, it has no trap flag to die of.
  const auto parents_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::set<pid_t> waiting;
  for (pid_t tid : vfork_parents) {
    const Task* t = Find(tid);
    if (t != nullptr && t->state != Task::kStopped) waiting.insert(tid);  // else gone or detached
  }
  // All together (a vfork parent may be the vfork child of another).
  while (!waiting.empty()) {
    bool any = false;
    for (auto it = waiting.begin(); it != waiting.end();) {
      const pid_t tid = *it;
      int st = 0;
      const pid_t r = waitpid(tid, &st, __WALL | WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        ++it;
        continue;
      }
      any = true;
      it = waiting.erase(it);
      Task* t = Find(tid);
      if (t == nullptr) continue;
      if (r != tid) {  // not ours any more
        t_->core_->TaskDetached(t->id, NowNs());
        ForgetTask(tid);
        continue;
      }
      if (WIFEXITED(st) || WIFSIGNALED(st)) {
        Gone(t, st);
        continue;
      }
      t->status = st;
      t->state = Task::kStopped;
      int sig = 0;
      if ((st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP) sig = WSTOPSIG(st);
      if (DetachFromStop(t, sig)) {
        t_->core_->TaskDetached(t->id, NowNs());
        ForgetTask(tid);
      }
    }
    if (any) continue;
    if (std::chrono::steady_clock::now() >= parents_deadline) break;
    const timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  // Past the deadline (a vfork child that never execs): left to the
  // kernel, which lets them go when this thread exits; resumed with
  // PTRACE_CONT from the vfork event, they carry no trap flag.
  for (pid_t tid : waiting) {
    if (Task* t = Find(tid)) {
      t_->core_->TaskDetached(t->id, NowNs());
      ForgetTask(tid);
    }
  }
}

bool SoftBtsRun::AttachAll() {
  SoftBtsTracer* t = t_;
  const long opts = SeizeOptions();
  if (ptrace(PTRACE_SEIZE, root_, nullptr, reinterpret_cast<void*>(opts)) != 0) {
    const int e = errno;
    // A task has one tracer: a debugger, strace, or another pfmd tracer
    // there refuses this one whatever the credentials.
    // TracerPid is the tracing thread: named by its process.
    pid_t other = e == EPERM ? TracerOf(root_) : 0;
    pid_t tgid = 0, ppid = 0;
    if (other > 0 && ReadTaskIds(other, &tgid, &ppid)) other = tgid;
    if (other > 0) {
      t->start_detail_.Set(-EBUSY,
                           "cannot trace pid %d: it is already traced by pid %d "
                           "(a task has one ptrace tracer: a debugger, strace, or "
                           "another trace)",
                           root_, other);
      t->ReportStarted(-EBUSY);
      return false;
    }
    t->start_detail_.Set(-e, "cannot trace pid %d: PTRACE_SEIZE failed: %s%s",
                         root_, strerror(e),
                         e == EPERM ? " (need the same uid or CAP_SYS_PTRACE)"
                                    : "");
    t->ReportStarted(-e);
    return false;
  }
  // The other threads: seized one by one; a thread created meanwhile by a
  // seized one is auto-attached (TRACECLONE), one created by a thread not
  // seized yet shows up in the next listing.
  std::vector<pid_t> seized = {root_};
  for (int round = 0; round < 100; ++round) {
    bool added = false;
    for (pid_t tid : ListThreads(root_)) {
      if (std::find(seized.begin(), seized.end(), tid) != seized.end()) continue;
      if (ptrace(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(opts)) == 0)
        seized.push_back(tid);
      added = true;  // or it exited: list again
    }
    if (!added) break;
  }
  for (pid_t tid : seized) ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  // Each seized thread reports an interrupt stop (or its exit). Stops of
  // threads auto-attached meanwhile are handled as usual afterwards.
  std::map<pid_t, int> stops;
  std::map<pid_t, int> pending_sig;
  size_t waiting = seized.size();
  bool root_gone = false;
  std::vector<std::pair<pid_t, int>> deferred;  // statuses of other tasks
  while (waiting > 0) {
    int st = 0;
    const pid_t r = waitpid(-1, &st, __WALL | __WNOTHREAD);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    const bool ours = std::find(seized.begin(), seized.end(), r) != seized.end();
    if (!ours) {
      deferred.emplace_back(r, st);
      continue;
    }
    if (stops.count(r)) {  // a second status for a seized thread
      deferred.emplace_back(r, st);
      continue;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (r == root_) root_gone = true;
      stops[r] = -1;
      --waiting;
      continue;
    }
    if (WIFSTOPPED(st)) {
      // Its first stop since the interrupt, whatever it is, is the stop
      // we wait for: the kernel clears a pending interrupt at any trap
      // (ptrace_stop: "any trap clears pending STOP trap"), so after a
      // signal-delivery stop, or an event (an exec under way when it was
      // seized), no PTRACE_EVENT_STOP follows; continuing it to wait for
      // one hung the attach (test RepeatedStopsNeverLeaveTheTraceeInside-
      // AnInstruction, whose first attach meets the program's exec). A
      // signal is kept for the task.
      if ((st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP) pending_sig[r] = WSTOPSIG(st);
      stops[r] = st;
      --waiting;
      continue;
    }
  }
  if (root_gone || stops.count(root_) == 0 || stops[root_] < 0) {
    for (auto& [tid, s] : stops)
      if (s >= 0) ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    t->start_detail_.Set(-ESRCH, "pid %d exited while being attached", root_);
    t->ReportStarted(-ESRCH);
    return false;
  }
  {
    std::lock_guard<std::mutex> lk(t->mu_);
    t->root_ = root_;
  }
  SetUpBinding();
  const Task* root = nullptr;
  state_attaching_ = true;  // their own affinities, whoever created them
  for (pid_t tid : seized) {
    if (stops[tid] < 0) continue;
    Task* task = Adopt(root_, tid, tid == root_ ? nullptr : root, false, false);
    if (tid == root_) root = task;
    task->state = Task::kStopped;
    task->status = stops[tid];
    task->pending_sig = pending_sig.count(tid) ? pending_sig[tid] : 0;
  }
  state_attaching_ = false;
  for (auto& [tid, task] : tasks_) {
    BindTask(task.get(), nullptr);
    ReportBound(task.get());
  }
  t->ReportStarted(0);
  for (auto& [tid, task] : tasks_) Resume(task.get());
  for (auto& [r, st] : deferred) Handle(r, st);
  return true;
}

void SoftBtsRun::Run() {
  SoftBtsTracer* t = t_;
  if (!AttachAll()) return;
  // Each iteration handles one stop (or exit) of one task and resumes it.
  while (!tasks_.empty()) {
    if (t->stop_.load(std::memory_order_acquire)) {
      DetachAll();
      return;
    }
    ServeDrainRequest();
    ServeDebugCalls();
    DebugMaybeReport();
    RetryHeld();
    int st = 0;
    const pid_t r = waitpid(-1, &st, __WALL | __WNOTHREAD | (held_ > 0 ? WNOHANG : 0));
    if (r == 0) {  // only held tasks: ask again in a millisecond
      const timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
      continue;
    }
    if (r < 0) {
      // EINTR: a wake (drain, stop), checked at the top. The tracees run
      // (e.g. blocked in syscalls); only this thread writes the areas.
      if (errno == EINTR) continue;
      // ECHILD: reaped elsewhere; their statuses are unknown.
      std::vector<Task*> left;
      for (auto& [tid, task] : tasks_) left.push_back(task.get());
      for (Task* task : left) Gone(task, -1);
      break;
    }
    if (tasks_.size() == 1) {
      Handle(r, st);
      DebugMaybeReport();
      continue;
    }
    // Several tasks: every one stopped now is handled once before any is
    // handled again. waitpid(-1) scans the tracees in one order, and a task
    // resumed on the tracer's CPU (bind_cpu) runs at once and is often
    // stopped again before the next call: taking one stop at a time, three
    // spinning threads kept their main thread waiting (a 300 ms sleep took
    // 1.1-1.3 s through pfmd; 0.08 s in rounds:
    // HostTasksE2e.ThreadsOnTheTracersCpuAllGetTheirTurns). A status taken
    // here stays the task's until the tracer resumes it, as it would in
    // the kernel; one of a task forgotten meanwhile is dropped.
    round_.clear();
    round_.push_back(Waited{r, st, Find(r) != nullptr});
    for (;;) {
      int st2 = 0;
      const pid_t r2 = waitpid(-1, &st2, __WALL | __WNOTHREAD | WNOHANG);
      if (r2 <= 0) break;  // EINTR: the wake is seen at the top
      round_.push_back(Waited{r2, st2, Find(r2) != nullptr});
    }
    for (size_t i = 0; i < round_.size(); ++i) {
      const Waited& w = round_[i];
      // A task let go or forgotten while an earlier one was handled: its
      // status is stale, and it is not ours any more.
      if (w.known && Find(w.tid) == nullptr) continue;
      if (i > 0 && WIFSTOPPED(w.st)) {
        // Stopped and not resumed, a task has nothing more to report; if
        // its tid has (killed meanwhile; an exec of another thread of its
        // process, which took the tid), the stop taken is no more: the new
        // status comes at the next wait.
        siginfo_t si{};
        if (waitid(P_PID, static_cast<id_t>(w.tid), &si,
                   WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) == 0 &&
            si.si_pid == w.tid) {
          t->stale_stops_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
      }
      Handle(w.tid, w.st);
      DebugMaybeReport();
    }
  }
  UnbindTracer();
  ServeDebugCalls();  // answered (-ESRCH for what needs a task) before the thread ends
}

// ---------------------------------------------------------------------------
// Debug control (soft_bts.h, docs/gdb.md).

void SoftBtsRun::ServeDebugCalls() {
  // Checked once per stop: no lock unless a call waits.
  if (!t_->debug_calls_pending_.load(std::memory_order_acquire)) return;
  std::deque<SoftBtsTracer::DebugCall*> calls;
  {
    std::lock_guard<std::mutex> lk(t_->mu_);
    calls.swap(t_->debug_calls_);
    t_->debug_calls_pending_.store(false, std::memory_order_relaxed);
  }
  if (calls.empty()) return;
  for (SoftBtsTracer::DebugCall* c : calls) {
    const int rc = c->fn(this);
    std::lock_guard<std::mutex> lk(t_->mu_);
    c->rc = rc;
    c->done = true;
  }
  std::lock_guard<std::mutex> lk(t_->mu_);
  t_->cv_.notify_all();
}

void SoftBtsRun::Reanchor(Task* t, uint64_t rip) {
  FindRegion(t, rip);
  bool ok = false;
  t->prev_insn = t->as->cache.Get(t->id.tid, rip, &ok);
  t->prev_ok = ok;
  t->prev_rip = rip;
  t->prev_computed = false;
  t->have_prev = true;
  t->run = 0;
}

void SoftBtsRun::DebugHold(Task* t) {
  if (t->dbg_stopped) return;
  t->dbg_stopped = true;
  // What it ran so far reaches the rings before the debugger looks, and a
  // profiler sees the stop as the task leaving its CPU.
  const uint64_t now = NowNs();
  Drain(t, now);
  ReportSwitch(t, t->cpu, now, false, false);
}

void SoftBtsRun::DebugStopAll(Task* reporter, int sig, bool swbreak, int hw_kind,
                              uint64_t hw_addr) {
  dbg_.stopping = true;
  dbg_.report = DebugStopEvent();
  dbg_.report.kind = DebugStopEvent::kStopped;
  dbg_.report.tid = reporter != nullptr ? reporter->id.tid : root_;
  dbg_.report.signo = sig;
  dbg_.report.swbreak = swbreak;
  dbg_.report.hw_kind = hw_kind;
  dbg_.report.hw_addr = hw_addr;
  for (auto& [tid, o] : tasks_) {
    Task* t = o.get();
    if (t->id.pid != root_ || t->state == Task::kDetach) continue;
    if (t->state == Task::kRunning || t->state == Task::kNew) {
      ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);  // stops at its next step anyway
    } else if (t->state == Task::kStopped) {
      DebugHold(t);  // held by a full blocking consumer, or the reporter
    }
  }
}

bool SoftBtsRun::DebugOnStop(Task* t, StopCause cause, int sig) {
  if (!dbg_.active || t->id.pid != root_) return false;
  bool event = false, swbreak = false;
  int esig = SIGTRAP;
  int hw_kind = 0;
  uint64_t hw_addr = 0;
  switch (cause) {
    case StopCause::kStep: {
      // A breakpoint address reached by a computed RIP is checked against
      // the registers before anyone is told: a chain gone wrong must not
      // report a stop where the thread is not (counted as a resync).
      if (t->have_prev && t->prev_computed &&
          (dbg_.breakpoints.count(t->prev_rip) || dbg_.hw_exec.count(t->prev_rip))) {
        user_regs_struct regs;
        if (ReadRegs(t, &regs) && regs.rip != t->prev_rip) {
          t_->resyncs_.fetch_add(1, std::memory_order_relaxed);
          Reanchor(t, regs.rip);
        }
      }
      // A watchpoint hit by the instruction just stepped; then a step that
      // was asked for; then a breakpoint at the next instruction.
      const int hit = t->hw.empty() ? -1 : DebugHwHit(t);
      if (hit >= 0) {
        event = true;
        hw_kind = dbg_.hw[static_cast<size_t>(hit)].kind;
        hw_addr = dbg_.hw[static_cast<size_t>(hit)].addr;
        t->dbg_step = false;
      } else if (t->dbg_step) {
        event = true;
        t->dbg_step = false;
      } else if (t->have_prev && dbg_.breakpoints.count(t->prev_rip)) {
        event = swbreak = true;
      } else if (t->have_prev && dbg_.hw_exec.count(t->prev_rip)) {
        event = true;
        hw_kind = kDebugHwExec;
        hw_addr = t->prev_rip;
      }
      break;
    }
    case StopCause::kSignal:
      event = true;
      esig = sig;
      t->pending_sig = 0;  // the debugger decides (vCont;C)
      break;
    case StopCause::kExec:
      event = dbg_.stop_at_exec && t->id.tid == root_;
      if (event) dbg_.stop_at_exec = false;
      break;
    default:
      break;
  }
  if (event) {
    if (!dbg_.stopping && !dbg_.stopped) {
      DebugStopAll(t, esig, swbreak, hw_kind, hw_addr);
    } else if (!t->dbg_pending) {
      t->dbg_pending = true;
      t->dbg_pending_sig = esig;
      t->dbg_pending_swbreak = swbreak;
      t->dbg_pending_hw_kind = hw_kind;
      t->dbg_pending_hw_addr = hw_addr;
    }
  }
  if (!dbg_.stopping && !dbg_.stopped) return false;
  DebugHold(t);
  return true;
}

void SoftBtsRun::DebugMaybeReport() {
  if (!dbg_.active || !dbg_.stopping) return;
  for (auto& [tid, t] : tasks_) {
    if (t->id.pid != root_ || t->state == Task::kDetach) continue;
    if (!t->dbg_stopped && t->state != Task::kListening) return;
  }
  if (Find(dbg_.report.tid) == nullptr) {  // the reporter exited meanwhile
    auto it = tasks_.find(root_);
    dbg_.report.tid = it != tasks_.end() ? root_ : dbg_.report.tid;
  }
  dbg_.stopping = false;
  dbg_.stopped = true;
  if (dbg_.events) dbg_.events(dbg_.report);
}

void SoftBtsRun::DebugRelease(Task* t, int sig) {
  if (!t->dbg_stopped) return;
  t->dbg_stopped = false;
  ReportSwitch(t, t->cpu, NowNs(), true, false);
  if (t->state != Task::kStopped) return;  // listening: job control resumes it
  t->pending_sig = sig;
  if (!t->have_prev && sig == 0) {
    // Stopped where the chain was lost (a signal stop): the next
    // instruction is at RIP.
    user_regs_struct regs;
    if (ReadRegs(t, &regs)) Reanchor(t, regs.rip);
  }
  Resume(t);
}

int SoftBtsRun::DebugEnable(bool stop_at_exec, DebugEventFn events) {
  if (dbg_.active) return -EBUSY;
  if (Find(root_) == nullptr) return -ESRCH;
  dbg_ = DebugState();
  dbg_.active = true;
  dbg_.events = std::move(events);
  // Breakpoints are checked at every instruction: no block steps, and no
  // branch stepping (its int3s go; a thread running towards one is
  // interrupted and single-steps from where it stops).
  // Address filters go too: the debugger sees every instruction.
  filtering_ = false;
  started_ = true;
  for (auto& [tid, t] : tasks_) {
    if (t->mode == kBranch && t->state == Task::kRunning && (t->bs_conted || t->outside))
      ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
    t->mode = kStep;
    t->bs_cont = false;
    if (t->outside) {
      t->outside = false;
      t->have_prev = false;
    }
  }
  LiftAll();
  if (stop_at_exec) {
    dbg_.stop_at_exec = true;
  } else {
    Task* root = Find(root_);
    DebugStopAll(root, SIGTRAP, false);
  }
  return 0;
}

int SoftBtsRun::DebugInterrupt() {
  if (!dbg_.active) return -EINVAL;
  if (dbg_.stopping || dbg_.stopped) return 0;
  DebugStopAll(Find(root_), SIGINT, false);
  return 0;
}

int SoftBtsRun::DebugResume(const DebugResumeSpec& spec) {
  if (!dbg_.active) return -EINVAL;
  if (!dbg_.stopped) return dbg_.stopping ? -EBUSY : 0;
  auto named = [](const std::vector<pid_t>& v, pid_t tid) {
    return std::find(v.begin(), v.end(), tid) != v.end();
  };
  auto resumed = [&](const Task* t) {
    return spec.continue_others || named(spec.step, t->id.tid) || named(spec.cont, t->id.tid);
  };
  for (const std::vector<pid_t>* v : {&spec.step, &spec.cont})
    for (pid_t tid : *v)
      if (DebugTask(tid) == nullptr) return -ESRCH;
  // An event that came while the process was being stopped goes first.
  for (auto& [tid, o] : tasks_) {
    Task* t = o.get();
    if (t->id.pid != root_ || !t->dbg_pending || !resumed(t)) continue;
    t->dbg_pending = false;
    DebugStopEvent e;
    e.tid = t->id.tid;
    e.signo = t->dbg_pending_sig;
    e.swbreak = t->dbg_pending_swbreak;
    e.hw_kind = t->dbg_pending_hw_kind;
    e.hw_addr = t->dbg_pending_hw_addr;
    if (e.swbreak && !dbg_.breakpoints.count(t->prev_rip)) continue;  // removed since
    if (e.hw_kind == kDebugHwExec && !dbg_.hw_exec.count(t->prev_rip)) continue;
    if (dbg_.events) dbg_.events(e);
    return 0;
  }
  dbg_.stopped = false;
  std::vector<Task*> go;
  for (auto& [tid, o] : tasks_)
    if (o->id.pid == root_ && o->dbg_stopped && resumed(o.get())) go.push_back(o.get());
  for (Task* t : go) {
    t->dbg_step = named(spec.step, t->id.tid);
    t->dbg_pending = false;
    auto sig = spec.signals.find(t->id.tid);
    DebugRelease(t, sig == spec.signals.end() ? 0 : sig->second);
  }
  // Threads left stopped (a step of one thread, or a continue of one
  // under scheduler locking) stay held; the next stop stops the others
  // again.
  return 0;
}

int SoftBtsRun::DebugGetRegs(pid_t tid, DebugRegs* out) {
  Task* t = DebugTask(tid);
  if (t == nullptr) return -ESRCH;
  if (!dbg_.active || !t->dbg_stopped || t->state != Task::kStopped) return -EAGAIN;
  if (ptrace(PTRACE_GETREGS, tid, nullptr, &out->regs) != 0) return -errno;
  if (ptrace(PTRACE_GETFPREGS, tid, nullptr, &out->fp) != 0) return -errno;
  return 0;
}

int SoftBtsRun::DebugSetRegs(pid_t tid, const DebugRegs& in) {
  Task* t = DebugTask(tid);
  if (t == nullptr) return -ESRCH;
  if (!dbg_.active || !t->dbg_stopped || t->state != Task::kStopped) return -EAGAIN;
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &in.regs) != 0) return -errno;
  if (ptrace(PTRACE_SETFPREGS, tid, nullptr, &in.fp) != 0) return -errno;
  // The debugger moved the task (jump, a call from gdb): not a branch of
  // the program, so no record; the chain starts again there.
  if (!t->have_prev || in.regs.rip != t->prev_rip) Reanchor(t, in.regs.rip);
  return 0;
}

namespace {
int OpenMem(pid_t pid, int flags) {
  return open(("/proc/" + std::to_string(pid) + "/mem").c_str(), flags | O_CLOEXEC);
}
}  // namespace

int SoftBtsRun::DebugReadMemory(uint64_t addr, size_t len, std::string* out) {
  if (Find(root_) == nullptr) return -ESRCH;
  const int fd = OpenMem(root_, O_RDONLY);
  if (fd < 0) return -errno;
  out->assign(len, '\0');
  size_t got = 0;
  while (got < len) {
    const ssize_t n = pread(fd, out->data() + got, len - got, static_cast<off_t>(addr + got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  const int e = errno;
  close(fd);
  out->resize(got);
  return got == 0 && len != 0 ? -(e != 0 ? e : EIO) : 0;
}

int SoftBtsRun::DebugWriteMemory(uint64_t addr, const std::string& bytes) {
  Task* root = Find(root_);
  if (root == nullptr) return -ESRCH;
  const int fd = OpenMem(root_, O_RDWR);
  if (fd < 0) return -errno;
  const ssize_t n = pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(addr));
  const int e = errno;
  close(fd);
  if (n != static_cast<ssize_t>(bytes.size())) return n < 0 ? -e : -EIO;
  // Code may have changed: decode again, including each thread's next
  // instruction.
  AddressSpace* as = root->as.get();
  as->cache.Clear();
  for (auto& [tid, t] : tasks_)
    if (t->as.get() == as && t->have_prev) Reanchor(t.get(), t->prev_rip);
  return 0;
}

int SoftBtsRun::DebugBreakpoint(uint64_t addr, bool insert) {
  if (!dbg_.active) return -EINVAL;
  if (insert) {
    if (dbg_.breakpoints.size() >= 4096) return -ENOSPC;
    dbg_.breakpoints.insert(addr);
  } else {
    dbg_.breakpoints.erase(addr);
  }
  return 0;
}

int SoftBtsRun::DebugArmHw(Task* t, size_t i, std::string* err) {
  if (t->hw.size() < dbg_.hw.size()) t->hw.resize(dbg_.hw.size());
  const DebugState::HwPoint& p = dbg_.hw[i];
  // perf's bp_type for GDB's kinds; an execute breakpoint's bp_len is
  // sizeof(long) in perf's ABI (one byte in DR7).
  const uint32_t type = p.kind == kDebugHwExec    ? HW_BREAKPOINT_X
                        : p.kind == kDebugHwWrite ? HW_BREAKPOINT_W
                                                  : HW_BREAKPOINT_RW;
  const uint32_t len = p.kind == kDebugHwExec ? sizeof(long) : p.len;
  if (!perf_caps_probed_) {
    ErrorDetail d;
    ProbePerfCaps(kPerfDevicesDir, &perf_caps_, &d);
    perf_caps_probed_ = true;
  }
  ErrorDetail d;
  const int rc = PerfSampler::OpenBreakpointSampler(
      perf_caps_, PerfTarget::Task(t->id.tid), p.addr, len, type, 1, &t->hw[i], &d);
  if (rc == 0) return 0;
  t->hw[i].reset();
  *err = "thread " + std::to_string(t->id.tid) + ": " + d.message;
  return rc;
}

int SoftBtsRun::DebugHwHit(Task* t) {
  int hit = -1;
  for (size_t i = 0; i < t->hw.size() && i < dbg_.hw.size(); ++i) {
    PerfSampler* s = t->hw[i].get();
    if (s == nullptr || s->pending() == 0) continue;
    ErrorDetail d;
    s->Read([](const PerfRecord&) {}, &d);  // the hit is all we need
    if (hit < 0 && dbg_.hw[i].kind != kDebugHwExec) hit = static_cast<int>(i);
  }
  return hit;
}

int SoftBtsRun::DebugHwPoint(int kind, uint64_t addr, uint32_t len, bool insert,
                             std::string* err) {
  if (!dbg_.active) return -EINVAL;
  if (kind != kDebugHwExec && kind != kDebugHwWrite && kind != kDebugHwAccess) {
    *err = "hardware point kind must be 1 (execute), 2 (write) or 4 (access)";
    return -EINVAL;
  }
  if (kind == kDebugHwExec) len = 1;
  auto same = [&](const DebugState::HwPoint& p) {
    return p.kind == kind && p.addr == addr && p.len == len;
  };
  if (!insert) {
    for (size_t i = 0; i < dbg_.hw.size(); ++i) {
      if (!same(dbg_.hw[i])) continue;
      for (auto& [tid, t] : tasks_)
        if (i < t->hw.size()) t->hw.erase(t->hw.begin() + static_cast<ptrdiff_t>(i));
      if (kind == kDebugHwExec) {
        auto it = dbg_.hw_exec.find(addr);
        if (it != dbg_.hw_exec.end()) dbg_.hw_exec.erase(it);
      }
      dbg_.hw.erase(dbg_.hw.begin() + static_cast<ptrdiff_t>(i));
      return 0;
    }
    return 0;
  }
  if (dbg_.hw.size() >= 32) {  // x86 has 4; the kernel refuses long before
    *err = "too many hardware points";
    return -ENOSPC;
  }
  dbg_.hw.push_back({kind, addr, len});
  const size_t i = dbg_.hw.size() - 1;
  for (auto& [tid, o] : tasks_) {
    Task* t = o.get();
    if (t->id.pid != root_ || t->state == Task::kDetach || t->state == Task::kNew) continue;
    if (const int rc = DebugArmHw(t, i, err); rc < 0) {
      // All or nothing: the threads armed so far give their register back.
      for (auto& [otid, u] : tasks_)
        if (i < u->hw.size()) u->hw.resize(i);
      dbg_.hw.pop_back();
      return rc;
    }
  }
  if (kind == kDebugHwExec) dbg_.hw_exec.insert(addr);
  return 0;
}

int SoftBtsRun::DebugThreads(std::vector<pid_t>* out) {
  out->clear();
  if (Find(root_) != nullptr) out->push_back(root_);
  for (auto& [tid, t] : tasks_)
    if (tid != root_ && t->id.pid == root_ && t->state != Task::kDetach) out->push_back(tid);
  return out->empty() ? -ESRCH : 0;
}

int SoftBtsRun::DebugKill() {
  if (Find(root_) == nullptr) return -ESRCH;
  return kill(root_, SIGKILL) == 0 ? 0 : -errno;
}

int SoftBtsRun::DebugDisable(bool kill_it) {
  if (!dbg_.active) return 0;
  dbg_.active = false;
  dbg_.events = nullptr;
  dbg_.breakpoints.clear();
  for (auto& [tid, t] : tasks_) t->hw.clear();  // the debug registers go back
  if (kill_it && Find(root_) != nullptr) kill(root_, SIGKILL);
  std::vector<Task*> held;
  for (auto& [tid, t] : tasks_)
    if (t->dbg_stopped) held.push_back(t.get());
  for (Task* t : held) {
    // A signal it stopped for, not yet passed on, is delivered now.
    const int sig = t->dbg_pending && t->dbg_pending_sig != SIGTRAP ? t->dbg_pending_sig : 0;
    t->dbg_pending = t->dbg_step = false;
    DebugRelease(t, kill_it ? 0 : sig);
  }
  dbg_ = DebugState();
  return 0;
}

int SoftBtsTracer::RunOnTracer(std::function<int(SoftBtsRun*)> fn) {
  DebugCall call;
  call.fn = std::move(fn);
  std::unique_lock<std::mutex> lk(mu_);
  if (!thread_.joinable() || thread_exited_) return -ESRCH;
  debug_calls_.push_back(&call);
  debug_calls_pending_.store(true, std::memory_order_release);
  while (!call.done) {
    if (thread_exited_) {
      auto it = std::find(debug_calls_.begin(), debug_calls_.end(), &call);
      if (it != debug_calls_.end()) debug_calls_.erase(it);
      return call.done ? call.rc : -ESRCH;
    }
    // A wake sent just before the tracer blocks in waitpid is lost: kick
    // until served.
    pthread_kill(thread_.native_handle(), SoftBtsWakeSignal());
    cv_.wait_for(lk, std::chrono::milliseconds(10));
  }
  return call.rc;
}

int SoftBtsTracer::DebugEnable(bool stop_at_exec, DebugEventFn events) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugEnable(stop_at_exec, std::move(events)); });
}
int SoftBtsTracer::DebugInterrupt() {
  return RunOnTracer([](SoftBtsRun* r) { return r->DebugInterrupt(); });
}
int SoftBtsTracer::DebugResume(const DebugResumeSpec& spec) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugResume(spec); });
}
int SoftBtsTracer::DebugGetRegs(pid_t tid, DebugRegs* out) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugGetRegs(tid, out); });
}
int SoftBtsTracer::DebugSetRegs(pid_t tid, const DebugRegs& in) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugSetRegs(tid, in); });
}
int SoftBtsTracer::DebugReadMemory(uint64_t addr, size_t len, std::string* out) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugReadMemory(addr, len, out); });
}
int SoftBtsTracer::DebugWriteMemory(uint64_t addr, const std::string& bytes) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugWriteMemory(addr, bytes); });
}
int SoftBtsTracer::DebugBreakpoint(uint64_t addr, bool insert) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugBreakpoint(addr, insert); });
}
int SoftBtsTracer::DebugHwPoint(int kind, uint64_t addr, uint32_t len, bool insert,
                                std::string* err) {
  return RunOnTracer(
      [&](SoftBtsRun* r) { return r->DebugHwPoint(kind, addr, len, insert, err); });
}
int SoftBtsTracer::DebugThreads(std::vector<pid_t>* out) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugThreads(out); });
}
int SoftBtsTracer::DebugKill() {
  return RunOnTracer([](SoftBtsRun* r) { return r->DebugKill(); });
}
int SoftBtsTracer::DebugDisable(bool kill) {
  return RunOnTracer([&](SoftBtsRun* r) { return r->DebugDisable(kill); });
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
  s.tasks = tasks_.load(std::memory_order_relaxed);
  s.tasks_seen = tasks_seen_.load(std::memory_order_relaxed);
  s.processes_seen = processes_seen_.load(std::memory_order_relaxed);
  s.switch_errno = switch_errno_.load(std::memory_order_relaxed);
  s.switches = switches_.load(std::memory_order_relaxed);
  s.switch_artifacts = switch_artifacts_.load(std::memory_order_relaxed);
  s.branch_stops = branch_stops_.load(std::memory_order_relaxed);
  s.emulated = emulated_.load(std::memory_order_relaxed);
  s.planted = planted_.load(std::memory_order_relaxed);
  s.children_first = children_first_.load(std::memory_order_relaxed);
  s.stale_stops = stale_stops_.load(std::memory_order_relaxed);
  s.bound_cpu = bound_cpu_.load(std::memory_order_relaxed);
  s.gaps = gaps_.load(std::memory_order_relaxed);
  return s;
}

std::vector<Mapping> SoftBtsTracer::maps() const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = maps_.find(root_);
  return it == maps_.end() ? std::vector<Mapping>() : it->second;
}

std::map<pid_t, std::vector<Mapping>> SoftBtsTracer::process_maps(
    std::set<pid_t>* cut) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (cut != nullptr) *cut = maps_cut_;
  return maps_;
}

namespace {
// What RememberStartSignals found; read by SpawnStopped's children.
struct StartSignals {
  bool known = false;
  sigset_t ignored;
  sigset_t mask;
};
StartSignals& TheStartSignals() {
  static StartSignals s;
  return s;
}
}  // namespace

void RememberStartSignals() {
  StartSignals& s = TheStartSignals();
  sigemptyset(&s.ignored);
  // SigIgn of /proc/self/status: every signal, glibc's own included.
  const std::string st = ReadFile("/proc/self/status");
  const size_t at = st.find("\nSigIgn:");
  const unsigned long long ign =
      at == std::string::npos ? 0 : std::strtoull(st.c_str() + at + 8, nullptr, 16);
  for (int sig = 1; sig <= 64 && sig < NSIG; ++sig)
    if (ign & (1ull << (sig - 1))) sigaddset(&s.ignored, sig);
  sigprocmask(SIG_BLOCK, nullptr, &s.mask);
  s.known = true;
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
    // The command's signals (see soft_bts.h): default for the handlers
    // this process installed, and for what it ignores that its starter did
    // not; its starter's mask. glibc's own signals 32 and 33 are left as
    // they are (glibc refuses to change them; an ignore is inherited).
    const StartSignals& start = TheStartSignals();
    struct sigaction cur, dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &cur) != 0) continue;
      const bool ignored = cur.sa_handler == SIG_IGN;
      const bool handled = !ignored && cur.sa_handler != SIG_DFL;
      if (handled || (ignored && start.known && !sigismember(&start.ignored, sig)))
        sigaction(sig, &dfl, nullptr);
    }
    if (start.known) sigprocmask(SIG_SETMASK, &start.mask, nullptr);
    char b = 0;
    ssize_t r;
    do {
      r = read(p[0], &b, 1);
    } while (r < 0 && errno == EINTR);
    if (r != 1 || b != 'g') _exit(126);
    execvp(args[0], args.data());
    // Said, as a shell says it, then 127: a command that passed its
    // caller's checks can still fail here (a script whose interpreter is
    // missing). strerrordesc_np: untranslated, no locale: fine after fork.
    const char* why = strerrordesc_np(errno);
    const char* parts[] = {"pfmctl: cannot run ", args[0], ": ", why ? why : "exec failed",
                           "\n"};
    for (const char* part : parts) (void)!write(2, part, strlen(part));
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

namespace {

pid_t WaitNoIntr(pid_t pid, int* st, int flags) {
  for (;;) {
    const pid_t r = waitpid(pid, st, flags);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace

int ReleaseToExecStop(pid_t pid, int* status, ErrorDetail* d) {
  if (ptrace(PTRACE_SEIZE, pid, nullptr,
             reinterpret_cast<void*>(long{PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL})) != 0) {
    const int e = errno;
    Abandon(pid, nullptr);
    return SetError(d, -e, "PTRACE_SEIZE of %d: %s", pid, strerror(e));
  }
  if (int rc = Release(pid, d); rc != 0) {
    kill(pid, SIGKILL);
    return rc;
  }
  for (;;) {
    int st = 0;
    if (WaitNoIntr(pid, &st, __WALL) != pid) {
      const int e = errno;
      kill(pid, SIGKILL);
      return SetError(d, -e, "waiting for %d's exec: %s", pid, strerror(e));
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (status != nullptr) *status = st;
      return SetError(d, -ECHILD, "%d ended before its program started", pid);
    }
    if (!WIFSTOPPED(st)) continue;
    if ((st >> 16) == PTRACE_EVENT_EXEC) return 0;
    // A signal-delivery stop is passed on; other stops (group-stop) resume.
    const int sig = (st >> 16) == 0 ? WSTOPSIG(st) : 0;
    ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(long{sig}));
  }
}

int DetachStopped(pid_t pid, int* status, ErrorDetail* d) {
  // Queued while held: it stops before its next instruction once detached.
  kill(pid, SIGSTOP);
  if (ptrace(PTRACE_DETACH, pid, nullptr, nullptr) != 0) {
    const int e = errno;
    kill(pid, SIGKILL);
    return SetError(d, -e, "PTRACE_DETACH of %d: %s", pid, strerror(e));
  }
  int st = 0;
  if (WaitNoIntr(pid, &st, WUNTRACED) != pid) {
    const int e = errno;
    kill(pid, SIGKILL);
    return SetError(d, -e, "waiting for %d to stop: %s", pid, strerror(e));
  }
  if (WIFSTOPPED(st)) return 0;
  if (status != nullptr) *status = st;
  return SetError(d, -ECHILD, "%d ended instead of stopping", pid);
}

}  // namespace pfm
