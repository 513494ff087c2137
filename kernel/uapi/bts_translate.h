// How a drained BTS record becomes a ring record, in one place for the two
// writers of it: the DS allocator's drain, which translates raw records into
// pfm_records (kernel/ds/ds_allocator.cc), and the compact codec's fused
// encoder, which encodes raw records straight into compact bytes without
// building the pfm_records (EncodeBtsRun, compact_codec.h). Both must give
// the same records, so both use these.
//
// Header-only, pure, thread-compatible.
#ifndef PFM_KERNEL_UAPI_BTS_TRANSLATE_H_
#define PFM_KERNEL_UAPI_BTS_TRANSLATE_H_

#include <cstdint>
#include <cstring>

#include "kernel/uapi/pfm_uapi.h"

namespace pfm {

// The interpolated times of one drain's BTS records (hardware BTS records
// carry no time): record i of n drained over (t0, t0 + span] is stamped
// t0 + floor(span * (i + 1) / n), kept incrementally as a quotient and a
// remainder so that no record costs a division. Copyable: a caller that may
// have to redo a run keeps a copy from before it.
struct BtsClock {
  uint64_t t0 = 0;
  uint64_t acc_q = 0, acc_r = 0;    // span * (i + 1) / n, quotient, remainder
  uint64_t step_q = 0, step_r = 0;  // span / n, span % n
  uint64_t n = 0;

  BtsClock() = default;
  // The clock of n records over (t0, t0 + span], at record 0.
  BtsClock(uint64_t t0_, uint64_t span, uint64_t n_)
      : t0(t0_),
        acc_q(n_ ? span / n_ : 0),
        acc_r(n_ ? span % n_ : 0),
        step_q(acc_q),
        step_r(acc_r),
        n(n_) {}

  // The time of the record the clock is at.
  uint64_t Peek() const { return t0 + acc_q; }
  // On to the next record.
  void Advance() {
    acc_q += step_q;
    acc_r += step_r;
    if (acc_r >= n) {
      acc_r -= n;
      ++acc_q;
    }
  }
  // Peek, then Advance.
  uint64_t Next() {
    const uint64_t t = Peek();
    Advance();
    return t;
  }
};

// The task and CPU a drain's records belong to.
struct BtsOrigin {
  uint16_t cpu = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
};

// Whether a raw record becomes a user-mode BRANCH (not a gap marker, not a
// branch from the kernel): what every user BTS consumer takes.
inline bool IsUserBranch(const pfm_bts_raw& b) {
  return !(b.flags & PFM_BTS_RAW_GAP) && !PFM_ADDR_IS_KERNEL(b.from);
}

// One BTS record as a ring record: every byte written, the union bytes a
// branch does not use zero (normalized). Fields are stored in place: building
// the record in a local and copying it stalls on store forwarding.
inline void TranslateBts(const pfm_bts_raw& b, uint64_t time,
                         const BtsOrigin& o, pfm_record* out) {
  // Soft BTS's gap marker (PFM_BTS_RAW_GAP) is a gap record of the same
  // layout; hardware never sets the bit.
  const bool gap = (b.flags & PFM_BTS_RAW_GAP) != 0;
  out->type = gap ? PFM_REC_GAP : PFM_REC_BRANCH;
  out->cpu = o.cpu;
  out->misc =
      ((b.flags & PFM_BTS_RAW_PREDICTED) ? PFM_MISC_BRANCH_PREDICTED : 0u) |
      (PFM_ADDR_IS_KERNEL(b.from) ? PFM_MISC_BRANCH_KERNEL_FROM : 0u);
  out->time = time;
  out->pid = o.pid;
  out->tid = o.tid;
  out->u.branch.from = b.from;
  out->u.branch.to = b.to;
  out->u.branch.flags = gap ? 0 : b.flags;
  std::memset(out->u.raw + sizeof(out->u.branch), 0,
              sizeof(out->u.raw) - sizeof(out->u.branch));
}

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_BTS_TRANSLATE_H_
