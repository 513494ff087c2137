// Reader of a perf_event_open mmap ring (struct perf_event_mmap_page plus a
// power-of-two data area), and the parsers for the records pfm uses:
// PERF_RECORD_SAMPLE (for a given sample_type), PERF_RECORD_SWITCH,
// PERF_RECORD_SWITCH_CPU_WIDE and PERF_RECORD_LOST. Other record types are
// skipped by their size.
//
// Memory ordering (include/uapi/linux/perf_event.h, kernel/events/ring_buffer.c):
//
//   kernel (writer)                      reader (this class)
//   write record bytes                   head = load_acquire(&pg->data_head)
//   smp_wmb()                            read records in [tail, head)
//   data_head = new head   ------------> (acquire pairs with the kernel's wmb)
//                                        store_release(&pg->data_tail, head)
//   reads data_tail before   <---------- (release: our reads are done before
//   overwriting                           the kernel may reuse the space)
//
// A record that wraps the end of the data area is copied into a buffer owned
// by the reader, so callers always see a contiguous record. A record whose
// size is smaller than its header, not 8-byte aligned, or larger than what
// the kernel published is corruption: parsing stops, the unread rest is
// discarded (tail = head) and -EIO is returned.
//
// Not thread-safe: one reader per ring. No allocation after Init().
#ifndef PFM_KERNEL_DRIVERS_PERF_PERF_RING_H_
#define PFM_KERNEL_DRIVERS_PERF_PERF_RING_H_

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

// PERF_SAMPLE_* bits the sample parser understands (fields are read in the
// kernel's order; CALLCHAIN and RAW are skipped by their own length).
constexpr uint64_t kPerfSupportedSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
    PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_ID |
    PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
    PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW | PERF_SAMPLE_WEIGHT |
    PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_TRANSACTION |
    PERF_SAMPLE_PHYS_ADDR | PERF_SAMPLE_WEIGHT_STRUCT |
    // After every field parsed: allowed, not read.
    PERF_SAMPLE_CGROUP | PERF_SAMPLE_DATA_PAGE_SIZE |
    PERF_SAMPLE_CODE_PAGE_SIZE;

struct PerfSample {
  uint64_t id = 0;
  uint64_t ip = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t time = 0;
  uint64_t addr = 0;
  uint64_t stream_id = 0;
  uint32_t cpu = 0;
  uint64_t period = 0;
  uint64_t weight = 0;  // WEIGHT, or WEIGHT_STRUCT's var1_dw (latency)
  uint64_t data_src = 0;
  uint64_t transaction = 0;
  uint64_t phys_addr = 0;
};

// The sample_id trailer of non-sample records (attr.sample_id_all).
struct PerfSampleId {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = 0;
};

struct PerfRecord {
  uint32_t type = 0;  // PERF_RECORD_*
  uint16_t misc = 0;
  uint16_t size = 0;
  PerfSample sample;        // PERF_RECORD_SAMPLE
  PerfSampleId sample_id;   // other records, when sample_id_all
  // PERF_RECORD_SWITCH(_CPU_WIDE)
  bool switch_out = false;      // PERF_RECORD_MISC_SWITCH_OUT
  bool switch_preempt = false;  // PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
  uint32_t next_prev_pid = 0;   // CPU_WIDE only
  uint32_t next_prev_tid = 0;
  // PERF_RECORD_LOST
  uint64_t lost_id = 0;
  uint64_t lost = 0;
  // The record's bytes (valid during the callback only).
  const uint8_t* raw = nullptr;
};

// Parses one record's bytes (header included). -EINVAL when a field runs
// past `size` (the record is then left partly filled).
int ParsePerfRecord(const uint8_t* rec, size_t size, uint64_t sample_type,
                    bool sample_id_all, PerfRecord* out);

class PerfRingReader {
 public:
  PerfRingReader() = default;
  PerfRingReader(const PerfRingReader&) = delete;
  PerfRingReader& operator=(const PerfRingReader&) = delete;

  // `base` is the mmap of a perf fd: one metadata page then 2^n data pages
  // (`len` bytes in all; data_offset/data_size from the metadata page when
  // the kernel set them, else page size / len - page size). Does not take
  // ownership. -EINVAL for a length that is not 1 + 2^n pages or sample
  // bits the parser cannot walk.
  int Init(void* base, size_t len, uint64_t sample_type, bool sample_id_all,
           ErrorDetail* d);

  // Calls `fn` for every record in [tail, head), oldest first, then
  // publishes the new tail. Returns the number of records delivered, or
  // -EIO on corruption (see above; records before it were delivered).
  int Read(const std::function<void(const PerfRecord&)>& fn, ErrorDetail* d);

  // Bytes the kernel has published and we have not consumed.
  uint64_t pending() const;
  // Bytes thrown away after corruption, over the reader's life.
  uint64_t discarded_bytes() const { return discarded_; }

 private:
  perf_event_mmap_page* page_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  uint64_t sample_type_ = 0;
  bool sample_id_all_ = false;
  std::unique_ptr<uint8_t[]> wrap_buf_;  // 64 KiB: the largest record
  uint64_t discarded_ = 0;
};

// BTS through perf (branch-instructions, sample_period 1, sample_type
// IP|ADDR): the sample's ip is the branch source and addr its target.
pfm_bts_raw BtsFromSample(const PerfSample& s);
// PEBS through perf (precise_ip > 0): ip, data address, latency (weight)
// and data source land where the hardware's PEBS record has them;
// applicable_counters gets the bit of `counter`; tsc carries the sample
// time (perf clock ns, not TSC ticks).
pfm_pebs_raw PebsFromSample(const PerfSample& s, int counter);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PERF_PERF_RING_H_
