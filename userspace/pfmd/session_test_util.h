// What the session manager's unit tests (session_manager_test,
// metrics_test) share: the simulated Skylake they run on, its config, peers
// and typed specs. Tests only.
#ifndef PFM_USERSPACE_PFMD_SESSION_TEST_UTIL_H_
#define PFM_USERSPACE_PFMD_SESSION_TEST_UTIL_H_

#include <sys/types.h>

#include <cstdint>

#include "kernel/drivers/driver.h"
#include "userspace/pfmd/auth.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/typed_spec.h"

namespace pfm::session_test {

inline constexpr uid_t kAlice = 1000;
inline constexpr uid_t kBob = 1001;
inline constexpr int32_t kTask = 1000;  // the sim's first task

inline MachineInfo SimSkylake() {
  MachineInfo m;
  m.cpus = 2;
  m.pmu = "skl";
  m.gp_counters = 8;
  m.fixed_counters = 3;
  m.pebs_counter_mask = 0xf;
  m.debug_registers = 4;
  m.bts = m.pebs = true;
  return m;
}

// The sim, paused (nothing moves unless a test runs it), 4 tasks on 2 CPUs.
inline PfmdConfig SimConfig(uint64_t limit_per_uid = 64ull << 20,
                            uint64_t limit_total = 1ull << 30) {
  PfmdConfig c;
  c.driver = "sim";
  c.sim_tasks = 4;
  c.sim_cpus = 2;
  c.sim_paused = true;
  c.mem_limit_per_uid = limit_per_uid;
  c.mem_limit_total = limit_total;
  return c;
}

inline Peer User(uid_t uid) {
  Peer p;
  p.uid = uid;
  p.gid = uid;
  return p;
}

inline Peer Root() {
  Peer p;
  p.admin = true;
  return p;
}

inline TypedSpec History(int32_t pid) {
  TypedSpec s;
  s.role = Role::kDebugger;
  s.pid = pid;
  s.bts = BtsMode::kHistory;
  s.buffer_bytes = 2048;
  return s;
}

inline TypedSpec Lossless(int32_t pid, uint64_t bytes = 1 << 20) {
  TypedSpec s;
  s.pid = pid;
  s.bts = BtsMode::kLossless;
  s.buffer_bytes = bytes;
  return s;
}

}  // namespace pfm::session_test

#endif  // PFM_USERSPACE_PFMD_SESSION_TEST_UTIL_H_
