// A CoreHooks implementation for driver tests (testonly).
//
// Owns one DsArea per CPU and drains it, on DsInterrupt and ContextSwitch,
// into per-task logs attributed to the task the fake believes is running on
// that CPU. Records every switch and exit, sums AddCount per request, and
// answers TaskConfig / TaskHeld / ScheduledCounters from what the test set.
//
// It also checks the driver's side of the contract and counts violations
// (first one described in first_violation()): per-CPU times go backwards,
// a switch's `prev` is not what runs on the CPU, a task is switched in while
// running elsewhere or after its exit, a task's events go back in time,
// records are drained while the CPU is idle.
//
// Not thread-safe, like the drivers it serves.
#ifndef PFM_KERNEL_DRIVERS_SIM_FAKE_CORE_H_
#define PFM_KERNEL_DRIVERS_SIM_FAKE_CORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/ds/ds_area.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

class FakeCore : public CoreHooks {
 public:
  struct Options {
    uint32_t bts_records = 1024;
    uint32_t bts_threshold = 768;
    uint32_t pebs_records = 64;
    uint32_t pebs_threshold = 48;
    bool keep_records = true;  // false: count records, don't store them
    // Every task running at a DsInterrupt becomes held (as a full blocking
    // consumer would make it).
    bool hold_on_interrupt = false;
  };

  struct TaskLog {
    std::vector<pfm_bts_raw> bts;
    std::vector<uint64_t> bts_drain_ns;  // when each BTS record was drained
    std::vector<pfm_pebs_raw> pebs;
    uint64_t bts_total = 0;
    uint64_t pebs_total = 0;
    uint64_t switches_in = 0;
    uint64_t switches_out = 0;
    uint64_t last_ns = 0;  // latest event time seen for this task
    bool exited = false;
    int64_t exit_status = 0;
  };

  struct Switch {
    int cpu;
    uint64_t now_ns;
    TaskId prev;
    TaskId next;
    bool preempt;
  };

  FakeCore(int cpus, const Options& options);
  explicit FakeCore(int cpus) : FakeCore(cpus, Options()) {}

  // Test knobs. pid 0 sets the default for tasks without their own entry.
  void SetConfig(int32_t pid, const TraceConfig& config);
  void SetCounters(int32_t pid, const std::vector<ScheduledCounter>& counters);
  void SetHeld(int32_t pid, bool held);

  // Observations.
  const TaskLog* Log(int32_t pid) const;  // nullptr if never seen
  const std::map<int32_t, TaskLog>& logs() const { return logs_; }
  const std::vector<Switch>& switches() const { return switches_; }
  uint64_t count(uint32_t request) const;
  uint64_t ticks() const { return ticks_; }
  uint64_t interrupts() const { return interrupts_; }
  uint64_t add_count_calls() const { return add_count_calls_; }
  // Hash of every call and record, in order: equal hashes, equal histories.
  uint64_t trace_hash() const { return hash_; }
  uint64_t violations() const { return violations_; }
  const std::string& first_violation() const { return first_violation_; }
  int32_t running(int cpu) const { return running_[cpu]; }

  // CoreHooks.
  DsArea* Area(int cpu) override;
  void DsInterrupt(int cpu, uint64_t now_ns) override;
  void ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                     bool preempt) override;
  void TaskExit(TaskId task, uint64_t now_ns, int64_t status) override;
  TraceConfig TaskConfig(int cpu, TaskId task) override;
  bool TaskHeld(TaskId task) override;
  int ScheduledCounters(int cpu, ScheduledCounter* out, int max) override;
  void AddCount(uint32_t request, uint64_t delta) override;
  void Tick(int cpu, uint64_t now_ns) override;

 private:
  void Mix(uint64_t v);
  void Violation(const std::string& what);
  void CpuTime(int cpu, uint64_t now_ns);
  void TaskTime(int32_t pid, uint64_t now_ns);
  void Drain(int cpu, uint64_t now_ns);

  Options options_;
  std::vector<std::unique_ptr<DsArea>> areas_;
  std::vector<int32_t> running_;  // pid per CPU, 0 = idle
  std::vector<uint64_t> cpu_ns_;  // latest time per CPU
  std::map<int32_t, int> running_on_;  // pid -> cpu
  std::map<int32_t, TaskLog> logs_;
  std::map<int32_t, TraceConfig> configs_;
  std::map<int32_t, std::vector<ScheduledCounter>> counters_;
  std::map<int32_t, bool> held_;
  std::map<uint32_t, uint64_t> counts_;
  std::vector<Switch> switches_;
  uint64_t ticks_ = 0;
  uint64_t interrupts_ = 0;
  uint64_t add_count_calls_ = 0;
  uint64_t hash_ = 0xcbf29ce484222325ull;
  uint64_t violations_ = 0;
  std::string first_violation_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_SIM_FAKE_CORE_H_
