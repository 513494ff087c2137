// Over 600 lines, on purpose: one simulated machine (scheduler, code model,
// BTS and PEBS writes, counters, breakpoint hits) whose parts all work on
// its private task and CPU tables, in virtual time.
#include "kernel/drivers/sim/sim_machine.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <functional>

#include "kernel/ds/ds_area.h"

namespace pfm {
namespace {

// splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number
// generators", 2014): tiny state, good enough mixing, same output everywhere.
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Hash(uint64_t a, uint64_t b) {
  uint64_t s = a * 0x9e3779b97f4a7c15ull ^ b;
  SplitMix(&s);
  return SplitMix(&s);
}

constexpr uint64_t kUserTextMask = kSimUserTextBytes - 1;
constexpr uint64_t kKernelTextMask = kSimKernelTextBytes - 1;
static_assert((kSimUserTextBytes & kUserTextMask) == 0, "power of two");
static_assert((kSimKernelTextBytes & kKernelTextMask) == 0, "power of two");
// Where syscalls and interrupts land (an entry_SYSCALL_64-like stub and an
// interrupt stub); any fixed kernel addresses would do.
constexpr uint64_t kSyscallEntry = kSimKernelTextBase + 0xa00000;
constexpr uint64_t kInterruptEntry = kSimKernelTextBase + 0xa01000;
constexpr uint32_t kCallStackDepth = 8;
// Phases of constant IPC: the reason multiplexed estimates are not exact.
constexpr uint64_t kPhaseMinNs = 50000;
constexpr uint64_t kPhaseMaxNs = 1000000;
constexpr uint32_t kIpcMinMilli = 300;
constexpr uint32_t kIpcMaxMilli = 3000;
// Derived events: k(type, config) in [0.001, 0.5] events per instruction.
constexpr uint32_t kDerivedMinPpm = 1000;
constexpr uint32_t kDerivedMaxPpm = 500000;
// Crossings beyond this many in one step are skipped, as a throttled PMU
// would; only reachable with periods far below events per branch.
constexpr int kMaxPebsPerStep = 64;
constexpr int kMaxSimCpusChecked = 65536;

// Load = waiting + running; used for wake-up placement and balancing.
int Load(int queued, int32_t current) {
  return queued + (current >= 0 ? 1 : 0);
}

uint64_t UserWrap(uint64_t base, uint64_t addr) {
  return base + ((addr - base) & kUserTextMask);
}
uint64_t KernelWrap(uint64_t addr) {
  return kSimKernelTextBase + ((addr - kSimKernelTextBase) & kKernelTextMask);
}

}  // namespace

int SimMachine::ValidateConfig(const SimConfig& c, ErrorDetail* d) {
  if (c.machine.cpus < 1 || c.machine.cpus > kMaxSimCpusChecked)
    return SetError(d, -EINVAL, "sim: %d CPUs; must be 1..%d", c.machine.cpus,
                    kMaxSimCpusChecked);
  if (c.machine.gp_counters < 0 || c.machine.fixed_counters < 0)
    return SetError(d, -EINVAL, "sim: negative counter count in MachineInfo");
  if (c.tasks < 0 || c.tasks > kMaxSimTasks)
    return SetError(d, -EINVAL, "sim: %d tasks; must be 0..%d", c.tasks,
                    kMaxSimTasks);
  if (c.quantum_ns == 0)
    return SetError(d, -EINVAL, "sim: quantum_ns must be positive");
  if (c.mean_branch_gap_ns == 0 || c.mean_branch_gap_ns > (1ull << 40))
    return SetError(d, -EINVAL, "sim: mean_branch_gap_ns must be 1..2^40");
  if (c.slice_min_ns == 0 || c.slice_min_ns > c.slice_max_ns)
    return SetError(d, -EINVAL,
                    "sim: slice lengths must satisfy 0 < min <= max");
  if (c.sleep_min_ns == 0 || c.sleep_min_ns > c.sleep_max_ns)
    return SetError(d, -EINVAL,
                    "sim: sleep lengths must satisfy 0 < min <= max");
  if (c.slice_max_ns > (1ull << 50) || c.sleep_max_ns > (1ull << 50))
    return SetError(d, -EINVAL, "sim: slice/sleep lengths above 2^50 ns");
  if (c.sleep_permille > 1000 || c.syscall_permille > 1000 ||
      c.predicted_permille > 1000)
    return SetError(d, -EINVAL, "sim: a *_permille knob is above 1000");
  if (c.kernel_branches_min == 0 ||
      c.kernel_branches_min > c.kernel_branches_max)
    return SetError(d, -EINVAL,
                    "sim: kernel branches per stretch must be 0 < min <= max");
  if (c.cycles_per_ns == 0 || c.cycles_per_ns > 1000)
    return SetError(d, -EINVAL, "sim: cycles_per_ns must be 1..1000");
  return 0;
}

int SimMachine::Create(const SimConfig& config, CoreHooks* core,
                       std::unique_ptr<SimMachine>* out, ErrorDetail* detail) {
  if (core == nullptr || out == nullptr)
    return SetError(detail, -EINVAL, "sim: null core or output");
  int err = ValidateConfig(config, detail);
  if (err < 0) return err;
  out->reset(new SimMachine(config, core));
  return 0;
}

SimMachine::SimMachine(const SimConfig& config, CoreHooks* core)
    : config_(config), core_(core) {
  assert(ValidateConfig(config, nullptr) == 0);
  assert(core != nullptr);
  max_counters_ = std::min(
      kMaxSimScheduledCounters,
      config_.machine.gp_counters + config_.machine.fixed_counters);
  sched_rng_ = Hash(config_.seed, 0x5c4ed);
  tasks_.resize(config_.tasks);
  cpus_.resize(config_.machine.cpus);
  counters_.resize(size_t(config_.machine.cpus) * max_counters_);
  counter_scratch_.resize(max_counters_);
  scratch_.resize(max_counters_);
  sleepers_.reserve(config_.tasks);
  held_.reserve(config_.tasks);
  BuildProgram();
  for (int i = 0; i < config_.tasks; ++i) {
    Task& t = tasks_[i];
    t.pid = kFirstSimPid + i;
    t.rng = Hash(config_.seed, uint64_t(t.pid));
    t.text_base = kSimUserTextBase + uint64_t(i) * kSimUserTextStride;
    t.data_base = kSimUserDataBase + uint64_t(i) * kSimUserDataStride;
    t.pc = t.text_base + program_[Rand(&t.rng, 0, program_.size() - 1)].start;
    t.next_branch_rt = Rand(&t.rng, 1, 2 * config_.mean_branch_gap_ns - 1);
    t.phase_end_rt = 0;
    NewPhase(t);
    Enqueue(i % config_.machine.cpus, i);
  }
}

// Branch instruction sizes of the program: a call (e8 rel32) is 5 bytes,
// the other branches 2 (a short jcc/jmp, a ret plus padding).
constexpr uint32_t kCallBytes = 5;
constexpr uint32_t kBranchBytes = 2;

void SimMachine::BuildProgram() {
  uint64_t rng = Hash(config_.seed, 0xc0de);
  // Blocks of 2..64 bytes to their branch, back to back; the last block's
  // fall-through wraps to the first.
  for (uint64_t off = 0; off + 64 + kCallBytes <= kSimUserTextBytes;) {
    Block b;
    b.start = uint32_t(off);
    b.len = uint32_t(Rand(&rng, 2, 64));
    const uint64_t r = Rand(&rng, 0, 999);
    b.kind = r < 100 ? BlockKind::kCall
                     : r < 180 ? BlockKind::kReturn : BlockKind::kConditional;
    off += b.len + (b.kind == BlockKind::kCall ? kCallBytes : kBranchBytes);
    program_.push_back(b);
  }
  const uint64_t n = program_.size();
  for (uint64_t i = 0; i < n; ++i) {
    Block& b = program_[i];
    if (b.kind == BlockKind::kCall) {
      // Function entries: every 8th block.
      b.target = uint32_t(Rand(&rng, 0, (n - 1) / 8) * 8);
      continue;
    }
    // Conditional branches (and returns, for when the stack is empty): a
    // log-uniform distance of 8 bytes to 2 KiB, backward or forward. Most
    // branches in real code are short, and most loops small.
    const uint64_t shift = Rand(&rng, 3, 10);
    const uint64_t dist = (1ull << shift) + Rand(&rng, 0, (1ull << shift) - 1);
    const bool backward = Rand(&rng, 0, 1) == 0;
    const uint64_t from = b.start + b.len;
    const uint64_t to = (backward ? from - dist : from + dist) & kUserTextMask;
    b.target = uint32_t(BlockAt(to));
    // Backward branches close loops and are mostly taken; forward ones skip
    // code half the time.
    b.taken_permille = backward ? 875 : 500;
  }
}

size_t SimMachine::BlockAt(uint64_t off) const {
  auto it = std::upper_bound(
      program_.begin(), program_.end(), off,
      [](uint64_t o, const Block& b) { return o < b.start; });
  return it == program_.begin() ? 0 : size_t(it - program_.begin()) - 1;
}

uint64_t SimMachine::Rand(uint64_t* state, uint64_t lo, uint64_t hi) {
  assert(lo <= hi);
  uint64_t r = SplitMix(state);
  uint64_t span = hi - lo + 1;
  return span == 0 ? r : lo + r % span;
}

// ---------------------------------------------------------------------------
// Event model.

SimMachine::EventKind SimMachine::KindOf(uint32_t type, uint64_t config,
                                         uint32_t* k_ppm) {
  *k_ppm = 0;
  if (type == PERF_TYPE_HARDWARE) {
    if (config == PERF_COUNT_HW_CPU_CYCLES) return EventKind::kCycles;
    if (config == PERF_COUNT_HW_INSTRUCTIONS) return EventKind::kInstructions;
    if (config == PERF_COUNT_HW_BRANCH_INSTRUCTIONS) return EventKind::kBranches;
  }
  *k_ppm = kDerivedMinPpm +
           uint32_t(Hash(type, config) % (kDerivedMaxPpm - kDerivedMinPpm + 1));
  return EventKind::kDerived;
}

uint64_t SimMachine::Instructions(const Task& t) const {
  uint64_t cycles_in_phase =
      (t.stats.runtime_ns - t.phase_start_rt) * config_.cycles_per_ns;
  return t.phase_base_instr + cycles_in_phase * t.ipc_milli / 1000;
}

uint64_t SimMachine::Cumulative(const Task& t, EventKind kind,
                                uint32_t k_ppm) const {
  switch (kind) {
    case EventKind::kCycles:
      return t.stats.runtime_ns * config_.cycles_per_ns;
    case EventKind::kInstructions:
      return Instructions(t);
    case EventKind::kBranches:
      return t.stats.branches;
    case EventKind::kDerived:
      return uint64_t((unsigned __int128)Instructions(t) * k_ppm / 1000000);
  }
  return 0;
}

void SimMachine::NewPhase(Task& t) {
  // Called exactly at the old phase's end, so the cumulative count carries
  // over without a jump.
  t.phase_base_instr = t.phase_end_rt == 0 ? 0 : Instructions(t);
  t.phase_start_rt = t.stats.runtime_ns;
  t.ipc_milli = uint32_t(Rand(&t.rng, kIpcMinMilli, kIpcMaxMilli));
  t.phase_end_rt = t.stats.runtime_ns + Rand(&t.rng, kPhaseMinNs, kPhaseMaxNs);
}

// ---------------------------------------------------------------------------
// Lookup and public queries.

SimMachine::Task* SimMachine::Find(int32_t pid) {
  int64_t i = int64_t(pid) - kFirstSimPid;
  if (i < 0 || i >= int64_t(tasks_.size())) return nullptr;
  return &tasks_[size_t(i)];
}

const SimMachine::Task* SimMachine::Find(int32_t pid) const {
  return const_cast<SimMachine*>(this)->Find(pid);
}

bool SimMachine::HasTask(int32_t pid) const {
  const Task* t = Find(pid);
  return t != nullptr && t->state != State::kExited;
}

std::vector<int32_t> SimMachine::Pids() const {
  std::vector<int32_t> out;
  for (const Task& t : tasks_)
    if (t.state != State::kExited) out.push_back(t.pid);
  return out;
}

int SimMachine::Stats(int32_t pid, TaskStats* out) const {
  const Task* t = Find(pid);
  if (t == nullptr) return -ENOENT;
  *out = t->stats;
  if (t->state == State::kHeld) out->held_ns += now_ - t->held_since_ns;
  return 0;
}

uint64_t SimMachine::TrueCount(int32_t pid, uint32_t type,
                               uint64_t config) const {
  const Task* t = Find(pid);
  if (t == nullptr) return 0;
  uint32_t k_ppm;
  EventKind kind = KindOf(type, config, &k_ppm);
  return Cumulative(*t, kind, k_ppm);
}

// ---------------------------------------------------------------------------
// Run queues.

void SimMachine::Enqueue(int cpu, int32_t idx) {
  Task& t = tasks_[idx];
  Cpu& c = cpus_[cpu];
  t.state = State::kQueued;
  t.cpu = cpu;
  t.next = -1;
  if (c.tail < 0) {
    c.head = idx;
  } else {
    tasks_[c.tail].next = idx;
  }
  c.tail = idx;
  ++c.queued;
}

int32_t SimMachine::Dequeue(int cpu) {
  Cpu& c = cpus_[cpu];
  int32_t idx = c.head;
  if (idx < 0) return -1;
  c.head = tasks_[idx].next;
  if (c.head < 0) c.tail = -1;
  tasks_[idx].next = -1;
  --c.queued;
  return idx;
}

void SimMachine::Unlink(int cpu, int32_t idx) {
  Cpu& c = cpus_[cpu];
  int32_t prev = -1;
  for (int32_t i = c.head; i >= 0; prev = i, i = tasks_[i].next) {
    if (i != idx) continue;
    int32_t next = tasks_[i].next;
    if (prev < 0) c.head = next; else tasks_[prev].next = next;
    if (c.tail == idx) c.tail = prev;
    tasks_[i].next = -1;
    --c.queued;
    return;
  }
  assert(false && "queued task not on its CPU's queue");
}

void SimMachine::PlaceWoken(int32_t idx) {
  int best = 0;
  for (int i = 1; i < int(cpus_.size()); ++i)
    if (Load(cpus_[i].queued, cpus_[i].current) <
        Load(cpus_[best].queued, cpus_[best].current))
      best = i;
  int home = tasks_[idx].cpu;
  // Stay on the CPU it last ran on unless that one is clearly busier.
  int cpu = Load(cpus_[home].queued, cpus_[home].current) >
                    Load(cpus_[best].queued, cpus_[best].current) + 1
                ? best
                : home;
  Enqueue(cpu, idx);
}

void SimMachine::Hold(int32_t idx, uint64_t t) {
  tasks_[idx].state = State::kHeld;
  tasks_[idx].held_since_ns = t;
  held_.push_back(idx);
}

int32_t SimMachine::PickNext(int cpu, uint64_t t) {
  for (;;) {
    int32_t idx = Dequeue(cpu);
    if (idx < 0) return -1;
    if (!core_->TaskHeld(IdOf(tasks_[idx]))) return idx;
    Hold(idx, t);
  }
}

// ---------------------------------------------------------------------------
// Switching.

void SimMachine::ReadCpuState(int cpu, uint64_t t, bool same_task) {
  Cpu& c = cpus_[cpu];
  const bool running = c.current >= 0;
  c.config = running ? core_->TaskConfig(cpu, IdOf(tasks_[c.current]))
                     : TraceConfig{};
  int n = 0;
  if (max_counters_ > 0) {
    n = core_->ScheduledCounters(cpu, scratch_.data(), max_counters_);
    n = std::max(0, std::min(n, max_counters_));
  }
  Counter* old = Counters(cpu);
  c.any_pebs = false;
  for (int i = 0; i < n; ++i) {
    const ScheduledCounter& sc = scratch_[i];
    Counter& k = counter_scratch_[i];
    k = Counter{};
    k.sc = sc;
    k.kind = KindOf(sc.type, sc.config, &k.k_ppm);
    if (!running) continue;
    const Task& task = tasks_[c.current];
    k.last = Cumulative(task, k.kind, k.k_ppm);
    const int hw = sc.counter;
    const bool armable =
        config_.machine.pebs && hw >= 0 && hw < PFM_DS_MAX_PEBS_COUNTERS &&
        hw < config_.machine.gp_counters &&
        (config_.machine.pebs_counter_mask >> hw & 1u) &&
        (c.config.pebs_counters >> hw & 1u) && c.config.pebs_reset[hw] > 0;
    if (!armable) continue;
    k.pebs = true;
    k.period = c.config.pebs_reset[hw];
    k.next_pebs = k.last + k.period;
    c.any_pebs = true;
    // A re-read at a quantum boundary must not restart the period, or a
    // period longer than a quantum would never fire.
    if (!same_task) continue;
    for (int j = 0; j < c.ncounters; ++j) {
      if (old[j].pebs && old[j].sc.request == sc.request &&
          old[j].sc.counter == hw && old[j].period == k.period) {
        k.next_pebs = old[j].next_pebs;
        break;
      }
    }
  }
  std::copy(counter_scratch_.begin(), counter_scratch_.begin() + n, old);
  c.ncounters = n;
}

void SimMachine::FlushCounts(int cpu) {
  Cpu& c = cpus_[cpu];
  if (c.current < 0) return;
  const Task& task = tasks_[c.current];
  Counter* k = Counters(cpu);
  for (int i = 0; i < c.ncounters; ++i) {
    uint64_t v = Cumulative(task, k[i].kind, k[i].k_ppm);
    assert(v >= k[i].last);
    if (v == k[i].last) continue;
    core_->AddCount(k[i].sc.request, v - k[i].last);
    k[i].last = v;
  }
}

void SimMachine::SwitchTo(int cpu, uint64_t t, TaskId prev, int32_t next,
                          bool preempt) {
  Cpu& c = cpus_[cpu];
  TaskId next_id = next >= 0 ? IdOf(tasks_[next]) : TaskId{};
  core_->ContextSwitch(cpu, t, prev, next_id, preempt);
  c.current = next;
  if (next >= 0) {
    Task& task = tasks_[next];
    task.state = State::kRunning;
    task.cpu = cpu;
    ++task.stats.switches_in;
    c.slice_end_ns =
        t + Rand(&sched_rng_, config_.slice_min_ns, config_.slice_max_ns);
  }
  ReadCpuState(cpu, t, /*same_task=*/false);
}

void SimMachine::SwitchOut(int cpu, uint64_t t, bool preempt, State fate,
                           uint64_t wake_ns) {
  Cpu& c = cpus_[cpu];
  const int32_t p = c.current;
  assert(p >= 0);
  Task& prev = tasks_[p];
  FlushCounts(cpu);
  const int32_t next = PickNext(cpu, t);
  if (preempt && next < 0) {
    // Everyone waiting turned out to be held: nobody to preempt for.
    c.slice_end_ns =
        t + Rand(&sched_rng_, config_.slice_min_ns, config_.slice_max_ns);
    return;
  }
  if (preempt) {
    ++prev.stats.involuntary;
  } else {
    ++prev.stats.voluntary;
  }
  switch (fate) {
    case State::kQueued:
      Enqueue(cpu, p);
      break;
    case State::kSleeping:
      prev.state = State::kSleeping;
      prev.wake_ns = wake_ns;
      sleepers_.emplace_back(wake_ns, p);
      std::push_heap(sleepers_.begin(), sleepers_.end(), std::greater<>());
      break;
    case State::kHeld:
      Hold(p, t);
      break;
    case State::kExited:
    case State::kRunning:
      prev.state = fate;
      break;
  }
  c.current = -1;
  SwitchTo(cpu, t, IdOf(prev), next, preempt);
}

void SimMachine::EndSlice(int cpu, uint64_t t) {
  Cpu& c = cpus_[cpu];
  if (Rand(&sched_rng_, 0, 999) < config_.sleep_permille) {
    uint64_t wake =
        t + Rand(&sched_rng_, config_.sleep_min_ns, config_.sleep_max_ns);
    SwitchOut(cpu, t, /*preempt=*/false, State::kSleeping, wake);
  } else if (c.queued > 0) {
    SwitchOut(cpu, t, /*preempt=*/true, State::kQueued, 0);
  } else {
    c.slice_end_ns =
        t + Rand(&sched_rng_, config_.slice_min_ns, config_.slice_max_ns);
  }
}

bool SimMachine::AfterInterrupt(int cpu, uint64_t t) {
  Cpu& c = cpus_[cpu];
  if (c.current < 0) return false;
  if (!core_->TaskHeld(IdOf(tasks_[c.current]))) return true;
  SwitchOut(cpu, t, /*preempt=*/false, State::kHeld, 0);
  return false;
}

// ---------------------------------------------------------------------------
// Execution.

void SimMachine::StoreBts(int cpu, Task& task, const pfm_bts_raw& rec,
                          bool kernel_from, uint64_t t) {
  DsArea* area = core_->Area(cpu);
  if (area == nullptr) {
    ++task.stats.bts_dropped;
    return;
  }
  DsArea::WriteResult r = area->WriteBts(rec);
  if (r == DsArea::kDropped) {
    ++task.stats.bts_dropped;
    return;
  }
  if (kernel_from) {
    ++task.stats.bts_kernel;
  } else {
    ++task.stats.bts_user;
  }
  if (r == DsArea::kInterrupt) {
    core_->DsInterrupt(cpu, t);
    AfterInterrupt(cpu, t);
  }
}

void SimMachine::Branch(int cpu, Task& task, uint64_t t) {
  ++task.stats.branches;
  task.next_branch_rt =
      task.stats.runtime_ns +
      Rand(&task.rng, 1, 2 * config_.mean_branch_gap_ns - 1);
  uint64_t* rng = &task.rng;
  pfm_bts_raw rec{};
  bool kernel_from;
  if (task.kernel_left > 0) {
    kernel_from = true;
    const uint64_t block = Rand(rng, 2, 64);  // bytes to the branch
    rec.from = KernelWrap(task.pc + block);
    if (--task.kernel_left == 0) {
      rec.to = task.user_ret;  // sysret / iret
    } else {
      rec.to = KernelWrap(rec.from + Rand(rng, 0, 8192) - 4096);
    }
  } else {
    kernel_from = false;
    // Walk the program from the current block to the next *taken* branch: a
    // conditional branch not taken falls through to the next block without
    // a record. After kMaxFallThrough blocks the branch is taken, so a step
    // stays bounded.
    constexpr int kMaxFallThrough = 64;
    size_t bi = BlockAt(task.pc - task.text_base);
    for (int fall = 0;; ++fall) {
      const Block& b = program_[bi];
      const size_t next = bi + 1 == program_.size() ? 0 : bi + 1;
      rec.from = task.text_base + b.start + b.len;
      const uint64_t next_pc = task.text_base + program_[next].start;
      // Syscalls and interrupts are events of the run, not of the code.
      const uint64_t r = Rand(rng, 0, 999);
      if (r < config_.syscall_permille) {
        // A quarter of kernel entries are interrupts, the rest syscalls.
        rec.to = (r & 3) == 0 ? kInterruptEntry : kSyscallEntry;
        task.user_ret = next_pc;
        task.kernel_left = uint32_t(Rand(rng, config_.kernel_branches_min,
                                         config_.kernel_branches_max));
        break;
      }
      if (b.kind == BlockKind::kCall && task.depth < kCallStackDepth) {
        task.stack[task.depth++] = next_pc;
        rec.to = task.text_base + program_[b.target].start;
        break;
      }
      if (b.kind == BlockKind::kReturn && task.depth > 0) {
        rec.to = task.stack[--task.depth];
        break;
      }
      // A conditional branch, or a call (return) the stack cannot take,
      // which then jumps to its fixed target.
      if (b.kind != BlockKind::kConditional || fall == kMaxFallThrough ||
          Rand(rng, 0, 999) < b.taken_permille) {
        rec.to = task.text_base + program_[b.target].start;
        break;
      }
      bi = next;
    }
  }
  task.pc = rec.to;
  rec.flags =
      Rand(rng, 0, 999) < config_.predicted_permille ? PFM_BTS_RAW_PREDICTED : 0;
  const TraceConfig& tc = cpus_[cpu].config;
  if (kernel_from ? tc.bts_kernel : tc.bts_user)
    StoreBts(cpu, task, rec, kernel_from, t);
}

void SimMachine::CheckPebs(int cpu, Task& task, uint64_t t) {
  Cpu& c = cpus_[cpu];
  const int32_t idx = c.current;
  for (int i = 0; i < c.ncounters; ++i) {
    Counter& k = Counters(cpu)[i];
    if (!k.pebs) continue;
    const uint64_t v = Cumulative(task, k.kind, k.k_ppm);
    for (int n = 0; v >= k.next_pebs; ++n) {
      if (n == kMaxPebsPerStep) {
        k.next_pebs += ((v - k.next_pebs) / k.period + 1) * k.period;
        break;
      }
      k.next_pebs += k.period;
      WritePebs(cpu, task, k.sc.counter, t);
      if (c.current != idx) return;  // held after a DS interrupt
    }
  }
}

void SimMachine::WritePebs(int cpu, Task& task, int counter, uint64_t t) {
  uint64_t* rng = &task.rng;
  pfm_pebs_raw rec{};
  rec.flags = 0x246;  // a plausible RFLAGS (IF, ZF, PF)
  rec.eventing_ip = task.kernel_left > 0
                        ? KernelWrap(task.pc + Rand(rng, 0, 60))
                        : UserWrap(task.text_base, task.pc + Rand(rng, 0, 60));
  rec.ip = task.kernel_left > 0
               ? KernelWrap(rec.eventing_ip + Rand(rng, 1, 15))
               : UserWrap(task.text_base, rec.eventing_ip + Rand(rng, 1, 15));
  rec.gpr[7] = 0x7ffe00000000ull - uint64_t(task.pid) * 0x10000;  // rsp
  rec.applicable_counters = 1ull << counter;
  rec.data_linear_address =
      task.data_base + Rand(rng, 0, kSimUserDataBytes / 8 - 1) * 8;
  // Data source: the load-latency encoding (Linux
  // arch/x86/events/intel/ds.c, pebs_data_source, Sandy Bridge and later):
  // 0x1 L1, 0x2 LFB, 0x3 L2, 0x4 L3 hit, 0x0 L3 miss.
  uint64_t r = Rand(rng, 0, 99);
  if (r < 70) {
    rec.data_source = 0x1, rec.latency = Rand(rng, 4, 7);
  } else if (r < 80) {
    rec.data_source = 0x2, rec.latency = Rand(rng, 8, 20);
  } else if (r < 90) {
    rec.data_source = 0x3, rec.latency = Rand(rng, 12, 20);
  } else if (r < 97) {
    rec.data_source = 0x4, rec.latency = Rand(rng, 30, 60);
  } else {
    rec.data_source = 0x0, rec.latency = Rand(rng, 150, 400);
  }
  rec.tsc = t;
  DsArea* area = core_->Area(cpu);
  DsArea::WriteResult w = area != nullptr ? area->WritePebs(rec)
                                          : DsArea::kDropped;
  if (w == DsArea::kDropped) {
    ++task.stats.pebs_dropped;
    return;
  }
  ++task.stats.pebs;
  if (w == DsArea::kInterrupt) {
    core_->DsInterrupt(cpu, t);
    AfterInterrupt(cpu, t);
  }
}

bool SimMachine::Execute(int cpu, uint64_t* t, uint64_t until) {
  Cpu& c = cpus_[cpu];
  const int32_t idx = c.current;
  Task& task = tasks_[idx];
  // Invariant: next_branch_rt and phase_end_rt lie ahead of runtime, so
  // every step is at least 1 ns and branch times strictly increase.
  while (*t < until) {
    uint64_t& rt = task.stats.runtime_ns;
    assert(task.next_branch_rt > rt && task.phase_end_rt > rt);
    uint64_t step = std::min({until - *t, task.next_branch_rt - rt,
                              task.phase_end_rt - rt});
    rt += step;
    *t += step;
    if (rt == task.phase_end_rt) NewPhase(task);
    if (rt == task.next_branch_rt) {
      Branch(cpu, task, *t);
      if (c.current != idx) return false;
    }
    if (c.any_pebs) {
      CheckPebs(cpu, task, *t);
      if (c.current != idx) return false;
    }
  }
  return true;
}

void SimMachine::RunCpu(int cpu, uint64_t from, uint64_t to) {
  Cpu& c = cpus_[cpu];
  uint64_t t = from;
  while (t < to) {
    if (c.current < 0) {
      const int32_t next = PickNext(cpu, t);
      if (next < 0) return;  // idle until the next boundary
      SwitchTo(cpu, t, TaskId{}, next, /*preempt=*/false);
      continue;
    }
    const uint64_t until = std::min(to, c.slice_end_ns);
    if (!Execute(cpu, &t, until)) continue;
    if (t == c.slice_end_ns) EndSlice(cpu, t);
  }
}

// ---------------------------------------------------------------------------
// Quantum boundaries.

void SimMachine::Boundary(uint64_t t) {
  // Wake sleepers. Entries of exited tasks are skipped here (lazy delete).
  while (!sleepers_.empty() && sleepers_.front().first <= t) {
    std::pop_heap(sleepers_.begin(), sleepers_.end(), std::greater<>());
    const int32_t idx = sleepers_.back().second;
    sleepers_.pop_back();
    if (tasks_[idx].state == State::kSleeping) PlaceWoken(idx);
  }
  // Release held tasks the core no longer holds.
  size_t keep = 0;
  for (size_t i = 0; i < held_.size(); ++i) {
    Task& task = tasks_[held_[i]];
    if (task.state != State::kHeld) continue;
    if (core_->TaskHeld(IdOf(task))) {
      held_[keep++] = held_[i];
      continue;
    }
    task.stats.held_ns += t - task.held_since_ns;
    PlaceWoken(held_[i]);
  }
  held_.resize(keep);
  // Migrate one waiting task from the busiest to the idlest CPU.
  int hi = 0, lo = 0;
  for (int i = 1; i < int(cpus_.size()); ++i) {
    if (Load(cpus_[i].queued, cpus_[i].current) >
        Load(cpus_[hi].queued, cpus_[hi].current))
      hi = i;
    if (Load(cpus_[i].queued, cpus_[i].current) <
        Load(cpus_[lo].queued, cpus_[lo].current))
      lo = i;
  }
  if (cpus_[hi].queued > 0 && Load(cpus_[hi].queued, cpus_[hi].current) >=
                                  Load(cpus_[lo].queued, cpus_[lo].current) + 2)
    Enqueue(lo, Dequeue(hi));

  for (int cpu = 0; cpu < int(cpus_.size()); ++cpu) {
    Cpu& c = cpus_[cpu];
    FlushCounts(cpu);
    core_->Tick(cpu, t);
    if (c.current >= 0 && core_->TaskHeld(IdOf(tasks_[c.current]))) {
      SwitchOut(cpu, t, /*preempt=*/false, State::kHeld, 0);
      continue;
    }
    ReadCpuState(cpu, t, /*same_task=*/true);
  }
}

void SimMachine::Run(uint64_t ns) {
  const uint64_t target = now_ + ns;
  while (now_ < target) {
    // Lazily at the start of the quantum, so that a caller's change between
    // two Run() calls (e.g. a task's hold) is seen at once.
    if (now_ == next_boundary_) {
      Boundary(now_);
      next_boundary_ += config_.quantum_ns;
    }
    const uint64_t end = std::min(target, next_boundary_);
    for (int cpu = 0; cpu < int(cpus_.size()); ++cpu) RunCpu(cpu, now_, end);
    now_ = end;
  }
  // So that, between runs, what AddCount delivered is all that was counted.
  for (int cpu = 0; cpu < int(cpus_.size()); ++cpu) FlushCounts(cpu);
}

int SimMachine::ExitTask(int32_t pid, int64_t status, ErrorDetail* detail) {
  Task* task = Find(pid);
  if (task == nullptr || task->state == State::kExited)
    return SetError(detail, -ENOENT, "sim: no live task with pid %d", pid);
  const int32_t idx = int32_t(task - tasks_.data());
  switch (task->state) {
    case State::kRunning:
      SwitchOut(task->cpu, now_, /*preempt=*/false, State::kExited, 0);
      break;
    case State::kQueued:
      Unlink(task->cpu, idx);
      break;
    case State::kHeld:
      task->stats.held_ns += now_ - task->held_since_ns;
      break;
    case State::kSleeping:  // its heap entry is skipped when it comes up
    case State::kExited:
      break;
  }
  task->state = State::kExited;
  core_->TaskExit(IdOf(*task), now_, status);
  return 0;
}

}  // namespace pfm
