// PmuArbiter: who may use the PMU's counters and debug registers, and when.
//
// Requests (struct pfm_pmu_req) ask for one hardware counter or one debug
// register in a context: a task (counts only while that task runs) or a CPU
// (counts whatever runs there). On a CPU, the hardware holds at once the
// CPU context's requests and the running task's requests.
//
// - Pinned requests (PFM_REQ_PINNED or PFM_REQ_NO_MULTIPLEX) are on the
//   hardware whenever their context is active. Add admits one only if that
//   can be guaranteed on every CPU; otherwise it returns -ENOSPC with a
//   message naming the resource and its holders, and changes nothing.
// - Flexible requests are always admitted and multiplexed: free slots are
//   dealt round-robin across sessions (max-min fair between sessions, not
//   between events), rotating once per mux interval of the context's own
//   clock (a task's run time, wherever it runs) and only when
//   oversubscribed; a switched-in task resumes its round. Breakpoints are
//   multiplexed too, beyond the debug registers pinned ones leave free.
// - Every request reports value, time_enabled, time_running and a scaled
//   estimate; a request that never ran is "not counted", never 0.
//
// This is a pure library: no OS calls, no threads, no clock of its own. Every
// call that depends on time carries `now` (ns on the driver's clock,
// non-decreasing per CPU). SwitchIn, SwitchOut and Tick do O(slots) work
// regardless of how many flexible requests wait (see work_units()); they do
// not allocate. Add/Remove/Describe are the control path and may allocate.
//
// Thread-safety: none. The caller (the kernel facade) serialises all calls.
// Policy details: docs/arbiter.md.
//
// This class is the front over the parts in this folder: admission.h
// (validation, pinned admission, refusal messages), flexible_pool.h
// (session queues, the deal, rotation), cpu_slots.h (one CPU's slots),
// context.h (task and CPU contexts) and request.h (the data model). Here:
// the contexts' lifecycle and clocks, the per-CPU switch and timer, and
// readings.
#ifndef PFM_KERNEL_PMU_ARBITER_ARBITER_H_
#define PFM_KERNEL_PMU_ARBITER_ARBITER_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/pmu_arbiter/request.h"  // RequestId, kFixedCounterBase
#include "kernel/running_tasks.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

namespace arbiter_internal {
class Admission;
struct Context;
struct ContextTable;
}  // namespace arbiter_internal

inline constexpr uint64_t kDefaultMuxIntervalNs = 4'000'000;  // 4 ms

class PmuArbiter {
 public:
  static constexpr int kLabelBytes = arbiter_internal::kLabelBytes;  // 48

  // `m` gives the shape: cpus (> 0), gp_counters and fixed_counters (each
  // clamped to 32), pebs_counter_mask (restricted to the GP counters) and
  // debug_registers (clamped to 32). `mux_interval_ns` > 0 (the caller's
  // default is kDefaultMuxIntervalNs).
  // Inside the Kernel: what runs where is `running` (kernel/running_tasks.h),
  // which the caller sets before SwitchIn and which outlives this.
  PmuArbiter(const MachineInfo& m, uint64_t mux_interval_ns,
             const RunningTasks* running);
  // On its own (tests, benchmarks): a table of its own, written by
  // SwitchIn/SwitchOut.
  PmuArbiter(const MachineInfo& m, uint64_t mux_interval_ns);
  ~PmuArbiter();
  PmuArbiter(const PmuArbiter&) = delete;
  PmuArbiter& operator=(const PmuArbiter&) = delete;

  // Admission. Returns a RequestId (> 0) or a negative errno, with `d` (may be
  // null) filled with one sentence:
  //   -EINVAL      bad kind/flags/context, pid <= 0, cpu out of range, bad
  //                breakpoint type/length/alignment/address range, or a perf
  //                type that needs no PMU counter (software, tracepoint);
  //   -EOPNOTSUPP  the machine has no resource that could ever serve it
  //                (no debug registers, no PEBS-capable counter, no counter);
  //   -ENOSPC      pinned/no_multiplex and not always schedulable; the
  //                message names the resource, the context(s) and holders.
  // Flexible requests are always admitted (they wait for a slot). `session`
  // owns the request (fair share, holder names); `label` (copied, truncated
  // to kLabelBytes-1, may be null) names it in messages and Describe. A new
  // request reaches the hardware at the next SwitchIn or Tick of its CPU.
  int Add(const pfm_pmu_req& req, uint64_t session, const char* label,
          uint64_t now, ErrorDetail* d);
  // Frees the request and its slot at once (the next SwitchIn/Tick may fill
  // the slot). Safe on unknown ids and twice. The id's reading is gone.
  void Remove(RequestId id, uint64_t now);
  void RemoveSession(uint64_t session, uint64_t now);

