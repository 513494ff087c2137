// Admission: validation, classification, the pinned admission formula and
// refusal messages. First Admission on its own (contexts built by hand),
// then admission through PmuArbiter: refusals, what they name, and that
// admitted pinned requests then fit on the hardware.
#include "kernel/pmu_arbiter/admission.h"

#include <linux/perf_event.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernel/pmu_arbiter/arbiter.h"
#include "kernel/pmu_arbiter/arbiter_test_util.h"
#include "kernel/pmu_arbiter/context.h"
#include "kernel/pmu_arbiter/request.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {
namespace arbiter_test {
namespace {

using arbiter_internal::Admission;
using arbiter_internal::Context;
using arbiter_internal::ContextTable;
using arbiter_internal::PmuShape;
using arbiter_internal::Request;
using arbiter_internal::ResourceClass;

// Contexts with pinned requests, built by hand, for Admission alone.
class PinnedWorld {
 public:
  explicit PinnedWorld(const MachineInfo& m)
      : shape_(PmuShape::From(m)), admission_(shape_) {
    contexts_.cpu.resize(shape_.cpus);
  }

  const Admission& admission() const { return admission_; }
  const ContextTable& contexts() const { return contexts_; }

  // Validates, classifies and admits `req` as Add does; on success adds it
  // to its context. Returns 0 or the negative errno.
  int Pin(const pfm_pmu_req& req, uint64_t session, const char* label,
          ErrorDetail* d) {
    int err = admission_.Validate(req, d);
    if (err < 0) return err;
    auto r = std::make_unique<Request>();
    r->session = session;
    snprintf(r->label, sizeof(r->label), "%s", label);
    admission_.Classify(req, r.get());
    EXPECT_TRUE(r->pinned);
    err = admission_.AdmitPinned(req, *r, contexts_, d);
    if (err < 0) return err;
    Context* c = contexts_.Find(req);
    if (c == nullptr) {
      auto owned = std::make_unique<Context>();
      c = owned.get();
      if (req.ctx_kind == PFM_CTX_CPU) {
        c->is_cpu = true;
        c->cpu = req.cpu;
        contexts_.cpu[req.cpu] = std::move(owned);
      } else {
        c->pid = req.pid;
        contexts_.task[req.pid] = std::move(owned);
      }
    }
    r->context = c;
    c->pinned.Add(r.get());
    requests_.push_back(std::move(r));
    return 0;
  }

