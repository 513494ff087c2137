// The simulated machine (DESIGN §5, driver "sim"): CPUs running synthetic
// tasks in virtual time, producing what a real PMU would produce and
// reporting it to the core through CoreHooks.
//
// Model, in short (docs/sim.md has the full statement):
//  - Virtual time advances in quanta of `quantum_ns`. At every quantum
//    boundary the machine wakes sleepers, re-checks held tasks, balances run
//    queues (the only moment a task may migrate), then for each CPU in index
//    order calls Tick, re-checks TaskHeld / TaskConfig / ScheduledCounters of
//    the running task, and runs that CPU to the next boundary.
//  - Tasks (pids kFirstSimPid, +1, ...; tid == pid) run slices of random
//    length; a slice ends in a sleep (voluntary switch) or, when others are
//    waiting, a preemption (involuntary). Idle is TaskId{0, 0}.
//  - Each task executes a synthetic code model: taken branches in its own
//    user text range, syscalls into and returns out of a kernel range.
//    Branches whose `from` privilege is enabled in the task's TraceConfig are
//    stored with DsArea::WriteBts.
//  - Events are cumulative functions of a task's run time (cycles, phase
//    dependent instructions, taken branches, derived events), so the deltas
//    passed to AddCount sum exactly to TrueCount().
//  - PEBS: an armed, scheduled GP counter stores one record each time its
//    events since arming cross a multiple of TraceConfig::pebs_reset[c].
//
// Determinism: the same SimConfig (incl. seed) and the same answers from the
// core give the same sequence of CoreHooks calls and the same records. No
// wall clock, no std::random_device, no unordered iteration.
//
// Allocation: every container is sized at construction; Run() and the
// per-branch path do not allocate.
//
// Thread-safety: none. The caller serialises all calls; CoreHooks are
// called from the thread calling Run() / ExitTask().
#ifndef PFM_KERNEL_DRIVERS_SIM_SIM_MACHINE_H_
#define PFM_KERNEL_DRIVERS_SIM_SIM_MACHINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

inline constexpr int32_t kFirstSimPid = 1000;
inline constexpr int kMaxSimTasks = 1 << 20;
// Upper bound on counters the core may schedule on one CPU at a time.
inline constexpr int kMaxSimScheduledCounters = 64;

// Synthetic address layout (x86-64 flavoured, distinct per task).
inline constexpr uint64_t kSimUserTextBase = 0x400000;
inline constexpr uint64_t kSimUserTextStride = 0x100000;  // per task
inline constexpr uint64_t kSimUserTextBytes = 0x10000;    // 64 KiB of text
inline constexpr uint64_t kSimUserDataBase = 0x7f0000000000;
inline constexpr uint64_t kSimUserDataStride = 0x100000;  // per task
inline constexpr uint64_t kSimUserDataBytes = 0x100000;   // 1 MiB of data
inline constexpr uint64_t kSimKernelTextBase = 0xffffffff81000000;
inline constexpr uint64_t kSimKernelTextBytes = 0x1000000;  // 16 MiB

struct SimConfig {
  MachineInfo machine;  // cpus, gp/fixed counters, pebs_counter_mask, ...
  int tasks = 8;        // pids kFirstSimPid ...; tid == pid
  uint64_t seed = 1;
  uint64_t quantum_ns = 10000;  // boundary period: Tick and re-checks
  uint64_t mean_branch_gap_ns = 1000;  // virtual ns between taken branches
  uint64_t slice_min_ns = 50000;       // run slice length, uniform
  uint64_t slice_max_ns = 500000;
  uint64_t sleep_min_ns = 20000;       // sleep length after a voluntary end
  uint64_t sleep_max_ns = 2000000;
  uint32_t sleep_permille = 400;     // slice ends in a sleep (else preempt)
  uint32_t syscall_permille = 20;    // a user branch enters the kernel
  uint32_t kernel_branches_min = 4;  // taken branches per kernel stretch
  uint32_t kernel_branches_max = 40;
  uint32_t predicted_permille = 900;  // PFM_BTS_RAW_PREDICTED is set
  uint64_t cycles_per_ns = 3;         // 3 GHz
};

