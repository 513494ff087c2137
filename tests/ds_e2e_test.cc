// End to end, issue 3: the DS resource allocator through the real pfmd and
// pfmctl on the simulated machine. The sim is paused and advanced with
// `pfmctl sim run NS`, so every run is deterministic.
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "pfm/trace_file.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::Addr;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;

class DsE2e : public testing::DaemonTest {
 protected:
  void SetUp() override {
    StartSim({"--sim-pmu", "skl", "--sim-cpus", "2", "--sim-tasks", "4", "--sim-seed", "7",
              "--sim-paused"});
  }
  json::array Snapshot(uint64_t id, json::object* whole = nullptr) {
    json::value v = PfmctlJson(socket(), {"snapshot", std::to_string(id)});
    if (whole) *whole = v.as_object();
    return v.at("records").as_array();
  }
  void Run(uint64_t ns) {
    testing::Result r = Pfmctl(socket(), {"sim", "run", std::to_string(ns)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  json::object TaskStats(int pid) {
    json::value v = PfmctlJson(socket(), {"sim", "stats", std::to_string(pid)});
    return v.at("tasks").as_array().at(0).as_object();
  }
  json::object Show(uint64_t id) {
    return PfmctlJson(socket(), {"session", "show", std::to_string(id)}).as_object();
  }
};

TEST_F(DsE2e, DebuggerHistoryAndLosslessProfilerShareOneTask) {
  constexpr int kHistory = 32;
  const uint64_t dbg = Create({"--role", "debugger", "--pid", "1000", "--bts", "history",
                               "--buffer", std::to_string(kHistory * 64)});
  const uint64_t prof = Create({"--role", "profiler", "--pid", "1000", "--bts", "lossless",
                                "--buffer", "16MiB"});
  Run(20000000);  // 20 ms of virtual time
  // The task exits: its records stay readable and the rings end.
  ASSERT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
  const std::string dir = testing::MakeTempDir("ds");
  const std::string file = dir + "/prof.trace";
  testing::Result sr = Pfmctl(socket(), {"stream", std::to_string(prof), "-o", file});
  ASSERT_EQ(sr.exit_code, 0) << sr.err;
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
  std::vector<pfm_record> branches;
  for (const pfm_record& r : t->records)
    if (r.type == PFM_REC_BRANCH) branches.push_back(r);
  const json::object st = TaskStats(1000);
  // Lossless: every branch the sim stored for the task, nothing lost.
  EXPECT_GT(branches.size(), 1000u);
  EXPECT_EQ(branches.size(), Num(st.at("bts_user")));
  EXPECT_EQ(Num(Show(prof).at("lost")), 0u);
  for (size_t i = 1; i < branches.size(); ++i)
    ASSERT_GE(branches[i].time, branches[i - 1].time) << "time order at " << i;
  // History: exactly the newest kHistory branches, oldest first.
  json::array hist = Snapshot(dbg);
  std::vector<json::object> hb;
  for (const json::value& v : hist)
    if (v.at("type").as_string() == "branch") hb.push_back(v.as_object());
  ASSERT_EQ(hb.size(), static_cast<size_t>(kHistory));
  for (int k = 0; k < kHistory; ++k) {
    const pfm_record& want = branches[branches.size() - kHistory + k];
    EXPECT_EQ(Addr(hb[k].at("from")), want.u.branch.from) << k;
    EXPECT_EQ(Addr(hb[k].at("to")), want.u.branch.to) << k;
    EXPECT_EQ(Num(hb[k].at("time")), want.time) << k;
    EXPECT_EQ(Num(hb[k].at("pid")), 1000u);
  }
}

TEST_F(DsE2e, LosslessFallingBehindCountsLossesNeverSilentlyFewer) {
  const uint64_t prof = Create({"--pid", "1001", "--bts", "lossless", "--buffer", "8KiB"});
  Run(20000000);  // nobody reads: the ring fills
  json::object s = Show(prof);
  const json::object st = TaskStats(1001);
  const uint64_t lost = Num(s.at("lost"));
  EXPECT_GT(lost, 0u);
  uint64_t in_ring = 0;
  for (const json::value& r : Snapshot(prof))
    if (r.at("type").as_string() == "branch") ++in_ring;
  // Every branch the sim stored is either in the ring or counted lost (the
  // lost count also covers switch records, hence >=).
  EXPECT_GT(in_ring, 0u);
  EXPECT_GE(in_ring + lost, Num(st.at("bts_user")));
  EXPECT_LT(in_ring, Num(st.at("bts_user")));
}

TEST_F(DsE2e, BlockModeHoldsTheTaskInsteadOfLosing) {
  const uint64_t id = Create({"--pid", "1000", "--bts", "lossless", "--block",
                              "--buffer", "512KiB"});
  // Nobody reads yet: the task must be held, not lose records.
  Run(30000000);
  json::object st = TaskStats(1000);
  EXPECT_GT(Num(st.at("held_ns")), 0u) << "the sim held the task";
  EXPECT_EQ(Num(Show(id).at("lost")), 0u);
  // A reader drains it while the task runs on, then the task exits.
  const std::string file = testing::MakeTempDir("block") + "/t.trace";
  testing::Result sr;
  std::thread reader([&] {
    sr = Pfmctl(socket(), {"stream", std::to_string(id), "-o", file});
  });
  for (int i = 0; i < 20; ++i) {
    Run(5000000);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(Pfmctl(socket(), {"sim", "exit", "1000"}).exit_code, 0);
  reader.join();
  ASSERT_EQ(sr.exit_code, 0) << sr.err;
  absl::StatusOr<Trace> t = ReadTrace(file);
  ASSERT_TRUE(t.ok()) << t.status();
  uint64_t branches = 0;
  for (const pfm_record& r : t->records) {
    EXPECT_NE(r.type, PFM_REC_LOST);
    branches += r.type == PFM_REC_BRANCH;
  }
  st = TaskStats(1000);
  EXPECT_EQ(branches, Num(st.at("bts_user"))) << "every branch, none lost";
  EXPECT_GT(branches, 8192u) << "more than the ring holds: the reader made room";
}

TEST_F(DsE2e, UserOnlyConsumerNeverSeesKernelBranches) {
  const uint64_t user = Create({"--pid", "1002", "--bts", "lossless", "--filter", "user"});
  const uint64_t all = Create({"--pid", "1002", "--bts", "lossless", "--filter", "all"});
  Run(10000000);
  uint64_t user_kernel = 0, user_n = 0, all_kernel = 0, all_user = 0;
  for (const json::value& r : Snapshot(user)) {
    if (r.at("type").as_string() != "branch") continue;
    ++user_n;
    if (PFM_ADDR_IS_KERNEL(Addr(r.at("from")))) ++user_kernel;
  }
  for (const json::value& r : Snapshot(all)) {
    if (r.at("type").as_string() != "branch") continue;
    (PFM_ADDR_IS_KERNEL(Addr(r.at("from"))) ? all_kernel : all_user)++;
  }
  const json::object st = TaskStats(1002);
  EXPECT_GT(user_n, 0u);
  EXPECT_EQ(user_kernel, 0u);
  EXPECT_GT(all_kernel, 0u);
  EXPECT_EQ(all_user, user_n);
  EXPECT_EQ(all_kernel, Num(st.at("bts_kernel")));
}

TEST_F(DsE2e, CpuCatchAllSeesEveryTaskWithSwitchesBetween) {
  const uint64_t cpu = Create({"--cpu", "0", "--bts", "lossless", "--filter", "all",
                               "--buffer", "32MiB"});
  Run(5000000);
  std::map<uint64_t, uint64_t> branches_by_pid;
  uint64_t switches = 0, running = 0;
  bool in_task = false;
  for (const json::value& r : Snapshot(cpu)) {
    EXPECT_EQ(Num(r.at("cpu")), 0u);
    const std::string type(r.at("type").as_string());
    if (type == "switch_in") {
      running = Num(r.at("pid"));
      in_task = true;
      ++switches;
    } else if (type == "switch_out") {
      EXPECT_EQ(Num(r.at("pid")), running);
      in_task = false;
    } else if (type == "branch") {
      EXPECT_TRUE(in_task);
      EXPECT_EQ(Num(r.at("pid")), running) << "a branch between another task's switches";
      ++branches_by_pid[Num(r.at("pid"))];
    }
  }
  EXPECT_GE(branches_by_pid.size(), 2u) << "records of several tasks";
  EXPECT_GT(switches, 2u);
}

TEST_F(DsE2e, FixedAndCompactDecodeToIdenticalRecordsCompactIsAThird) {
  const uint64_t fixed = Create({"--pid", "1003", "--bts", "lossless", "--format", "fixed",
                                 "--buffer", "16MiB"});
  const uint64_t compact = Create({"--pid", "1003", "--bts", "lossless", "--format",
                                   "compact", "--buffer", "16MiB"});
  Run(10000000);
  json::object fw, cw;
  json::array f = Snapshot(fixed, &fw);
  json::array c = Snapshot(compact, &cw);
  ASSERT_GT(f.size(), 1000u);
  ASSERT_EQ(f.size(), c.size());
  for (size_t i = 0; i < f.size(); ++i)
    ASSERT_EQ(json::serialize(f[i]), json::serialize(c[i])) << "record " << i;
  const double fixed_bytes = Num(fw.at("bytes_written"));
  const double compact_bytes = Num(cw.at("bytes_written"));
  const double per_fixed = fixed_bytes / f.size(), per_compact = compact_bytes / c.size();
  std::cout << "compact: " << per_compact << " bytes/record, fixed: " << per_fixed
            << " bytes/record over " << f.size() << " records\n";
  RecordProperty("compact_bytes_per_record", std::to_string(per_compact));
  EXPECT_LE(compact_bytes * 3, fixed_bytes);
}

TEST_F(DsE2e, KillingASessionFreesItsChargesAndRefusesBadInput) {
  const uint64_t id = Create({"--pid", "1000", "--bts", "lossless"});
  json::value st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 1u);
  EXPECT_FALSE(st.at("memory").at("charged").as_array().empty());
  ASSERT_EQ(Pfmctl(socket(), {"session", "kill", std::to_string(id)}).exit_code, 0);
  st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 0u);
  EXPECT_TRUE(st.at("memory").at("charged").as_array().empty());
  EXPECT_EQ(Num(st.at("memory").at("allocated")), 0u);
  testing::Result r = Pfmctl(socket(), {"session", "create", "--pid", "4242", "--bts", "lossless"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  r = Pfmctl(socket(), {"session", "create", "--pid", "1000", "--bts", "sideways"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  r = Pfmctl(socket(), {"snapshot", "99"});
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  st = PfmctlJson(socket(), {"status"});
  EXPECT_EQ(Num(st.at("sessions")), 0u) << "a refusal changes nothing";
}

}  // namespace
}  // namespace pfm