 private:
  PmuShape shape_;
  Admission admission_;
  ContextTable contexts_;
  std::vector<std::unique_ptr<Request>> requests_;
};

pfm_pmu_req OnCpu(pfm_pmu_req r, int cpu) {
  r.ctx_kind = PFM_CTX_CPU;
  r.cpu = cpu;
  r.pid = 0;
  return r;
}

TEST(AdmissionTest, KernelBreakpointsUseTheUapiAddressBoundary) {
  const Admission a(PmuShape::From(Skl()));
  ErrorDetail d;
  auto kernel_bp = [&](uint64_t addr) {
    return a.Validate(TaskBp(kPid, addr, 8, PFM_BP_W, PFM_REQ_KERNEL), &d);
  };
  // 4-level and 5-level kernel halves are both kernel addresses.
  EXPECT_EQ(kernel_bp(0xffff800000000000ull), 0);
  EXPECT_EQ(kernel_bp(0xffffffff81000000ull), 0);
  EXPECT_EQ(kernel_bp(0xff00000000000000ull), 0);
  EXPECT_EQ(kernel_bp(PFM_X86_USER_ADDR_END), 0);
  EXPECT_EQ(kernel_bp(PFM_X86_USER_ADDR_END - 8), -EINVAL);
  EXPECT_NE(std::string(d.message).find("is not a kernel address"),
            std::string::npos)
      << d.message;
  EXPECT_EQ(kernel_bp(0x401000), -EINVAL);
  // User breakpoints: the lower half of 4-level paging, the whole range.
  EXPECT_EQ(a.Validate(TaskBp(kPid, 0x7ffffffffff8ull, 8, PFM_BP_W, 0), &d),
            0);
  EXPECT_EQ(a.Validate(TaskBp(kPid, 0x7ffffffffffcull, 8, PFM_BP_X, 0), &d),
            -EINVAL);
  EXPECT_EQ(a.Validate(TaskBp(kPid, 0x800000000000ull, 8, PFM_BP_W, 0), &d),
            -EINVAL);
  EXPECT_NE(std::string(d.message).find("PFM_REQ_KERNEL"), std::string::npos)
      << d.message;
}

TEST(AdmissionTest, ClassifiesResourceFixedCounterAndDemand) {
  MachineInfo m = Skl();
  m.fixed_counters = 2;  // no ref-cycles counter
  const Admission a(PmuShape::From(m));
  Request inst, ref, pebs, raw, bp;
  a.Classify(TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS,
                         PFM_REQ_NO_MULTIPLEX),
             &inst);
  EXPECT_TRUE(inst.pinned);
  EXPECT_EQ(inst.resource, ResourceClass::kCounter);
  EXPECT_EQ(inst.fixed_counter, 0);
  EXPECT_EQ(inst.demand.fixed[0], 1);
  EXPECT_EQ(inst.demand.generic, 0);
  a.Classify(TaskCounter(kPid, PERF_TYPE_RAW, 0x0300, 0), &ref);
  EXPECT_FALSE(ref.pinned);
  EXPECT_EQ(ref.fixed_counter, -1);
  EXPECT_EQ(ref.demand.generic, 1);
  a.Classify(TaskCounter(kPid, PERF_TYPE_RAW, 0x003c, PFM_REQ_PEBS), &pebs);
  EXPECT_TRUE(pebs.pebs);
  EXPECT_EQ(pebs.fixed_counter, -1);  // PEBS never goes on a fixed counter
  EXPECT_EQ(pebs.demand.pebs, 1);
  a.Classify(Raw(kPid, 3, PFM_REQ_PINNED), &raw);
  EXPECT_EQ(raw.demand.generic, 1);
  EXPECT_EQ(raw.config, Raw(kPid, 3, 0).config);
  a.Classify(TaskBp(kPid, 0x1000, 8, PFM_BP_W, PFM_REQ_PINNED), &bp);
  EXPECT_EQ(bp.resource, ResourceClass::kBreakpoint);
  EXPECT_EQ(bp.demand.bp, 1);
}

// The formula is checked per (CPU context, task context) pair: a task
// request against every CPU context, a CPU request against every task.
TEST(AdmissionTest, PinnedDemandIsCheckedPairwise) {
  PinnedWorld w(Skl(2));
  ErrorDetail d;
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(w.Pin(CpuBp(1, 0x1000 + 8 * i, PFM_REQ_PINNED), 7,
                    Label("cpu1-", i).c_str(), &d),
              0);
  ASSERT_EQ(w.Pin(TaskBp(kPid, 0x2000, 8, PFM_BP_W, PFM_REQ_PINNED), 8, "t0",
                  &d),
            0);
  // 3 on cpu 1 + 2 on the task > 4; cpu 0 alone would have room.
  EXPECT_EQ(w.Pin(TaskBp(kPid, 0x2008, 8, PFM_BP_W, PFM_REQ_PINNED), 8, "t1",
                  &d),
            -ENOSPC);
  EXPECT_STREQ(d.message,
               "debug registers: 4 of 4 held on cpu 1 and task 1000 by "
               "session 7 (cpu1-0 pinned), session 7 (cpu1-1 pinned), "
               "session 7 (cpu1-2 pinned), session 8 (t0 pinned)");
  // Another task's demand is not added to task 1000's.
  EXPECT_EQ(w.Pin(TaskBp(kPid + 1, 0x2000, 8, PFM_BP_W, PFM_REQ_PINNED), 9,
                  "u0", &d),
            0);
  // A CPU request meets every task: 3 + 1 + 1 > 4 with either.
  EXPECT_EQ(w.Pin(CpuBp(1, 0x1018, PFM_REQ_PINNED), 7, "cpu1-3", &d), -ENOSPC);
  EXPECT_EQ(w.Pin(CpuBp(0, 0x1018, PFM_REQ_PINNED), 7, "cpu0-0", &d), 0);
}

// Counters: PEBS and GP limits per pair, so a task with many PEBS events
// and another with many plain ones don't block each other; and the fixed
// counters take one event of their kind each, the rest spill to GP.
TEST(AdmissionTest, CounterLimitsPerPairAndFixedSpill) {
  PinnedWorld w(Skl(1));
  ErrorDetail d;
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(w.Pin(Raw(kPid, i, PFM_REQ_PINNED | PFM_REQ_PEBS), 1, "pebs", &d),
              0);
  for (int i = 0; i < 7; ++i)
    ASSERT_EQ(w.Pin(Raw(kPid + 1, i, PFM_REQ_PINNED), 2, "plain", &d), 0);
  // Two instructions events: fixed0 and one GP counter (7 + 1 = 8).
  const pfm_pmu_req inst = TaskCounter(
      kPid + 1, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, PFM_REQ_PINNED);
  ASSERT_EQ(w.Pin(inst, 2, "inst", &d), 0);
  ASSERT_EQ(w.Pin(inst, 2, "inst", &d), 0);
  EXPECT_EQ(w.Pin(inst, 2, "inst", &d), -ENOSPC);
  EXPECT_NE(std::string(d.message).find("general-purpose counters: 8 of 8 "
                                        "held on task 1001"),
            std::string::npos)
      << d.message;
  // A fifth PEBS event: only 4 PEBS-capable counters. The message names the
  // PEBS holders only.
  EXPECT_EQ(w.Pin(Raw(kPid, 9, PFM_REQ_PINNED | PFM_REQ_PEBS), 3, "p5", &d),
            -ENOSPC);
  EXPECT_STREQ(d.message,
               "PEBS-capable counters (mask 0xf): 4 of 4 held on task 1000 "
               "by session 1 (pebs pinned), session 1 (pebs pinned), "
               "session 1 (pebs pinned), session 1 (pebs pinned)");
  // A CPU-wide plain counter would fit beside the PEBS task (4 + 1 <= 8)
  // but not beside the plain one (8 + 1).
  EXPECT_EQ(w.Pin(OnCpu(Raw(0, 20, PFM_REQ_PINNED), 0), 4, "cpu", &d),
            -ENOSPC);
  EXPECT_NE(std::string(d.message).find("task 1001"), std::string::npos)
      << d.message;
}

// Admission through PmuArbiter.

TEST(AdmissionTest, RefusesFifthPinnedBreakpoint) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  int ids[4];
  for (int i = 0; i < 4; ++i) {
    const std::string l = "0x40100" + std::to_string(i) + ":1:x";
    ids[i] = a.Add(TaskBp(kPid, 0x401000 + i, 1, PFM_BP_X, PFM_REQ_PINNED), 3,
                   l.c_str(), 0, nullptr);
    ASSERT_GT(ids[i], 0);
  }
  ErrorDetail d;
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x402000, 8, PFM_BP_W, PFM_REQ_PINNED), 4,
                  "0x402000:8:w", 0, &d),
            -ENOSPC);
  const std::string msg = d.message;
  EXPECT_NE(msg.find("debug registers: 4 of 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 1000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("session 3 (0x401000:1:x pinned)"), std::string::npos)
      << msg;
  // Refusal changed nothing: still exactly four requests.
  std::vector<PmuArbiter::Holder> h;
  a.Describe(0, &h);
  EXPECT_EQ(h.size(), 4u);

  a.Remove(ids[2], 0);
  EXPECT_GT(a.Add(TaskBp(kPid, 0x402000, 8, PFM_BP_W, PFM_REQ_PINNED), 4,
                  "0x402000:8:w", 0, &d),
            0);
}

TEST(AdmissionTest, NoMultiplexBreakpointsCountAsPinned) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(
        a.Add(TaskBp(kPid, 0x1000 + 8 * i, 8, PFM_BP_RW, PFM_REQ_NO_MULTIPLEX),
              1, "w", 0, nullptr),
        0);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x2000, 8, PFM_BP_RW, PFM_REQ_NO_MULTIPLEX), 1,
                  "w", 0, nullptr),
            -ENOSPC);
  // A flexible one is admitted: it waits.
  EXPECT_GT(a.Add(TaskBp(kPid, 0x2000, 8, PFM_BP_RW, 0), 1, "w", 0, nullptr),
            0);
}