  // Scheduling, per CPU. `cpu` out of range is ignored (Scheduled* return
  // -EINVAL). A task context is on the hardware of at most one CPU at a
  // time: a second CPU switching in the same pid (another thread) gets only
  // its CPU context until the first CPU switches the pid out; then the
  // context moves to it at once.
  void SwitchOut(int cpu, uint64_t now);  // the running task's requests off
  // `task` (pid 0 = idle) starts: installs the pinned requests and the
  // current flexible round of the CPU context and the task context. Implies
  // SwitchOut of a task still switched in.
  void SwitchIn(int cpu, TaskId task, uint64_t now);
  // The mux timer: if requests were added/removed for this CPU's contexts,
  // refills its slots; then each context here that is oversubscribed and
  // whose own clock advanced a mux interval since its last rotation rotates
  // its flexible requests.
  void Tick(int cpu, uint64_t now);

  // Counters on the hardware of `cpu` now (fixed first, then GP, by index);
  // writes at most `max`, returns how many were written.
  int Scheduled(int cpu, ScheduledCounter* out, int max) const;
  // out_by_slot[debug_registers]: the request in each debug register, 0 =
  // free. Returns the number of occupied registers.
  int ScheduledBreakpoints(int cpu, RequestId* out_by_slot) const;
  // Holder of hardware counter `counter` on `cpu` now (PEBS routing), or 0.
  RequestId OnCounter(int cpu, int counter) const;
  // Adds what a scheduled counter counted. Unknown ids are ignored (a count
  // may race with Remove). No allocation.
  void AddCount(RequestId id, uint64_t delta);

  struct Reading {
    bool counted = false;  // false: never on hardware (time_running == 0)
    uint64_t value = 0;
    uint64_t time_enabled = 0;  // context active since the request was added
    uint64_t time_running = 0;  // on hardware
    double ratio = 0;           // running / enabled (0 when not counted)
    double scaled = 0;          // value * enabled / running (0 if not counted)
  };
  // Exact at any `now` (includes the interval in progress). -ENOENT if the
  // id is unknown or removed.
  int Read(RequestId id, uint64_t now, Reading* out) const;

  struct Holder {
    int cpu;      // CPU context's cpu; -1 for a task context
    int32_t pid;  // task context's pid; -1 for a CPU context
    bool breakpoint;
    char slot[8];  // "gp3", "fixed0", "dr1", or "-" while waiting
    int on_cpu;    // where it is on hardware now, -1 if waiting
    RequestId id;
    uint64_t session;
    char label[kLabelBytes];
    bool pinned;
    bool on_hw;
    double ratio;  // < 0: not counted yet
  };
  // Every request, ordered by id ("who is using the PMU?"). Control path.
  void Describe(uint64_t now, std::vector<Holder>* out) const;

  // From now on `o` (null: nobody) is told of every request going on or off
  // hardware (ScheduleChange, request.h); it must outlive the arbiter or be
  // reset first.
  void set_schedule_observer(ScheduleObserver* o);
  // Tells the observer, as going on at `now`, each request of `session`
  // that is on hardware now: the state a newly attached listener starts
  // from. O(CPUs x slots).
  void TellOnHardware(uint64_t session, uint64_t now) const;

  // Scheduling work done so far: slots cleared and filled, pinned requests
  // visited, flexible requests visited or picked by a deal, and placed
  // requests moved by a rotation. Lets tests check O(slots) switches that do
  // the same work however many requests wait.
  uint64_t work_units() const { return work_units_; }
  // Rotations so far: a context's flexible requests moving on to their next
  // round (once per mux interval of the context's clock, only while
  // oversubscribed). pfmd's /metrics reports it.
  uint64_t rotations() const { return rotations_; }

  int gp_counters() const { return shape_.gp_counters; }
  int fixed_counters() const { return shape_.fixed_counters; }
  int debug_registers() const { return shape_.debug_registers; }

 private:
  using Context = arbiter_internal::Context;
  using Request = arbiter_internal::Request;
  struct Cpu;  // one CPU: its slots and what runs there

  Context* GetOrCreateContext(const pfm_pmu_req& req, uint64_t now);
  void MaybeDeleteContext(Context* c);
  void MarkDirty(const Context* c);
  bool MaybeRotate(Context* c, uint64_t now);
  void Rebuild(int cpu_index, uint64_t now);

  std::unique_ptr<RunningTasks> own_running_;  // only when on its own
  const RunningTasks* running_;
  const arbiter_internal::PmuShape shape_;
  ScheduleObserver* schedule_observer_ = nullptr;
  const uint64_t mux_interval_ns_;
  const std::unique_ptr<const arbiter_internal::Admission> admission_;
  const std::unique_ptr<arbiter_internal::ContextTable> contexts_;
  RequestId next_id_ = 1;
  uint64_t work_units_ = 0;
  uint64_t rotations_ = 0;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<std::unique_ptr<Cpu>> cpu_;  // [cpus]
};

}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_ARBITER_H_
