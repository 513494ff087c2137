#include "kernel/drivers/sim/fake_core.h"

#include <algorithm>
#include <cassert>

namespace pfm {

FakeCore::FakeCore(int cpus, const Options& options)
    : options_(options), running_(cpus, 0), cpu_ns_(cpus, 0) {
  for (int i = 0; i < cpus; ++i)
    areas_.push_back(std::make_unique<DsArea>(
        i, options.bts_records, options.bts_threshold, options.pebs_records,
        options.pebs_threshold));
}

void FakeCore::SetConfig(int32_t pid, const TraceConfig& config) {
  configs_[pid] = config;
}

void FakeCore::SetCounters(int32_t pid,
                           const std::vector<ScheduledCounter>& counters) {
  counters_[pid] = counters;
}

void FakeCore::SetHeld(int32_t pid, bool held) { held_[pid] = held; }

const FakeCore::TaskLog* FakeCore::Log(int32_t pid) const {
  auto it = logs_.find(pid);
  return it == logs_.end() ? nullptr : &it->second;
}

uint64_t FakeCore::count(uint32_t request) const {
  auto it = counts_.find(request);
  return it == counts_.end() ? 0 : it->second;
}

void FakeCore::Mix(uint64_t v) {
  // FNV-1a over the 8 bytes of v.
  for (int i = 0; i < 8; ++i) {
    hash_ ^= (v >> (8 * i)) & 0xff;
    hash_ *= 0x100000001b3ull;
  }
}

void FakeCore::Violation(const std::string& what) {
  if (violations_++ == 0) first_violation_ = what;
}

void FakeCore::CpuTime(int cpu, uint64_t now_ns) {
  if (now_ns < cpu_ns_[cpu])
    Violation("cpu " + std::to_string(cpu) + ": time " +
              std::to_string(now_ns) + " before " +
              std::to_string(cpu_ns_[cpu]));
  cpu_ns_[cpu] = std::max(cpu_ns_[cpu], now_ns);
}

void FakeCore::TaskTime(int32_t pid, uint64_t now_ns) {
  if (pid == 0) return;
  TaskLog& log = logs_[pid];
  if (now_ns < log.last_ns)
    Violation("pid " + std::to_string(pid) + ": time " +
              std::to_string(now_ns) + " before " +
              std::to_string(log.last_ns));
  log.last_ns = std::max(log.last_ns, now_ns);
}

void FakeCore::Drain(int cpu, uint64_t now_ns) {
  DsArea* area = areas_[cpu].get();
  const int32_t pid = running_[cpu];
  if ((area->bts_count() > 0 || area->pebs_count() > 0) && pid == 0)
    Violation("cpu " + std::to_string(cpu) + ": records while idle");
  TaskLog& log = logs_[pid];
  for (size_t i = 0; i < area->bts_count(); ++i) {
    const pfm_bts_raw& r = area->bts_records()[i];
    Mix(r.from);
    Mix(r.to);
    Mix(r.flags);
    ++log.bts_total;
    if (options_.keep_records) {
      log.bts.push_back(r);
      log.bts_drain_ns.push_back(now_ns);
    }
  }
  for (size_t i = 0; i < area->pebs_count(); ++i) {
    const pfm_pebs_raw& r = area->pebs_records()[i];
    Mix(r.ip);
    Mix(r.data_linear_address);
    Mix(r.tsc);
    ++log.pebs_total;
    if (options_.keep_records) log.pebs.push_back(r);
  }
  area->ResetBts();
  area->ResetPebs();
}

DsArea* FakeCore::Area(int cpu) {
  assert(cpu >= 0 && cpu < int(areas_.size()));
  return areas_[cpu].get();
}

void FakeCore::DsInterrupt(int cpu, uint64_t now_ns) {
  ++interrupts_;
  Mix(1);
  Mix(uint64_t(cpu));
  Mix(now_ns);
  CpuTime(cpu, now_ns);
  TaskTime(running_[cpu], now_ns);
  Drain(cpu, now_ns);
  if (options_.hold_on_interrupt && running_[cpu] != 0)
    held_[running_[cpu]] = true;
}

void FakeCore::ContextSwitch(int cpu, uint64_t now_ns, TaskId prev,
                             TaskId next, bool preempt) {
  Mix(2);
  Mix(uint64_t(cpu));
  Mix(now_ns);
  Mix(uint64_t(uint32_t(prev.pid)));
  Mix(uint64_t(uint32_t(next.pid)));
  Mix(preempt);
  CpuTime(cpu, now_ns);
  if (prev.pid != running_[cpu])
    Violation("cpu " + std::to_string(cpu) + ": switch from " +
              std::to_string(prev.pid) + " but " +
              std::to_string(running_[cpu]) + " runs there");
  if (prev.tid != prev.pid || next.tid != next.pid)
    Violation("tid != pid for a single-threaded sim task");
  Drain(cpu, now_ns);
  switches_.push_back(Switch{cpu, now_ns, prev, next, preempt});
  if (prev.pid != 0) {
    TaskTime(prev.pid, now_ns);
    ++logs_[prev.pid].switches_out;
    running_on_.erase(prev.pid);
  }
  if (next.pid != 0) {
    TaskTime(next.pid, now_ns);
    TaskLog& log = logs_[next.pid];
    ++log.switches_in;
    if (log.exited)
      Violation("pid " + std::to_string(next.pid) + " switched in after exit");
    if (running_on_.count(next.pid) != 0)
      Violation("pid " + std::to_string(next.pid) + " switched in on cpu " +
                std::to_string(cpu) + " while running on cpu " +
                std::to_string(running_on_[next.pid]));
    running_on_[next.pid] = cpu;
  }
  running_[cpu] = next.pid;
}

void FakeCore::TaskExit(TaskId task, uint64_t now_ns, int64_t status) {
  Mix(3);
  Mix(uint64_t(uint32_t(task.pid)));
  Mix(now_ns);
  TaskTime(task.pid, now_ns);
  if (running_on_.count(task.pid) != 0)
    Violation("pid " + std::to_string(task.pid) + " exited while running");
  TaskLog& log = logs_[task.pid];
  log.exited = true;
  log.exit_status = status;
}

TraceConfig FakeCore::TaskConfig(int cpu, TaskId task) {
  auto it = configs_.find(task.pid);
  if (it == configs_.end()) it = configs_.find(0);
  return it == configs_.end() ? TraceConfig{} : it->second;
}

bool FakeCore::TaskHeld(TaskId task) {
  auto it = held_.find(task.pid);
  return it != held_.end() && it->second;
}

int FakeCore::ScheduledCounters(int cpu, ScheduledCounter* out, int max) {
  const int32_t pid = running_[cpu];
  if (pid == 0) return 0;
  auto it = counters_.find(pid);
  if (it == counters_.end()) it = counters_.find(0);
  if (it == counters_.end()) return 0;
  const int n = std::min(max, int(it->second.size()));
  std::copy(it->second.begin(), it->second.begin() + n, out);
  return n;
}

void FakeCore::AddCount(uint32_t request, uint64_t delta) {
  ++add_count_calls_;
  Mix(4);
  Mix(request);
  Mix(delta);
  counts_[request] += delta;
}

void FakeCore::Tick(int cpu, uint64_t now_ns) {
  ++ticks_;
  Mix(5);
  Mix(uint64_t(cpu));
  Mix(now_ns);
  CpuTime(cpu, now_ns);
}

}  // namespace pfm
