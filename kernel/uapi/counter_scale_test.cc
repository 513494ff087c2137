#include "kernel/uapi/counter_scale.h"

#include "gtest/gtest.h"

namespace pfm {
namespace {

TEST(CounterScale, ACounterThatNeverRanIsNotCountedRatherThanZero) {
  const CounterScale s = ScaleCounter(0, 1000, 0);
  EXPECT_FALSE(s.counted);
  EXPECT_EQ(s.ratio, 0);
  EXPECT_EQ(s.scaled, 0);
}

TEST(CounterScale, HalfTheTimeOnTheHardwareDoublesTheEstimate) {
  const CounterScale s = ScaleCounter(500, 2000, 1000);
  EXPECT_TRUE(s.counted);
  EXPECT_DOUBLE_EQ(s.ratio, 0.5);
  EXPECT_DOUBLE_EQ(s.scaled, 1000);
}

TEST(CounterScale, AlwaysOnTheHardwareIsTheValueItself) {
  const CounterScale s = ScaleCounter(12345, 777, 777);
  EXPECT_DOUBLE_EQ(s.ratio, 1);
  EXPECT_DOUBLE_EQ(s.scaled, 12345);
}

TEST(CounterScale, RunningBeyondEnabledIsClampedNotAboveOne) {
  EXPECT_DOUBLE_EQ(ScaleCounter(10, 100, 150).ratio, 1);
  EXPECT_DOUBLE_EQ(ScaleCounter(10, 100, 150).scaled, 10);
  // No enabled time at all: nothing to scale by.
  EXPECT_FALSE(ScaleCounter(10, 0, 5).counted);
}

}  // namespace
}  // namespace pfm
