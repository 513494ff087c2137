// A per-CPU Debug Store area, modelled as the hardware has it.
//
// The DS save area (pfm_ds_save_area) holds, for BTS and for PEBS, the
// buffer base, the current index, the absolute maximum and the interrupt
// threshold (byte offsets into this area's buffers). The "hardware" (a
// driver) appends raw records through WriteBts/WritePebs exactly as the CPU
// would: at the index, advancing it by one record. When the index reaches the
// interrupt threshold the write reports kInterrupt and the driver must raise
// CoreHooks::DsInterrupt before writing more; at the absolute maximum the
// record is dropped and counted (the CPU stops storing).
//
// Buffers are allocated once, at construction; no write allocates.
// Not thread-safe: one CPU's area is written by one thread at a time.
#ifndef PFM_KERNEL_DS_DS_AREA_H_
#define PFM_KERNEL_DS_DS_AREA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

class DsArea {
 public:
  enum WriteResult { kStored = 0, kInterrupt = 1, kDropped = 2 };

  // Sizes in records; thresholds in records (0 < threshold <= records).
  DsArea(int cpu, uint32_t bts_records, uint32_t bts_threshold,
         uint32_t pebs_records, uint32_t pebs_threshold);
  DsArea(const DsArea&) = delete;
  DsArea& operator=(const DsArea&) = delete;

  int cpu() const { return cpu_; }
  const pfm_ds_save_area& save_area() const { return sa_; }

  WriteResult WriteBts(const pfm_bts_raw& rec);
  WriteResult WritePebs(const pfm_pebs_raw& rec);

  // Records stored since the last reset, oldest first.
  size_t bts_count() const { return sa_.bts_index / sizeof(pfm_bts_raw); }
  const pfm_bts_raw* bts_records() const { return bts_.get(); }
  size_t pebs_count() const { return sa_.pebs_index / sizeof(pfm_pebs_raw); }
  const pfm_pebs_raw* pebs_records() const { return pebs_.get(); }

  // After a drain: index back to base (as a PMI handler does).
  void ResetBts() { sa_.bts_index = sa_.bts_buffer_base; }
  void ResetPebs() { sa_.pebs_index = sa_.pebs_buffer_base; }

  void set_pebs_counter_reset(int counter, uint64_t value);

  // Records the CPU could not store (index at absolute maximum).
  uint64_t bts_dropped() const { return bts_dropped_; }
  uint64_t pebs_dropped() const { return pebs_dropped_; }

  size_t bytes() const;  // memory held by the buffers

 private:
  int cpu_;
  pfm_ds_save_area sa_{};
  std::unique_ptr<pfm_bts_raw[]> bts_;
  std::unique_ptr<pfm_pebs_raw[]> pebs_;
  uint64_t bts_dropped_ = 0;
  uint64_t pebs_dropped_ = 0;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DS_DS_AREA_H_
