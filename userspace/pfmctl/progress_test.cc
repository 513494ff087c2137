#include "userspace/pfmctl/progress.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace pfm {
namespace {

TEST(ProgressTest, DisabledWritesNothing) {
  std::ostringstream out;
  {
    ProgressLine line(&out, false, [] { return uint64_t{0}; });
    EXPECT_FALSE(line.Due());
    line.Show(ProgressCounts{});
    line.Clear();
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressTest, RedrawsInPlaceAtMostFourTimesASecondAndClearsAtTheEnd) {
  std::ostringstream out;
  uint64_t now = 1'000'000'000;
  {
    ProgressLine line(&out, true, [&] { return now; });
    EXPECT_TRUE(line.Due());  // the first at once
    ProgressCounts c;
    c.steps = 1234;
    c.branches = 56;
    c.bytes = 3 << 20;
    c.lost = 7;
    now += 1'500'000'000;
    line.Show(c);
    EXPECT_EQ(out.str(), "\r\033[Kpfmctl: 1.5s  steps 1234  branches 56  written 3MiB  lost 7");
    now += kProgressIntervalNs - 1;
    EXPECT_FALSE(line.Due());
    now += 1;
    EXPECT_TRUE(line.Due());
    c.steps.reset();
    line.Show(c);
    EXPECT_NE(out.str().find("steps -  branches"), std::string::npos) << out.str();
    out.str("");
  }
  // Destruction erases the line it left.
  EXPECT_EQ(out.str(), "\r\033[K");
}

TEST(ProgressTest, ClearWithoutALineWritesNothing) {
  std::ostringstream out;
  ProgressLine line(&out, true);
  line.Clear();
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressTest, EnvironmentForcesItOnOrOff) {
  ASSERT_EQ(setenv("PFMCTL_PROGRESS", "1", 1), 0);
  EXPECT_TRUE(ProgressWanted());
  ASSERT_EQ(setenv("PFMCTL_PROGRESS", "0", 1), 0);
  EXPECT_FALSE(ProgressWanted());
  ASSERT_EQ(unsetenv("PFMCTL_PROGRESS"), 0);
}

}  // namespace
}  // namespace pfm
