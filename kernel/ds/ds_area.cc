#include "kernel/ds/ds_area.h"

#include <cassert>
#include <cstring>

namespace pfm {

DsArea::DsArea(int cpu, uint32_t bts_records, uint32_t bts_threshold,
               uint32_t pebs_records, uint32_t pebs_threshold)
    : cpu_(cpu),
      bts_(new pfm_bts_raw[bts_records]()),
      pebs_(new pfm_pebs_raw[pebs_records]()) {
  assert(bts_threshold > 0 && bts_threshold <= bts_records);
  assert(pebs_threshold > 0 && pebs_threshold <= pebs_records);
  // Offsets, not addresses: the model keeps no pointers in the save area.
  sa_.bts_buffer_base = 0;
  sa_.bts_index = 0;
  sa_.bts_absolute_maximum = uint64_t{bts_records} * sizeof(pfm_bts_raw);
  sa_.bts_interrupt_threshold = uint64_t{bts_threshold} * sizeof(pfm_bts_raw);
  sa_.pebs_buffer_base = 0;
  sa_.pebs_index = 0;
  sa_.pebs_absolute_maximum = uint64_t{pebs_records} * sizeof(pfm_pebs_raw);
  sa_.pebs_interrupt_threshold =
      uint64_t{pebs_threshold} * sizeof(pfm_pebs_raw);
}

DsArea::WriteResult DsArea::WriteBts(const pfm_bts_raw& rec) {
  if (sa_.bts_index >= sa_.bts_absolute_maximum) {
    ++bts_dropped_;
    return kDropped;
  }
  bts_[sa_.bts_index / sizeof(pfm_bts_raw)] = rec;
  sa_.bts_index += sizeof(pfm_bts_raw);
  return sa_.bts_index >= sa_.bts_interrupt_threshold ? kInterrupt : kStored;
}

DsArea::WriteResult DsArea::WritePebs(const pfm_pebs_raw& rec) {
  if (sa_.pebs_index >= sa_.pebs_absolute_maximum) {
    ++pebs_dropped_;
    return kDropped;
  }
  pebs_[sa_.pebs_index / sizeof(pfm_pebs_raw)] = rec;
  sa_.pebs_index += sizeof(pfm_pebs_raw);
  return sa_.pebs_index >= sa_.pebs_interrupt_threshold ? kInterrupt
                                                         : kStored;
}

void DsArea::set_pebs_counter_reset(int counter, uint64_t value) {
  if (counter >= 0 && counter < PFM_DS_MAX_PEBS_COUNTERS)
    sa_.pebs_counter_reset[counter] = value;
}

size_t DsArea::bytes() const {
  return sa_.bts_absolute_maximum + sa_.pebs_absolute_maximum;
}

}  // namespace pfm
