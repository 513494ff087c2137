#include "userspace/pfmd/accounting.h"

#include <gtest/gtest.h>

namespace pfm {
namespace {

constexpr uint64_t kMiB = 1 << 20;

void ExpectBalanced(const MemoryAccountant& a) {
  std::string why;
  EXPECT_TRUE(a.CheckInvariant(&why)) << why;
}

TEST(MemoryAccountant, RingIsChargedToItsOwner) {
  MemoryAccountant a(64 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(1000, 4 * kMiB, 0, 0, 0, "ring").ok());
  EXPECT_EQ(a.Charged(1000), 4 * kMiB);
  EXPECT_EQ(a.Charged(0), 0u);
  ExpectBalanced(a);
}

TEST(MemoryAccountant, SharedBufferSplitsEquallyAndResplitsOnLeave) {
  MemoryAccountant a(64 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(0, 1 * kMiB, 7, 8 * kMiB, kMiB, "root ring").ok());
  EXPECT_EQ(a.Charged(0), 9 * kMiB);  // the whole shared buffer + ring
  ASSERT_TRUE(a.Attach(1000, 2 * kMiB, 7, 8 * kMiB, kMiB, "user ring").ok());
  EXPECT_EQ(a.Charged(0), 1 * kMiB + 4 * kMiB);
  EXPECT_EQ(a.Charged(1000), 2 * kMiB + 4 * kMiB);
  ExpectBalanced(a);
  EXPECT_EQ(a.Detach(0, 1 * kMiB, 7), 0u);
  EXPECT_EQ(a.Charged(0), 0u);
  EXPECT_EQ(a.Charged(1000), 2 * kMiB + 8 * kMiB);
  ExpectBalanced(a);
  a.Detach(1000, 2 * kMiB, 7);
  EXPECT_EQ(a.Allocated(), 0u);
  EXPECT_TRUE(a.Charges().empty());
}

TEST(MemoryAccountant, OddSplitStillSumsExactly) {
  MemoryAccountant a(64 * kMiB, 1024 * kMiB);
  for (uid_t u : {10, 11, 12}) ASSERT_TRUE(a.Attach(u, 0, 1, 100, 10, "c").ok());
  EXPECT_EQ(a.Charged(10), 34u);
  EXPECT_EQ(a.Charged(11), 33u);
  EXPECT_EQ(a.Charged(12), 33u);
  ExpectBalanced(a);
}

TEST(MemoryAccountant, SameUidTwiceCountsOnceInTheSplit) {
  MemoryAccountant a(64 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(5, 0, 1, 100, 10, "a").ok());
  ASSERT_TRUE(a.Attach(5, 0, 1, 100, 10, "b").ok());
  ASSERT_TRUE(a.Attach(6, 0, 1, 100, 10, "c").ok());
  EXPECT_EQ(a.Charged(5), 50u);
  a.Detach(5, 0, 1);  // uid 5 keeps one consumer: split unchanged
  EXPECT_EQ(a.Charged(5), 50u);
  EXPECT_EQ(a.Charged(6), 50u);
  ExpectBalanced(a);
}

TEST(MemoryAccountant, RefusalNamesLimitUsageAndRequestAndChangesNothing) {
  MemoryAccountant a(10 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(1000, 6 * kMiB, 0, 0, 0, "first ring").ok());
  absl::Status s = a.Attach(1000, 8 * kMiB, 0, 0, 0, "session 2's ring");
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("10MiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("6MiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("8MiB"), std::string::npos) << s.message();
  EXPECT_EQ(a.Charged(1000), 6 * kMiB);
  EXPECT_EQ(a.Allocated(), 6 * kMiB);
  // A refused join of a pool leaves the pool as it was.
  ASSERT_TRUE(a.Attach(0, 0, 3, 10 * kMiB, kMiB, "root").ok());
  EXPECT_FALSE(a.Attach(1000, 0, 3, 0, 0, "join").ok());  // 6 + 5 > 10
  EXPECT_EQ(a.Charged(0), 10 * kMiB);
  EXPECT_EQ(a.Charged(1000), 6 * kMiB);
  ExpectBalanced(a);
}

TEST(MemoryAccountant, DaemonWideLimitRefuses) {
  MemoryAccountant a(64 * kMiB, 10 * kMiB);
  ASSERT_TRUE(a.Attach(1, 6 * kMiB, 0, 0, 0, "a").ok());
  absl::Status s = a.Attach(2, 6 * kMiB, 0, 0, 0, "b");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("daemon memory limit"), std::string::npos);
}

TEST(MemoryAccountant, LeavingShrinksTheSharedBufferToFitTheRemainingUid) {
  // uid 1000 may hold 10MiB: 4MiB ring + half of a 10MiB pool = 9MiB. When
  // root leaves, the whole pool would make 14MiB: the pool shrinks to 6MiB.
  MemoryAccountant a(10 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(0, 0, 9, 10 * kMiB, 1 * kMiB, "root").ok());
  ASSERT_TRUE(a.Attach(1000, 4 * kMiB, 9, 10 * kMiB, 1 * kMiB, "user").ok());
  EXPECT_EQ(a.Charged(1000), 9 * kMiB);
  EXPECT_EQ(a.Detach(0, 0, 9), 6 * kMiB);
  EXPECT_EQ(a.PoolBytes(9), 6 * kMiB);
  EXPECT_EQ(a.Charged(1000), 10 * kMiB);
  ExpectBalanced(a);
}

TEST(MemoryAccountant, ShrinkStopsAtTheMinimumAndLeavingStillSucceeds) {
  MemoryAccountant a(10 * kMiB, 1024 * kMiB);
  ASSERT_TRUE(a.Attach(0, 0, 9, 8 * kMiB, 4 * kMiB, "root").ok());
  ASSERT_TRUE(a.Attach(1000, 6 * kMiB, 9, 8 * kMiB, 4 * kMiB, "user").ok());
  EXPECT_EQ(a.Detach(0, 0, 9), 4 * kMiB);  // 6 + 4 = 10 fits exactly
  ExpectBalanced(a);
}

TEST(MemoryAccountant, ManyJoinsAndLeavesKeepTheInvariant) {
  MemoryAccountant a(1 << 30, 1ull << 40);
  uint64_t seed = 42;
  auto next = [&] { seed = seed * 6364136223846793005ull + 1442695040888963407ull; return seed >> 33; };
  struct Att { uid_t uid; uint64_t ring; PoolId pool; };
  std::vector<Att> live;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || next() % 3 != 0) {
      Att t{static_cast<uid_t>(next() % 5), next() % 100000, next() % 4};
      if (a.Attach(t.uid, t.ring, t.pool, 1 + next() % 1000000, 1, "x").ok())
        live.push_back(t);
    } else {
      size_t k = next() % live.size();
      a.Detach(live[k].uid, live[k].ring, live[k].pool);
      live.erase(live.begin() + k);
    }
    std::string why;
    ASSERT_TRUE(a.CheckInvariant(&why)) << why << " at step " << i;
  }
  for (const Att& t : live) a.Detach(t.uid, t.ring, t.pool);
  EXPECT_EQ(a.Allocated(), 0u);
}

}  // namespace
}  // namespace pfm
