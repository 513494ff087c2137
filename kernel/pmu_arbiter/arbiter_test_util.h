// Test helpers for the PmuArbiter tests: a Skylake-shaped machine, request
// builders, and drivers that run a CPU and read what is on its hardware.
#ifndef PFM_KERNEL_PMU_ARBITER_ARBITER_TEST_UTIL_H_
#define PFM_KERNEL_PMU_ARBITER_ARBITER_TEST_UTIL_H_

#include <linux/perf_event.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/arbiter.h"

namespace pfm {
namespace arbiter_test {

inline constexpr uint64_t kMs = 1'000'000;
inline constexpr int32_t kPid = 1000;

// Skylake's shape (libpfm4 "skl"): 8 GP counters (PEBS on 0-3), 3 fixed,
// 4 debug registers.
inline MachineInfo Skl(int cpus = 2) {
  MachineInfo m;
  m.cpus = cpus;
  m.pmu = "skl";
  m.gp_counters = 8;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.debug_registers = 4;
  return m;
}

inline pfm_pmu_req TaskBp(int32_t pid, uint64_t addr, uint32_t len,
                          uint32_t kind, uint32_t flags) {
  pfm_pmu_req r{};
  r.kind = PFM_REQ_BREAKPOINT;
  r.flags = flags;
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = pid;
  r.bp_kind = kind;
  r.bp_len = len;
  r.bp_addr = addr;
  return r;
}

inline pfm_pmu_req CpuBp(int cpu, uint64_t addr, uint32_t flags) {
  pfm_pmu_req r = TaskBp(0, addr, 8, PFM_BP_W, flags);
  r.ctx_kind = PFM_CTX_CPU;
  r.cpu = cpu;
  return r;
}

inline pfm_pmu_req TaskCounter(int32_t pid, uint32_t type, uint64_t config,
                               uint32_t flags) {
  pfm_pmu_req r{};
  r.kind = PFM_REQ_COUNTER;
  r.flags = flags;
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = pid;
  r.type = type;
  r.config = config;
  return r;
}

// A raw event that is not fixed-eligible; `i` keeps them distinct.
inline pfm_pmu_req Raw(int32_t pid, int i, uint32_t flags) {
  return TaskCounter(pid, PERF_TYPE_RAW, 0x01d1 + (i << 8), flags);
}

inline std::string Label(const char* prefix, int i) {
  return std::string(prefix) + std::to_string(i);
}

// Drives `cpu` from t0 to t1: every `step` ns each scheduled counter gets
// `count(id, t)` added for that step, then the mux timer fires.
inline void RunCpu(PmuArbiter& a, int cpu, uint64_t t0, uint64_t t1,
                   uint64_t step,
                   const std::function<uint64_t(RequestId, uint64_t)>& count) {
  ScheduledCounter sc[64];
  for (uint64_t t = t0; t < t1; t += step) {
    const int n = a.Scheduled(cpu, sc, 64);
    ASSERT_GE(n, 0);
    for (int i = 0; i < n; ++i)
      a.AddCount(sc[i].request, count(sc[i].request, t));
    a.Tick(cpu, t + step);
  }
}

// Ids of the counters on `cpu`'s hardware, sorted.
inline std::vector<RequestId> OnHardware(const PmuArbiter& a, int cpu) {
  ScheduledCounter sc[64];
  const int n = a.Scheduled(cpu, sc, 64);
  std::vector<RequestId> ids;
  for (int i = 0; i < n; ++i) ids.push_back(sc[i].request);
  std::sort(ids.begin(), ids.end());
  return ids;
}

inline PmuArbiter::Reading MustRead(const PmuArbiter& a, RequestId id,
                                    uint64_t now) {
  PmuArbiter::Reading r;
  EXPECT_EQ(a.Read(id, now, &r), 0);
  return r;
}

}  // namespace arbiter_test
}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_ARBITER_TEST_UTIL_H_
