#include "kernel/ds/ds_area.h"

#include "gtest/gtest.h"

namespace pfm {
namespace {

TEST(DsArea, ThresholdRaisesInterruptAndMaximumDrops) {
  DsArea a(0, /*bts_records=*/8, /*bts_threshold=*/6, /*pebs_records=*/2,
           /*pebs_threshold=*/1);
  EXPECT_EQ(a.save_area().bts_absolute_maximum, 8 * sizeof(pfm_bts_raw));
  EXPECT_EQ(a.save_area().bts_interrupt_threshold, 6 * sizeof(pfm_bts_raw));
  pfm_bts_raw r{0x401000, 0x401010, PFM_BTS_RAW_PREDICTED};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.WriteBts(r), DsArea::kStored) << i;
  EXPECT_EQ(a.WriteBts(r), DsArea::kInterrupt);  // index reached the threshold
  EXPECT_EQ(a.WriteBts(r), DsArea::kInterrupt);  // still above it
  EXPECT_EQ(a.WriteBts(r), DsArea::kInterrupt);
  EXPECT_EQ(a.bts_count(), 8u);
  EXPECT_EQ(a.WriteBts(r), DsArea::kDropped);  // the CPU stops storing
  EXPECT_EQ(a.bts_dropped(), 1u);
  EXPECT_EQ(a.bts_records()[7].from, 0x401000u);
  a.ResetBts();
  EXPECT_EQ(a.bts_count(), 0u);
  EXPECT_EQ(a.WriteBts(r), DsArea::kStored);
  pfm_pebs_raw p{};
  EXPECT_EQ(a.WritePebs(p), DsArea::kInterrupt);
  EXPECT_EQ(a.WritePebs(p), DsArea::kInterrupt);
  EXPECT_EQ(a.WritePebs(p), DsArea::kDropped);
  EXPECT_EQ(a.pebs_dropped(), 1u);
  EXPECT_EQ(a.bytes(), 8 * sizeof(pfm_bts_raw) + 2 * sizeof(pfm_pebs_raw));
}

TEST(DsArea, PebsCounterResetIgnoresOutOfRangeCounters) {
  DsArea a(0, 4, 4, 4, 4);
  a.set_pebs_counter_reset(1, 1000);
  a.set_pebs_counter_reset(PFM_DS_MAX_PEBS_COUNTERS, 5);
  a.set_pebs_counter_reset(-1, 5);
  EXPECT_EQ(a.save_area().pebs_counter_reset[1], 1000u);
  EXPECT_EQ(a.save_area().pebs_counter_reset[0], 0u);
}

}  // namespace
}  // namespace pfm
