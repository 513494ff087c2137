// End to end, issue 6: fair memory accounting (DESIGN §6) through the real
// pfmd on the simulated machine. Root and uid 65534 attach to one task's
// BTS: the task's DS buffer is split between them, each also pays its own
// ring; a uid that leaves hands the whole buffer to the other, or the buffer
// shrinks (RESIZED record) if that would exceed the remaining uid's limit.
//
// Sizes are derived from the uapi layouts and pfmd's defaults: a task's DS
// buffer holds DsLimits' 2048 BTS + 64 PEBS records; a lossless ring of N
// bytes maps a header page + N (N a power of two >= 2 chunks).
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernel/uapi/pfm_uapi.h"
#include "pfm/client.h"
#include "tests/testing/e2e.h"

namespace pfm {
namespace {

namespace json = boost::json;
using testing::AsUid;
using testing::kNobody;
using testing::Num;
using testing::Pfmctl;
using testing::PfmctlJson;

// A task context's shared DS buffer at its default size.
constexpr uint64_t kTaskBuffer =
    2048 * sizeof(pfm_bts_raw) + 64 * sizeof(pfm_pebs_raw);
constexpr uint64_t kRootBuffer = 8 << 10;      // root's lossless ring data
constexpr uint64_t kNobodyBuffer = 128 << 10;  // 65534's
// What pfmd charges each session for its own bookkeeping, with its ring
// (userspace/pfmd/service.cc, kSessionOverheadBytes).
constexpr uint64_t kSessionOverhead = 4096;
// A session's private charge: ring (header page + data) and bookkeeping.
constexpr uint64_t kRootRing = PFM_RING_HEADER_BYTES + kRootBuffer + kSessionOverhead;
constexpr uint64_t kNobodyRing = PFM_RING_HEADER_BYTES + kNobodyBuffer + kSessionOverhead;
static_assert(kTaskBuffer % 2 == 0, "the split below assumes no leftover byte");

class AccountingE2e : public testing::DaemonTest {
 protected:
  // The skip is here, not in Start: GTEST_SKIP returns only from the
  // function it is in, and the test body would go on without a daemon.
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test drops to uid 65534";
  }
  // Each test starts pfmd itself, with its own limits in `extra`.
  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--sim-pmu", "skl", "--sim-cpus", "2",
                                      "--sim-tasks", "4", "--sim-paused"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    ASSERT_NO_FATAL_FAILURE(StartSim(flags));
    ASSERT_TRUE(d_->OpenToOtherUids());
  }
  // A detached lossless BTS session on pid 1000, created by `uid`.
  uint64_t Join(uid_t uid, uint64_t buffer) {
    const std::string socket = d_->socket();
    json::object got = AsUid(uid, [&]() -> json::object {
      absl::StatusOr<Client> c = Client::Connect(socket);
      if (!c.ok()) return {{"error", std::string(c.status().message())}};
      absl::StatusOr<Client::Reply> r = c->Call(
          "session_create",
          {{"spec", json::object{{"pid", 1000}, {"bts", "lossless"},
                                 {"buffer_bytes", buffer}, {"detached", true}}}});
      if (!r.ok())
        return {{"error", absl::StrCat(StatusCodeName(r.status().code()), ": ",
                                       r.status().message())}};
      return {{"id", r->result.at("id")}};
    });
    EXPECT_TRUE(got.contains("id")) << got;
    return got.contains("id") ? Num(got.at("id")) : 0;
  }
  json::object Status() {
    return PfmctlJson(socket(), {"status"}).at("memory").as_object();
  }
  // uid -> bytes, from status.memory.charged.
  std::map<uint64_t, uint64_t> Charged() {
    std::map<uint64_t, uint64_t> out;
    const json::object m = Status();
    for (const json::value& c : m.at("charged").as_array())
      out[Num(c.at("uid"))] = Num(c.at("bytes"));
    return out;
  }
  uint64_t SessionCharge(uint64_t id) {
    return Num(PfmctlJson(socket(), {"session", "show", std::to_string(id)})
                   .at("charged_bytes"));
  }
  void Kill(uint64_t id) {
    testing::Result r = Pfmctl(socket(), {"session", "kill", std::to_string(id)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // Charges always sum to the bytes allocated, and those are the bytes the
  // daemon holds (the core's rings and DS buffers, measured, plus the
  // sessions' bookkeeping).
  void ExpectChargesSumToAllocated() {
    json::object m = Status();
    uint64_t sum = 0;
    for (const json::value& c : m.at("charged").as_array()) sum += Num(c.at("bytes"));
    EXPECT_EQ(sum, Num(m.at("allocated"))) << m;
    EXPECT_EQ(Num(m.at("allocated")), Num(m.at("held"))) << m;
  }
};

TEST_F(AccountingE2e, TwoUidsSplitTheTaskBufferAndTheLastOnePaysItAll) {
  Start();
  const uint64_t root = Join(0, kRootBuffer);
  ASSERT_NE(root, 0u);
  EXPECT_EQ(Charged(), (std::map<uint64_t, uint64_t>{{0, kRootRing + kTaskBuffer}}));
  const uint64_t nobody = Join(kNobody, kNobodyBuffer);
  ASSERT_NE(nobody, 0u);
  // One buffer, two uids: half each, plus each one's own ring.
  EXPECT_EQ(Charged(), (std::map<uint64_t, uint64_t>{
                           {0, kRootRing + kTaskBuffer / 2},
                           {kNobody, kNobodyRing + kTaskBuffer / 2}}));
  EXPECT_EQ(SessionCharge(root), kRootRing + kTaskBuffer / 2);
  EXPECT_EQ(SessionCharge(nobody), kNobodyRing + kTaskBuffer / 2);
  EXPECT_EQ(Num(Status().at("allocated")), kRootRing + kNobodyRing + kTaskBuffer);
  ExpectChargesSumToAllocated();
  // Root leaves: 65534 now pays for the whole buffer, which keeps its size.
  Kill(root);
  EXPECT_EQ(Charged(),
            (std::map<uint64_t, uint64_t>{{kNobody, kNobodyRing + kTaskBuffer}}));
  EXPECT_EQ(SessionCharge(nobody), kNobodyRing + kTaskBuffer);
  ExpectChargesSumToAllocated();
  Kill(nobody);
  EXPECT_TRUE(Charged().empty());
  EXPECT_EQ(Num(Status().at("allocated")), 0u);
}

TEST_F(AccountingE2e, BufferShrinksWithResizedNoticeWhenTheRemainingUidWouldExceedItsLimit) {
  // Room for 65534's ring + 3/4 of the buffer: half fits, the whole does not.
  const uint64_t limit = kNobodyRing + kTaskBuffer / 2 + kTaskBuffer / 4;
  static_assert(kRootRing + kTaskBuffer <= kNobodyRing + kTaskBuffer * 3 / 4,
                "root alone must fit the limit");
  Start({"--mem-limit-per-uid", std::to_string(limit)});
  const uint64_t root = Join(0, kRootBuffer);
  const uint64_t nobody = Join(kNobody, kNobodyBuffer);
  ASSERT_NE(root, 0u);
  ASSERT_NE(nobody, 0u);
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
  Kill(root);  // leaving never fails, even though the whole buffer won't fit
  const uint64_t shrunk = limit - kNobodyRing;
  // The remaining consumer is told, in its own stream.
  json::value snap = PfmctlJson(socket(), {"snapshot", std::to_string(nobody)});
  std::vector<json::object> resized;
  for (const json::value& r : snap.at("records").as_array())
    if (r.at("type").as_string() == "resized") resized.push_back(r.as_object());
  ASSERT_EQ(resized.size(), 1u) << snap;
  EXPECT_EQ(Num(resized[0].at("old_bytes")), kTaskBuffer);
  // The area holds whole BTS records: at most what fits the limit, and the
  // uid is charged exactly what it is.
  const uint64_t now_bytes = Num(resized[0].at("new_bytes"));
  EXPECT_LE(now_bytes, shrunk);
  EXPECT_GT(now_bytes, shrunk - sizeof(pfm_bts_raw));
  EXPECT_EQ(Charged(), (std::map<uint64_t, uint64_t>{{kNobody, kNobodyRing + now_bytes}}));
  EXPECT_EQ(SessionCharge(nobody), kNobodyRing + now_bytes);
  ExpectChargesSumToAllocated();
  // Tracing goes on into the smaller buffer.
  const uint64_t before = Num(snap.at("ring_records"));
  ASSERT_EQ(Pfmctl(socket(), {"sim", "run", "2000000"}).exit_code, 0);
  snap = PfmctlJson(socket(), {"snapshot", std::to_string(nobody)});
  EXPECT_GT(Num(snap.at("ring_records")), before);
}

TEST_F(AccountingE2e, RequestOverThePerUidLimitIsRefusedStatingLimitUsageAndRequest) {
  Start({"--mem-limit-per-uid", "1MiB"});
  json::value first = PfmctlJson(socket(), {"session", "create", "--pid", "1001",
                                            "--bts", "lossless", "--buffer", "256KiB"});
  ASSERT_TRUE(first.as_object().contains("id"));
  const json::value before = PfmctlJson(socket(), {"status"});
  testing::Result r = Pfmctl(socket(), {"session", "create", "--pid", "1002",
                                        "--bts", "lossless", "--buffer", "1MiB"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << r.err;
  // The limit, what the uid uses, and what the request needs.
  const uint64_t usage =
      PFM_RING_HEADER_BYTES + (256 << 10) + kSessionOverhead + kTaskBuffer;
  constexpr uint64_t request =
      PFM_RING_HEADER_BYTES + (1 << 20) + kSessionOverhead + kTaskBuffer;
  EXPECT_NE(r.err.find("of 1MiB (--mem-limit-per-uid)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(absl::StrCat("uses ", usage / 1024.0, "KiB")), std::string::npos)
      << r.err << " (usage " << usage << ")";
  // 1MiB of data + the header page + bookkeeping, and the new task's whole
  // buffer.
  static_assert(request > (1 << 20) + (1 << 16), "request rounds to 1.1MiB");
  EXPECT_NE(r.err.find("needs 1.1MiB more (ring 1032KiB + its share"), std::string::npos)
      << r.err << " (request " << request << ")";
  // Nothing changed.
  EXPECT_EQ(json::serialize(PfmctlJson(socket(), {"status"})),
            json::serialize(before));
  EXPECT_EQ(PfmctlJson(socket(), {"session", "list"}).as_array().size(), 1u);
}

TEST_F(AccountingE2e, RequestOverTheDaemonLimitIsRefusedForAnyUid) {
  Start({"--mem-limit-total", "512KiB"});
  ASSERT_NE(Join(0, 256 << 10), 0u);
  const json::value before = PfmctlJson(socket(), {"status"});
  const std::string socket = d_->socket();
  json::object got = AsUid(kNobody, [&]() -> json::object {
    absl::StatusOr<Client> c = Client::Connect(socket);
    if (!c.ok()) return {{"error", std::string(c.status().message())}};
    absl::StatusOr<Client::Reply> r = c->Call(
        "session_create",
        {{"spec", json::object{{"pid", 1000}, {"bts", "lossless"},
                               {"buffer_bytes", 256 << 10}}}});
    if (r.ok()) return {{"id", r->result.at("id")}};
    return {{"code", StatusCodeName(r.status().code())},
            {"message", std::string(r.status().message())}};
  });
  EXPECT_EQ(json::serialize(got.at("code")), "\"RESOURCE_EXHAUSTED\"") << got;
  EXPECT_NE(std::string(got.at("message").as_string()).find("daemon memory limit"),
            std::string::npos)
      << got;
  EXPECT_NE(std::string(got.at("message").as_string()).find("of 512KiB (--mem-limit-total)"),
            std::string::npos)
      << got;
  EXPECT_EQ(json::serialize(PfmctlJson(d_->socket(), {"status"})),
            json::serialize(before));
}

}  // namespace
}  // namespace pfm
