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

#include <cstddef>
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
  // Without a branch: whether the remainder carries follows step_r / n, a
  // pattern a branch predictor misses on often for real spans.
  void Advance() {
    acc_r += step_r;
    uint64_t wrapped;
    const bool below = __builtin_sub_overflow(acc_r, n, &wrapped);
    acc_r = below ? acc_r : wrapped;
    acc_q += step_q + !below;
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

// One origin's branch records' first word (type BRANCH, cpu, misc) by
// whether the branch was predicted (bit 0) and comes from the kernel (bit
// 1), and their pid/tid word: what TranslateBts stores, made once per
// drain instead of once per record.
struct BtsWords {
  uint64_t head[4];
  uint64_t ids;
  explicit BtsWords(const BtsOrigin& o)
      : ids(o.pid | uint64_t{o.tid} << 32) {
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t misc =
          ((k & 1) ? PFM_MISC_BRANCH_PREDICTED : 0u) |
          ((k & 2) ? PFM_MISC_BRANCH_KERNEL_FROM : 0u);
      head[k] = uint64_t{PFM_REC_BRANCH} | uint64_t{o.cpu} << 16 |
                uint64_t{misc} << 32;
    }
  }
};

// One BTS record as a ring record: every byte written, the union bytes a
// branch does not use zero (normalized). Stored a word at a time straight
// into place, `from` and `to` as one 16-byte copy from the raw record, the
// first word from the table by two bits: 6 stores instead of 10 field by
// field (the fixed drain's translation loop, callgrind: 30 instructions a
// record instead of 38); building the record in a local and copying it
// stalls on store forwarding.
inline void TranslateBts(const pfm_bts_raw& b, uint64_t time,
                         const BtsWords& words, pfm_record* out) {
  static_assert(offsetof(pfm_record, cpu) == 2 &&
                    offsetof(pfm_record, misc) == 4 &&
                    offsetof(pfm_record, time) == 8 &&
                    offsetof(pfm_record, pid) == 16 &&
                    offsetof(pfm_record, tid) == 20 &&
                    offsetof(pfm_record, u.branch.from) == 24 &&
                    offsetof(pfm_record, u.branch.to) == 32 &&
                    offsetof(pfm_record, u.branch.flags) == 40 &&
                    sizeof(pfm_record) == 64,
                "the words stored below");
  static_assert(offsetof(pfm_bts_raw, to) == offsetof(pfm_bts_raw, from) + 8,
                "from and to copied as one");
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the words below");
  static_assert(PFM_BTS_RAW_PREDICTED == 1u << 4, "the index below");
  const uint64_t flags = b.flags;
  const size_t k = (flags >> 4 & 1) | size_t{PFM_ADDR_IS_KERNEL(b.from)} << 1;
  uint64_t head = words.head[k];
  uint64_t branch_flags = flags;
  // Soft BTS's gap marker (PFM_BTS_RAW_GAP) is a gap record of the same
  // layout, its flags 0; hardware never sets the bit.
  if (__builtin_expect((flags & PFM_BTS_RAW_GAP) != 0, 0)) {
    head ^= uint64_t{PFM_REC_BRANCH} ^ uint64_t{PFM_REC_GAP};
    branch_flags = 0;
  }
  uint8_t* const q = reinterpret_cast<uint8_t*>(out);
  std::memcpy(q, &head, 8);
  std::memcpy(q + 8, &time, 8);
  std::memcpy(q + 16, &words.ids, 8);
  std::memcpy(q + 24, &b.from, 16);
  std::memcpy(q + 40, &branch_flags, 8);
  std::memset(q + 48, 0, 16);
}

// The same for one record (the words made for it).
inline void TranslateBts(const pfm_bts_raw& b, uint64_t time,
                         const BtsOrigin& o, pfm_record* out) {
  TranslateBts(b, time, BtsWords(o), out);
}

}  // namespace pfm

#endif  // PFM_KERNEL_UAPI_BTS_TRANSLATE_H_