class SimMachine {
 public:
  struct TaskStats {
    uint64_t runtime_ns = 0;
    uint64_t switches_in = 0;
    uint64_t voluntary = 0;    // switched out without preemption
    uint64_t involuntary = 0;  // preempted
    uint64_t branches = 0;     // taken branches executed, traced or not
    uint64_t bts_user = 0;     // BTS records stored, by privilege of `from`
    uint64_t bts_kernel = 0;
    uint64_t bts_dropped = 0;  // WriteBts returned kDropped
    uint64_t pebs = 0;         // PEBS records stored
    uint64_t pebs_dropped = 0;
    uint64_t held_ns = 0;  // time held (TaskHeld) while otherwise runnable
  };

  // Checks what the constructor asserts: -EINVAL naming the bad field.
  static int ValidateConfig(const SimConfig& config, ErrorDetail* detail);
  // ValidateConfig, then construct. `core` is not owned and must outlive
  // the machine.
  static int Create(const SimConfig& config, CoreHooks* core,
                    std::unique_ptr<SimMachine>* out, ErrorDetail* detail);

  // `config` must pass ValidateConfig (asserted). Makes no CoreHooks call;
  // the first Run() starts the tasks at virtual time 0.
  SimMachine(const SimConfig& config, CoreHooks* core);
  SimMachine(const SimMachine&) = delete;
  SimMachine& operator=(const SimMachine&) = delete;

  // Advances every CPU by `ns` of virtual time. `ns` need not be a multiple
  // of the quantum; boundaries stay at multiples of quantum_ns, and the one
  // at now() (if due) runs at the start of the next Run(). Before returning
  // it passes every running task's pending counts to AddCount.
  void Run(uint64_t ns);
  uint64_t now() const { return now_; }

  bool HasTask(int32_t pid) const;  // alive (not exited)
  std::vector<int32_t> Pids() const;  // alive pids, ascending

  // Ends `pid` at now(): if running, switches it out (voluntary; the CPU
  // takes its next waiting task, or idles); if waiting, drops it from its
  // run queue; then calls core->TaskExit. -ENOENT if there is no such live
  // task. Its Stats stay readable.
  int ExitTask(int32_t pid, int64_t status, ErrorDetail* detail = nullptr);

  // Stats of a live or exited task; -ENOENT for a pid never simulated.
  int Stats(int32_t pid, TaskStats* out) const;

  // Exact number of events of (type, config) `pid` generated so far,
  // counted or not: the ground truth a multiplexed, scaled counter
  // estimates. 0 for an unknown pid.
  uint64_t TrueCount(int32_t pid, uint32_t type, uint64_t config) const;

  const SimConfig& config() const { return config_; }

 private:
  enum class State : uint8_t { kQueued, kRunning, kSleeping, kHeld, kExited };
  enum class EventKind : uint8_t {
    kCycles,
    kInstructions,
    kBranches,
    kDerived
  };

  struct Task {
    int32_t pid = 0;
    State state = State::kQueued;
    int cpu = 0;         // running or queued on / last ran on
    int32_t next = -1;   // run-queue link (task index)
    uint64_t rng = 0;    // code model and phases
    uint64_t wake_ns = 0;
    uint64_t held_since_ns = 0;
    // Code model.
    uint64_t text_base = 0;
    uint64_t data_base = 0;
    uint64_t pc = 0;         // start of the current basic block
    uint64_t user_ret = 0;   // where the kernel returns to
    uint32_t kernel_left = 0;  // >0: in the kernel, branches until return
    uint32_t depth = 0;        // call stack depth (<= kStack)
    uint64_t stack[8] = {};
    // Event model: all functions of runtime.
    uint64_t next_branch_rt = 0;
    uint64_t phase_start_rt = 0;
    uint64_t phase_end_rt = 0;
    uint64_t phase_base_instr = 0;
    uint32_t ipc_milli = 1000;
    TaskStats stats;
  };

  struct Counter {  // a scheduled counter on a CPU, as the core told us
    ScheduledCounter sc;
    EventKind kind = EventKind::kDerived;
    uint32_t k_ppm = 0;    // kDerived: events per million instructions
    uint64_t last = 0;     // cumulative value already passed to AddCount
    bool pebs = false;     // armed for PEBS
    uint64_t period = 0;   // PEBS period in events
    uint64_t next_pebs = 0;  // cumulative value of the next PEBS record
  };