TEST(AdmissionTest, CpuBoundPlusLargestTaskBreakpointDemandFitsSlots) {
  PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
  ASSERT_GT(a.Add(CpuBp(0, 0x1000, PFM_REQ_PINNED), 1, "cpu0-a", 0, nullptr),
            0);
  ASSERT_GT(a.Add(CpuBp(0, 0x1008, PFM_REQ_PINNED), 1, "cpu0-b", 0, nullptr),
            0);
  ASSERT_GT(a.Add(TaskBp(1000, 0x3000, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t0", 0,
                  nullptr),
            0);
  ASSERT_GT(a.Add(TaskBp(1000, 0x3008, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t1", 0,
                  nullptr),
            0);
  ErrorDetail d;
  // 2 on cpu 0 + 3 on task 1000 > 4.
  EXPECT_EQ(
      a.Add(TaskBp(1000, 0x3010, 8, PFM_BP_W, PFM_REQ_PINNED), 2, "t2", 0, &d),
      -ENOSPC);
  EXPECT_NE(std::string(d.message).find("cpu 0 and task 1000"),
            std::string::npos)
      << d.message;
  EXPECT_NE(std::string(d.message).find("cpu0-a"), std::string::npos)
      << d.message;
  // Another task's demand is not added to task 1000's: the largest counts.
  EXPECT_GT(a.Add(TaskBp(1001, 0x3000, 8, PFM_BP_W, PFM_REQ_PINNED), 3, "u0", 0,
                  nullptr),
            0);
  EXPECT_GT(a.Add(TaskBp(1001, 0x3008, 8, PFM_BP_W, PFM_REQ_PINNED), 3, "u1", 0,
                  nullptr),
            0);
  // A third CPU-bound one on cpu 0 would collide with either task.
  EXPECT_EQ(a.Add(CpuBp(0, 0x1010, PFM_REQ_PINNED), 1, "cpu0-c", 0, &d),
            -ENOSPC);
  // cpu 1 has room for 2 besides the largest task demand, not 3.
  EXPECT_GT(a.Add(CpuBp(1, 0x1000, PFM_REQ_PINNED), 1, "cpu1-a", 0, nullptr),
            0);
  EXPECT_GT(a.Add(CpuBp(1, 0x1008, PFM_REQ_PINNED), 1, "cpu1-b", 0, nullptr),
            0);
  EXPECT_EQ(a.Add(CpuBp(1, 0x1010, PFM_REQ_PINNED), 1, "cpu1-c", 0, nullptr),
            -ENOSPC);

  // On the hardware: cpu 0 runs task 1001 -> 2 CPU-bound + 2 of the task.
  a.SwitchIn(0, TaskId{1001, 1001}, 0);
  RequestId slots[4];
  EXPECT_EQ(a.ScheduledBreakpoints(0, slots), 4);
}

TEST(AdmissionTest, RefusesPinnedCountersBeyondGpCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 1, Label("raw", i).c_str(), 0,
                    nullptr),
              0);
  ErrorDetail d;
  EXPECT_EQ(a.Add(Raw(kPid, 8, PFM_REQ_PINNED), 2, "raw8", 0, &d), -ENOSPC);
  EXPECT_NE(std::string(d.message).find("general-purpose counters: 8 of 8"),
            std::string::npos)
      << d.message;
  // A CPU-wide pinned counter would collide with task 1000 on every CPU.
  pfm_pmu_req cpu_req = Raw(0, 9, PFM_REQ_PINNED);
  cpu_req.ctx_kind = PFM_CTX_CPU;
  cpu_req.cpu = 1;
  EXPECT_EQ(a.Add(cpu_req, 2, "raw9", 0, &d), -ENOSPC);
  // Flexible ones are always admitted.
  EXPECT_GT(a.Add(Raw(kPid, 8, 0), 2, "raw8", 0, nullptr), 0);
}

