#include "kernel/uapi/compact_codec.h"

#include <cassert>
#include <cerrno>
#include <cstring>

namespace pfm {
namespace {

using compact_lead::kCpuBit;
using compact_lead::kEscape;
using compact_lead::kMiscBit;
using compact_lead::kPidBit;
using compact_lead::kPredFlipBit;
using compact_lead::kShortBranch;
using compact_lead::kTidBit;
using compact_lead::kTimeAdjBit;
using compact_lead::kTimeSameBit;
using compact_lead::kToCachedBit;
using compact_lead::kTypeMask;

size_t ToSlot(uint64_t from) {
  return static_cast<size_t>((from * 0x9e3779b97f4a7c15ull) >> 60) %
         kToCacheEntries;
}

constexpr size_t kMaxVarint64 = 10;
constexpr size_t kMaxVarint32 = 5;
constexpr size_t kMaxVarint16 = 3;

// Escaped form: lead byte + the fixed record minus its 2-byte type.
constexpr size_t kEscapeBytes = 1 + sizeof(pfm_record) - 2;
static_assert(sizeof(pfm_record) == PFM_RECORD_FIXED_SIZE, "uapi layout");
static_assert(kEscapeBytes == kMaxCompactRecordBytes,
              "the escape form is the worst case");
static_assert(kMaxCompactRecordBytes <= 64, "at most the fixed size");
static_assert(PFM_REC_TYPE_MAX <= kEscape, "types fit the lead nibble");
static_assert(PFM_REC_TYPE_MAX <= kShortBranch && kShortBranch != kEscape,
              "the short-branch nibble is no record type");

// Delta form worst case (PEBS): lead, time, cpu, pid, tid, misc, then
// ip/addr/latency/data_src and event/counter. The scratch buffer holds it.
constexpr size_t kMaxDeltaBytes = 1 + kMaxVarint64 + kMaxVarint16 +
                                  3 * kMaxVarint32 + 4 * kMaxVarint64 +
                                  2 * kMaxVarint32;
static_assert(kMaxDeltaBytes == 79, "PEBS is the longest delta form");

// Union bytes that belong to each type; the rest is zeroed on decode.
size_t UnionBytes(uint32_t type) {
  switch (type) {
    case PFM_REC_BRANCH: return 24;
    case PFM_REC_PEBS: return 40;
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN: return 8;
    case PFM_REC_LOST: return 8;
    case PFM_REC_COUNTER: return 28;  // _pad is not data
    case PFM_REC_THROTTLE: return 8;
    case PFM_REC_RESIZED: return 16;
    case PFM_REC_EXIT: return 8;
    case PFM_REC_SCHEDULE: return 8;
    default: return 0;
  }
}

uint64_t UnZigZag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

// Writer into a buffer the caller sized for the worst case.
struct Out {
  uint8_t* p;
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      *p++ = static_cast<uint8_t>(v | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<uint8_t>(v);
  }
};

// Bounds-checked reader: every failure is sticky, so callers check once.
struct In {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  uint64_t Varint() {
    uint64_t v = 0;
    for (size_t i = 0; i < kMaxVarint64; ++i) {
      if (p == end) break;
      const uint8_t b = *p++;
      // The tenth byte holds bit 63 only.
      if (i == kMaxVarint64 - 1 && b > 1) break;
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  uint32_t Varint32() {
    const uint64_t v = Varint();
    if (v > UINT32_MAX) ok = false;
    return static_cast<uint32_t>(v);
  }
  uint16_t Varint16() {
    const uint64_t v = Varint();
    if (v > UINT16_MAX) ok = false;
    return static_cast<uint16_t>(v);
  }
};

// The short branch form (see the header), or 0 when `r` is not eligible.
size_t EncodeShortBranch(const pfm_record& r, const CodecState& st,
                         uint8_t* buf) {
  if (r.type != PFM_REC_BRANCH || r.cpu != st.cpu || r.pid != st.pid ||
      r.tid != st.tid)
    return 0;
  uint8_t lead = kShortBranch;
  if (r.misc != st.branch_misc || r.u.branch.flags != st.branch_flags) {
    // Only the predicted bit may differ, in both misc and flags.
    if (r.misc != (st.branch_misc ^ PFM_MISC_BRANCH_PREDICTED) ||
        r.u.branch.flags != (st.branch_flags ^ PFM_BTS_RAW_PREDICTED))
      return 0;
    lead |= kPredFlipBit;
  }
  const uint64_t delta = r.time - st.time;
  if (delta == st.time_delta) {
    lead |= kTimeSameBit;
  } else if (delta == st.time_delta + 1) {
    lead |= kTimeSameBit | kTimeAdjBit;
  } else if (delta == st.time_delta - 1) {
    lead |= kTimeAdjBit;
  }
  if (r.u.branch.to == st.to_cache[ToSlot(r.u.branch.from)]) lead |= kToCachedBit;
  Out o{buf};
  *o.p++ = lead;
  if (!(lead & (kTimeSameBit | kTimeAdjBit)))
    o.Varint(ZigZag(delta - st.time_delta));
  o.Varint(ZigZag(r.u.branch.from - st.branch_to));
  if (!(lead & kToCachedBit)) o.Varint(ZigZag(r.u.branch.to - r.u.branch.from));
  return static_cast<size_t>(o.p - buf);
}

// Encodes the long delta form into `buf` (kMaxDeltaBytes) and returns its
// size.
size_t EncodeLong(const pfm_record& r, const CodecState& st, uint8_t* buf) {
  uint8_t lead = static_cast<uint8_t>(r.type);
  if (r.cpu != st.cpu) lead |= kCpuBit;
  if (r.pid != st.pid) lead |= kPidBit;
  if (r.tid != st.tid) lead |= kTidBit;
  const bool branch = r.type == PFM_REC_BRANCH;
  if (branch ? (r.misc != st.branch_misc || r.u.branch.flags != st.branch_flags)
             : r.misc != 0)
    lead |= kMiscBit;

  Out o{buf};
  *o.p++ = lead;
  o.Varint(ZigZag(r.time - st.time));
  if (lead & kCpuBit) o.Varint(r.cpu);
  if (lead & kPidBit) o.Varint(r.pid);
  if (lead & kTidBit) o.Varint(r.tid);
  if (lead & kMiscBit) o.Varint(r.misc);
  switch (r.type) {
    case PFM_REC_BRANCH:
      o.Varint(ZigZag(r.u.branch.from - st.branch_to));
      o.Varint(ZigZag(r.u.branch.to - r.u.branch.from));
      if (lead & kMiscBit) o.Varint(r.u.branch.flags);
      break;
    case PFM_REC_PEBS:
      o.Varint(r.u.pebs.ip);
      o.Varint(r.u.pebs.addr);
      o.Varint(r.u.pebs.latency);
      o.Varint(r.u.pebs.data_src);
      o.Varint(r.u.pebs.event);
      o.Varint(r.u.pebs.counter);
      break;
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN:
      o.Varint(r.u.sw.other_pid);
      o.Varint(r.u.sw.other_tid);
      break;
    case PFM_REC_LOST:
    case PFM_REC_THROTTLE:
      o.Varint(r.u.lost.count);
      break;
    case PFM_REC_COUNTER:
      o.Varint(r.u.counter.value);
      o.Varint(r.u.counter.time_enabled);
      o.Varint(r.u.counter.time_running);
      o.Varint(r.u.counter.request);
      break;
    case PFM_REC_RESIZED:
      o.Varint(r.u.resized.old_bytes);
      o.Varint(r.u.resized.new_bytes);
      break;
    case PFM_REC_EXIT:
      o.Varint(ZigZag(static_cast<uint64_t>(r.u.exit.status)));
      break;
    case PFM_REC_SCHEDULE:
      o.Varint(r.u.sched.request);
      o.Varint(r.u.sched.slot);
      break;
  }
  const size_t n = static_cast<size_t>(o.p - buf);
  assert(n <= kMaxDeltaBytes);
  return n;
}

// The shorter of the two delta forms.
size_t EncodeDelta(const pfm_record& r, const CodecState& st, uint8_t* buf) {
  const size_t n = EncodeLong(r, st, buf);
  uint8_t shorter[kMaxDeltaBytes];
  const size_t m = EncodeShortBranch(r, st, shorter);
  if (m == 0 || m >= n) return n;
  memcpy(buf, shorter, m);
  return m;
}

void Advance(const pfm_record& r, CodecState* st) {
  st->time_delta = r.time - st->time;
  st->time = r.time;
  st->cpu = r.cpu;
  st->pid = r.pid;
  st->tid = r.tid;
  if (r.type == PFM_REC_BRANCH) {
    st->branch_to = r.u.branch.to;
    st->branch_flags = r.u.branch.flags;
    st->branch_misc = r.misc;
    st->to_cache[ToSlot(r.u.branch.from)] = r.u.branch.to;
  }
}

}  // namespace

void NormalizeRecord(pfm_record* r) {
  const size_t used = UnionBytes(r->type);
  memset(r->u.raw + used, 0, sizeof(r->u.raw) - used);
}

size_t EncodedSize(const pfm_record& r, const CodecState& st) {
  if (!IsRecordType(r.type)) return 0;
  uint8_t buf[kMaxDeltaBytes];
  const size_t n = EncodeDelta(r, st, buf);
  return n > kMaxCompactRecordBytes ? kEscapeBytes : n;
}

size_t EncodeRecord(const pfm_record& r, CodecState* st, uint8_t* out) {
  if (!IsRecordType(r.type)) return 0;
  uint8_t buf[kMaxDeltaBytes];
  size_t n = EncodeDelta(r, *st, buf);
  if (n <= kMaxCompactRecordBytes) {
    memcpy(out, buf, n);
  } else {
    pfm_record copy = r;
    NormalizeRecord(&copy);
    out[0] = static_cast<uint8_t>(r.type << 4 | kEscape);
    memcpy(out + 1, reinterpret_cast<const uint8_t*>(&copy) + 2,
           sizeof(copy) - 2);
    n = kEscapeBytes;
  }
  Advance(r, st);
  return n;
}

int DecodeRecord(const uint8_t* in, size_t avail, CodecState* st,
                 pfm_record* out) {
  if (avail == 0) return -EINVAL;
  const uint8_t lead = in[0];
  if (lead == PFM_REC_PAD) return 0;
  pfm_record r;
  memset(&r, 0, sizeof(r));

  if ((lead & kTypeMask) == kEscape) {
    r.type = lead >> 4;
    if (!IsRecordType(r.type) || avail < kEscapeBytes) return -EINVAL;
    memcpy(reinterpret_cast<uint8_t*>(&r) + 2, in + 1, sizeof(r) - 2);
    NormalizeRecord(&r);
    Advance(r, st);
    *out = r;
    return static_cast<int>(kEscapeBytes);
  }

  if ((lead & kTypeMask) == kShortBranch) {
    In i{in + 1, in + avail};
    r.type = PFM_REC_BRANCH;
    uint64_t delta = st->time_delta;
    switch (lead & (kTimeSameBit | kTimeAdjBit)) {
      case kTimeSameBit: break;
      case kTimeSameBit | kTimeAdjBit: delta += 1; break;
      case kTimeAdjBit: delta -= 1; break;
      default: delta += UnZigZag(i.Varint()); break;
    }
    r.time = st->time + delta;
    r.cpu = st->cpu;
    r.pid = st->pid;
    r.tid = st->tid;
    const bool flip = (lead & kPredFlipBit) != 0;
    r.misc = st->branch_misc ^ (flip ? PFM_MISC_BRANCH_PREDICTED : 0u);
    r.u.branch.from = st->branch_to + UnZigZag(i.Varint());
    r.u.branch.to = (lead & kToCachedBit)
                        ? st->to_cache[ToSlot(r.u.branch.from)]
                        : r.u.branch.from + UnZigZag(i.Varint());
    r.u.branch.flags =
        st->branch_flags ^ (flip ? uint64_t{PFM_BTS_RAW_PREDICTED} : 0);
    if (!i.ok) return -EINVAL;
    Advance(r, st);
    *out = r;
    return static_cast<int>(i.p - in);
  }

  r.type = lead & kTypeMask;
  if (!IsRecordType(r.type)) return -EINVAL;
  In i{in + 1, in + avail};
  r.time = st->time + UnZigZag(i.Varint());
  r.cpu = (lead & kCpuBit) ? i.Varint16() : st->cpu;
  r.pid = (lead & kPidBit) ? i.Varint32() : st->pid;
  r.tid = (lead & kTidBit) ? i.Varint32() : st->tid;
  const bool branch = r.type == PFM_REC_BRANCH;
  if (lead & kMiscBit) {
    r.misc = i.Varint32();
  } else {
    r.misc = branch ? st->branch_misc : 0;
  }
  switch (r.type) {
    case PFM_REC_BRANCH:
      r.u.branch.from = st->branch_to + UnZigZag(i.Varint());
      r.u.branch.to = r.u.branch.from + UnZigZag(i.Varint());
      r.u.branch.flags = (lead & kMiscBit) ? i.Varint() : st->branch_flags;
      break;
    case PFM_REC_PEBS:
      r.u.pebs.ip = i.Varint();
      r.u.pebs.addr = i.Varint();
      r.u.pebs.latency = i.Varint();
      r.u.pebs.data_src = i.Varint();
      r.u.pebs.event = i.Varint32();
      r.u.pebs.counter = i.Varint32();
      break;
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN:
      r.u.sw.other_pid = i.Varint32();
      r.u.sw.other_tid = i.Varint32();
      break;
    case PFM_REC_LOST:
    case PFM_REC_THROTTLE:
      r.u.lost.count = i.Varint();
      break;
    case PFM_REC_COUNTER:
      r.u.counter.value = i.Varint();
      r.u.counter.time_enabled = i.Varint();
      r.u.counter.time_running = i.Varint();
      r.u.counter.request = i.Varint32();
      break;
    case PFM_REC_RESIZED:
      r.u.resized.old_bytes = i.Varint();
      r.u.resized.new_bytes = i.Varint();
      break;
    case PFM_REC_EXIT:
      r.u.exit.status = static_cast<int64_t>(UnZigZag(i.Varint()));
      break;
    case PFM_REC_SCHEDULE:
      r.u.sched.request = i.Varint32();
      r.u.sched.slot = i.Varint32();
      break;
  }
  if (!i.ok) return -EINVAL;
  Advance(r, st);
  *out = r;
  return static_cast<int>(i.p - in);
}

}  // namespace pfm