  struct Cpu {
    int32_t current = -1;  // task index, -1 = idle
    uint64_t slice_end_ns = 0;
    int32_t head = -1, tail = -1;  // run queue (intrusive FIFO)
    int queued = 0;
    TraceConfig config;
    int ncounters = 0;
    bool any_pebs = false;
  };

  static EventKind KindOf(uint32_t type, uint64_t config, uint32_t* k_ppm);
  uint64_t Cumulative(const Task& t, EventKind kind, uint32_t k_ppm) const;
  uint64_t Instructions(const Task& t) const;
  static TaskId IdOf(const Task& t) { return TaskId{t.pid, t.pid}; }
  Task* Find(int32_t pid);
  const Task* Find(int32_t pid) const;
  Counter* Counters(int cpu) { return &counters_[size_t(cpu) * max_counters_]; }

  void Boundary(uint64_t t);
  void RunCpu(int cpu, uint64_t from, uint64_t to);
  // Runs the current task of `cpu` from *t to `until`; returns false if it
  // was switched out on the way (held after a DS interrupt).
  bool Execute(int cpu, uint64_t* t, uint64_t until);
  void Branch(int cpu, Task& task, uint64_t t);
  void StoreBts(int cpu, Task& task, const pfm_bts_raw& rec, bool kernel_from,
                uint64_t t);
  void CheckPebs(int cpu, Task& task, uint64_t t);
  void WritePebs(int cpu, Task& task, int counter, uint64_t t);
  // After a DS interrupt: switches the running task out if the core holds
  // it. Returns false in that case.
  bool AfterInterrupt(int cpu, uint64_t t);
  void EndSlice(int cpu, uint64_t t);
  // Switches the running task of `cpu` out at `t` (it goes to `fate`) and
  // the next runnable task of the CPU's queue (or idle) in. A preemption
  // with nobody runnable keeps the task running on a new slice instead.
  void SwitchOut(int cpu, uint64_t t, bool preempt, State fate,
                 uint64_t wake_ns);
  void SwitchTo(int cpu, uint64_t t, TaskId prev, int32_t next, bool preempt);
  // Re-reads TaskConfig and ScheduledCounters; `same_task` keeps the PEBS
  // progress of counters that stay armed.
  void ReadCpuState(int cpu, uint64_t t, bool same_task);
  void FlushCounts(int cpu);
  void NewPhase(Task& task);
  static uint64_t Rand(uint64_t* state, uint64_t lo, uint64_t hi);  // [lo,hi]
  void Enqueue(int cpu, int32_t idx);
  int32_t Dequeue(int cpu);
  void Unlink(int cpu, int32_t idx);
  // Dequeues until a task the core does not hold; held ones go to held_.
  int32_t PickNext(int cpu, uint64_t t);
  void PlaceWoken(int32_t idx);
  void Hold(int32_t idx, uint64_t t);

  SimConfig config_;
  CoreHooks* core_;
  uint64_t now_ = 0;
  uint64_t next_boundary_ = 0;  // next boundary not yet processed
  uint64_t sched_rng_ = 0;
  int max_counters_ = 0;
  std::vector<Task> tasks_;
  std::vector<Cpu> cpus_;
  std::vector<Counter> counters_;        // cpus x max_counters_
  std::vector<Counter> counter_scratch_;
  std::vector<ScheduledCounter> scratch_;  // ScheduledCounters() buffer
  std::vector<std::pair<uint64_t, int32_t>> sleepers_;  // min-heap by wake
  std::vector<int32_t> held_;

  // The user program every task runs, at its own text base (docs/sim.md,
  // "Code model"): basic blocks laid out back to back over the text, each
  // ending in a branch whose kind and target never change, so loops and
  // calls revisit the same branches as real code does.
  enum class BlockKind : uint8_t { kConditional, kCall, kReturn };
  struct Block {
    uint32_t start = 0;   // offset of the block in the text
    uint32_t len = 0;     // bytes from the start to its branch
    uint32_t target = 0;  // block index the branch goes to when taken
    uint16_t taken_permille = 0;  // conditional: taken probability
    BlockKind kind = BlockKind::kConditional;
  };
  void BuildProgram();
  // The block holding text offset `off` (the last one starting at or below).
  size_t BlockAt(uint64_t off) const;
  std::vector<Block> program_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_SIM_SIM_MACHINE_H_