TEST(AdmissionTest, PebsRequestsOnlyGetPebsCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  // Generic ones first: placement must still leave counters 0-3 for PEBS.
  for (int i = 0; i < 4; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 1, "plain", 0, nullptr), 0);
  std::vector<int> pebs;
  for (int i = 0; i < 4; ++i) {
    pebs.push_back(a.Add(Raw(kPid, 10 + i, PFM_REQ_PINNED | PFM_REQ_PEBS), 2,
                         "mem", 0, nullptr));
    ASSERT_GT(pebs.back(), 0);
  }
  ErrorDetail d;
  EXPECT_EQ(
      a.Add(Raw(kPid, 20, PFM_REQ_PINNED | PFM_REQ_PEBS), 2, "mem", 0, &d),
      -ENOSPC);
  EXPECT_NE(
      std::string(d.message).find("PEBS-capable counters (mask 0xf): 4 of 4"),
      std::string::npos)
      << d.message;

  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(0, sc, 16), 8);
  for (int id : pebs) {
    bool found = false;
    for (int c = 0; c < 4; ++c)
      if (a.OnCounter(0, c) == static_cast<RequestId>(id)) found = true;
    EXPECT_TRUE(found) << "PEBS request " << id << " not on counters 0-3";
  }
}

TEST(AdmissionTest, FixedEligibleEventsUseFixedCounters) {
  PmuArbiter a(Skl(), kDefaultMuxIntervalNs);
  const int inst =
      a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS,
                        PFM_REQ_PINNED),
            1, "instructions", 0, nullptr);
  const int cyc = a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                                    PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                        1, "cycles", 0, nullptr);
  const int ref =
      a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES,
                        PFM_REQ_PINNED),
            1, "ref-cycles", 0, nullptr);
  ASSERT_GT(inst, 0);
  ASSERT_GT(cyc, 0);
  ASSERT_GT(ref, 0);
  // All 8 GP counters are still available besides the fixed ones.
  for (int i = 0; i < 8; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 2, "raw", 0, nullptr), 0);
  // A second pinned cycles would need a GP counter: none left.
  EXPECT_EQ(a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                              PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                  3, "cycles", 0, nullptr),
            -ENOSPC);

  a.SwitchIn(1, TaskId{kPid, kPid}, 0);
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 0),
            static_cast<RequestId>(inst));
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 1), static_cast<RequestId>(cyc));
  EXPECT_EQ(a.OnCounter(1, kFixedCounterBase + 2), static_cast<RequestId>(ref));
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(1, sc, 16), 11);
  EXPECT_EQ(sc[1].counter, kFixedCounterBase + 1);
  EXPECT_EQ(sc[1].type, static_cast<uint32_t>(PERF_TYPE_HARDWARE));
  EXPECT_EQ(sc[1].config, static_cast<uint64_t>(PERF_COUNT_HW_CPU_CYCLES));
}

TEST(AdmissionTest, WithoutFixedCountersCyclesUsesGpCounter) {
  MachineInfo m = Skl();
  m.fixed_counters = 0;
  PmuArbiter a(m, kDefaultMuxIntervalNs);
  const int cyc = a.Add(TaskCounter(kPid, PERF_TYPE_HARDWARE,
                                    PERF_COUNT_HW_CPU_CYCLES, PFM_REQ_PINNED),
                        1, "cycles", 0, nullptr);
  ASSERT_GT(cyc, 0);
  for (int i = 0; i < 7; ++i)
    ASSERT_GT(a.Add(Raw(kPid, i, PFM_REQ_PINNED), 2, "raw", 0, nullptr), 0);
  EXPECT_EQ(a.Add(Raw(kPid, 7, PFM_REQ_PINNED), 2, "raw", 0, nullptr), -ENOSPC);
  a.SwitchIn(0, TaskId{kPid, kPid}, 0);
  ScheduledCounter sc[16];
  ASSERT_EQ(a.Scheduled(0, sc, 16), 8);
  for (int i = 0; i < 8; ++i) EXPECT_LT(sc[i].counter, 8);
}

TEST(AdmissionTest, RejectsBadRequests) {
  PmuArbiter a(Skl(2), kDefaultMuxIntervalNs);
  ErrorDetail d;
  pfm_pmu_req r = Raw(kPid, 0, 0);
  r.kind = 9;
  EXPECT_EQ(a.Add(r, 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(a.Add(Raw(kPid, 0, 1u << 20), 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(a.Add(Raw(0, 0, 0), 1, "x", 0, &d), -EINVAL);
  r = Raw(0, 0, 0);
  r.ctx_kind = PFM_CTX_CPU;
  r.cpu = 2;
  EXPECT_EQ(a.Add(r, 1, "x", 0, &d), -EINVAL);
  EXPECT_NE(std::string(d.message).find("cpu 2 out of range"),
            std::string::npos);
  EXPECT_EQ(a.Add(TaskCounter(kPid, PERF_TYPE_SOFTWARE, 0, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1001, 4, PFM_BP_W, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_NE(std::string(d.message).find("aligned"), std::string::npos);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1000, 3, PFM_BP_W, 0), 1, "x", 0, &d),
            -EINVAL);
  EXPECT_EQ(a.Add(TaskBp(kPid, 0x1000, 8, 7, 0), 1, "x", 0, &d), -EINVAL);
  EXPECT_EQ(
      a.Add(TaskBp(kPid, 0xffffffff81000000ull, 8, PFM_BP_X, 0), 1, "x", 0, &d),
      -EINVAL);
  EXPECT_GT(
      a.Add(TaskBp(kPid, 0xffffffff81000000ull, 8, PFM_BP_X, PFM_REQ_KERNEL), 1,
            "x", 0, &d),
      0);
  EXPECT_GT(a.Add(TaskBp(kPid, 0x401001, 1, PFM_BP_X, 0), 1, "x", 0, &d), 0);

  MachineInfo bare = Skl();
  bare.gp_counters = 0;
  bare.fixed_counters = 0;
  bare.pebs_counter_mask = 0;
  bare.debug_registers = 0;
  PmuArbiter none(bare, kDefaultMuxIntervalNs);
  EXPECT_EQ(none.Add(Raw(kPid, 0, 0), 1, "x", 0, &d), -EOPNOTSUPP);
  EXPECT_EQ(none.Add(Raw(kPid, 0, PFM_REQ_PEBS), 1, "x", 0, &d), -EOPNOTSUPP);
  EXPECT_EQ(none.Add(TaskBp(kPid, 0x1000, 8, PFM_BP_W, 0), 1, "x", 0, &d),
            -EOPNOTSUPP);
  std::vector<PmuArbiter::Holder> h;
  none.Describe(0, &h);
  EXPECT_TRUE(h.empty());
}

}  // namespace
}  // namespace arbiter_test
}  // namespace pfm
