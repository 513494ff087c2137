#include "kernel/uapi/compact_codec.h"

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstddef>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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
static_assert(PFM_REC_TYPE_MAX <= kResetMarker &&
                  kResetMarker != kShortBranch && kResetMarker != kEscape,
              "the reset marker's nibble is no record type or form");
static_assert(kMaxCompactUnitBytes <= PFM_RECORD_FIXED_SIZE,
              "a record and its marker fit the fixed size (history sizing)");

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
    case PFM_REC_GAP: return 16;
    default: return 0;  // PFM_REC_EXEC: no fields
  }
}

uint64_t UnZigZag(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the word-at-a-time varint code assumes little-endian words");

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

// Writes `v` as a varint of `n` = VarintBytes(v) bytes at p by storing a
// whole 8-byte word (p must have 8 writable bytes; those past the varint are
// scribbled on): no loop, and for values below 2^21 (every branch delta
// inside 1 MiB, i.e. nearly all) no data-dependent branch either.
inline uint8_t* PutVarintWord(uint8_t* p, uint64_t v, size_t n) {
  uint64_t w;
  if (__builtin_expect(v < (uint64_t{1} << 21), 1)) {
    w = (v & 0x7full) | ((v << 1) & 0x7f00ull) | ((v << 2) & 0x7f0000ull);
  } else if (n <= 8) {
    // Spread the 7-bit groups one per byte.
    w = (v & 0x7full) | ((v << 1) & 0x7f00ull) | ((v << 2) & 0x7f0000ull) |
        ((v << 3) & 0x7f000000ull) | ((v << 4) & 0x7f00000000ull) |
        ((v << 5) & 0x7f0000000000ull) | ((v << 6) & 0x7f000000000000ull) |
        ((v << 7) & 0x7f00000000000000ull);
  } else {
    Out o{p};
    o.Varint(v);
    return o.p;
  }
  // The continuation bit on every byte but the last.
  w |= 0x8080808080808080ull & ((uint64_t{1} << (8 * (n - 1))) - 1);
  memcpy(p, &w, sizeof(w));
  return p + n;
}

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
    case PFM_REC_GAP:
      o.Varint(r.u.gap.from);
      o.Varint(r.u.gap.to);
      break;
  }
  const size_t n = static_cast<size_t>(o.p - buf);
  assert(n <= kMaxDeltaBytes);
  return n;
}

// The escape form: lead byte, then the normalized fixed record minus its
// 2-byte type.
size_t EncodeEscape(const pfm_record& r, uint8_t* out) {
  pfm_record copy = r;
  NormalizeRecord(&copy);
  out[0] = static_cast<uint8_t>(r.type << 4 | kEscape);
  memcpy(out + 1, reinterpret_cast<const uint8_t*>(&copy) + 2,
         sizeof(copy) - 2);
  return kEscapeBytes;
}

// A branch with the previous record's cpu/pid/tid and the previous branch's
// misc/flags, or those with the predicted bit flipped: the records a BTS
// stream is made of. Writes the short form when it is shorter than the long
// one (the format's rule; a tie goes to the long form) and returns its size,
// or returns 0 for the general path. EncodeRun has this logic inlined in
// its loop for the common case (time predicted); this is the whole rule.
inline size_t EncodeBranchFast(const pfm_record& r, const CodecState& st,
                               uint8_t* out) {
  if (r.type != PFM_REC_BRANCH || r.cpu != st.cpu || r.pid != st.pid ||
      r.tid != st.tid)
    return 0;
  const uint32_t misc_x = r.misc ^ st.branch_misc;
  const uint64_t flags_x = r.u.branch.flags ^ st.branch_flags;
  const bool flip = misc_x == PFM_MISC_BRANCH_PREDICTED &&
                    flags_x == PFM_BTS_RAW_PREDICTED;
  if ((misc_x | flags_x) != 0 && !flip) return 0;
  const uint64_t from = r.u.branch.from, to = r.u.branch.to;
  const uint64_t delta = r.time - st.time;
  const uint64_t dd = delta - st.time_delta;
  const uint64_t from_z = ZigZag(from - st.branch_to);
  const uint64_t to_z = ZigZag(to - from);
  const size_t from_n = VarintBytes(from_z);
  const size_t to_n = VarintBytes(to_z);
  const bool hit = st.to_cache[ToSlot(from)] == to;
  uint8_t lead = static_cast<uint8_t>(kShortBranch | (flip ? kPredFlipBit : 0) |
                                      (hit ? kToCachedBit : 0));
  uint8_t* p = out + 1;
  size_t short_n = 1 + from_n + (hit ? 0 : to_n);
  // dd in {-1, 0, 1}: lead bits 4/6 say which (see the header). Then the
  // short form is always shorter: the long one spends a byte or more on
  // zz(delta) and as much on the rest.
  static constexpr uint8_t kTimeBits[3] = {kTimeAdjBit, kTimeSameBit,
                                           kTimeSameBit | kTimeAdjBit};
  const uint64_t dd1 = dd + 1;
  if (__builtin_expect(dd1 < 3, 1)) {
    lead |= kTimeBits[dd1];
  } else {
    const uint64_t dd_z = ZigZag(dd);
    const size_t dd_n = VarintBytes(dd_z);
    short_n += dd_n;
    const size_t long_n =
        1 + VarintBytes(ZigZag(delta)) +
        (flip ? VarintBytes(r.misc) + VarintBytes(r.u.branch.flags) : 0) +
        from_n + to_n;
    if (short_n >= long_n) return 0;
    p = PutVarintWord(p, dd_z, dd_n);
  }
  out[0] = lead;
  p = PutVarintWord(p, from_z, from_n);
  if (!hit) PutVarintWord(p, to_z, to_n);
  return short_n;
}

}  // namespace

bool operator==(const CodecState& a, const CodecState& b) {
  if (a.time != b.time || a.time_delta != b.time_delta ||
      a.branch_to != b.branch_to || a.branch_flags != b.branch_flags ||
      a.branch_misc != b.branch_misc || a.pid != b.pid || a.tid != b.tid ||
      a.cpu != b.cpu)
    return false;
  return memcmp(a.to_cache, b.to_cache, sizeof(a.to_cache)) == 0;
}

void AdvanceState(const pfm_record& r, CodecState* st) {
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

namespace {

// EncodeInto without the fast path.
size_t EncodeGeneral(const pfm_record& r, const CodecState& st, uint8_t* out) {
  uint8_t buf[kMaxDeltaBytes];
  const size_t n = EncodeLong(r, st, buf);
  if (n > kMaxCompactRecordBytes) return EncodeEscape(r, out);
  memcpy(out, buf, n);
  return n;
}

}  // namespace

size_t EncodeInto(const pfm_record& r, const CodecState& st, uint8_t* out) {
  assert(IsRecordType(r.type));
  if (const size_t n = EncodeBranchFast(r, st, out); n != 0) return n;
  return EncodeGeneral(r, st, out);
}

namespace {

// pext is one fast instruction on Intel since Haswell and on AMD since Zen 3
// (family 0x19); earlier AMD parts that have BMI2 run it in microcode, far
// slower than the portable code.
#if defined(__x86_64__)
// LZCNT (CPUID 0x80000001, ECX bit 5: "ABM" on AMD), which the BMI2 encoder
// uses too. Every CPU with a fast pext has it; checked all the same.
bool HasLzcnt() {
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx >> 5 & 1) != 0;
}

bool FastPext() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("bmi") || !__builtin_cpu_supports("bmi2") ||
      !HasLzcnt())
    return false;
  if (__builtin_cpu_is("intel")) return true;
  if (!__builtin_cpu_is("amd")) return false;
  return !__builtin_cpu_is("amdfam15h") && !__builtin_cpu_is("amdfam17h");
}
#endif

CodecFastPath PickFastPath() {
#if defined(__x86_64__)
  if (FastPext()) return CodecFastPath::kBmi2;
#endif
  return CodecFastPath::kPortable;
}

// The fast paths EncodeRun and DecodeRecords take: set once from the CPU,
// changed only by SetCodecFastPath.
std::atomic<CodecFastPath>& FastPathChoice() {
  static std::atomic<CodecFastPath> choice{PickFastPath()};
  return choice;
}

// Varint length and continuation bits of a value < 2^21 by its bit length
// (floor(log2(v | 1))): table lookups instead of arithmetic on the hot path.
constexpr uint8_t kVarint3Bytes[21] = {1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                       2, 2, 2, 3, 3, 3, 3, 3, 3, 3};
constexpr uint32_t kVarint3Cont[4] = {0, 0, 0x80, 0x8080};

// The same by the count of leading zeros (clz(v | 1), 43..63 for v < 2^21),
// for the BMI2 path (whose CPUs have lzcnt): a short branch's word with
// both varints of at most 3 bytes is one pdep of `from` and `to` side by
// side (`from` in its 7 * nf low bits, `to` above) into the value bits of
// the word's bytes 1..nf and nf+1..nf+nt, or'ed with the continuation bits;
// mask, continuation bits and size by the pair (nf, nt), nt 0 when `to` is
// predicted; the continuation bits carry the lead's nibble and `to`-
// predicted bit too. One pdep and three loads by the pair instead of two
// pdeps and five loads by each varint's clz (callgrind, the fused drain's
// loop on the fanout benchmark's stream: 90 instructions a record before,
// 82 with the pair table, 73 with the lead's bits in it and the time bits
// below).
struct ShortWordTables {
  uint8_t bytes[64] = {};    // by clz: the varint's length, 1..3
  uint8_t bits[64] = {};     // by clz: its value bits, 7 * that
  uint64_t mask[16] = {};    // by nf * 4 + nt: the varints' value bits
  uint64_t cont[16] = {};    // their continuation bits, and the lead's
                             // nibble and `to`-predicted bit (nt 0)
  uint8_t size[16] = {};     // the record's bytes, 1 + nf + nt
  // The lead's time bits by the time delta's change + 1 (-1, same, +1; see
  // the header); here so that the fused loop's load shares the tables' base.
  uint8_t time_bits[4] = {kTimeAdjBit, kTimeSameBit, kTimeSameBit | kTimeAdjBit, 0};
  constexpr ShortWordTables() {
    for (size_t c = 43; c < 64; ++c) {
      bytes[c] = kVarint3Bytes[63 - c];
      bits[c] = static_cast<uint8_t>(7 * bytes[c]);
    }
    for (size_t nf = 1; nf <= 3; ++nf) {
      for (size_t nt = 0; nt <= 3; ++nt) {
        const size_t k = nf * 4 + nt;
        for (size_t b = 1; b <= nf + nt; ++b) {
          mask[k] |= uint64_t{0x7f} << (8 * b);
          // Every byte of a varint but its last continues.
          if (b != nf && b != nf + nt) cont[k] |= uint64_t{0x80} << (8 * b);
        }
        cont[k] |= kShortBranch | (nt == 0 ? kToCachedBit : 0);
        size[k] = static_cast<uint8_t>(1 + nf + nt);
      }
    }
  }
};
constexpr ShortWordTables kShortWord;

inline size_t Log2(uint64_t v) {
  return static_cast<size_t>(63 - __builtin_clzll(v | 1));
}

// A varint of at most 3 bytes (v < 2^21) as the low bytes of a word, with
// its continuation bits; `n` is VarintBytes(v).
inline uint64_t Varint3Word(uint64_t v, size_t n) {
  return (v & 0x7full) | ((v << 1) & 0x7f00ull) | ((v << 2) & 0x7f0000ull) |
         kVarint3Cont[n];
}

// The scalar state a short-branch loop (EncodeRun's, DecodeRecords') keeps
// in registers (the previous branch's first word stands for type, cpu and
// misc), loaded from and stored back to the codec state around the loop.
struct RunRegs {
  uint64_t time, time_delta, branch_to, branch_flags, head, ids;
  explicit RunRegs(const CodecState& s)
      : time(s.time),
        time_delta(s.time_delta),
        branch_to(s.branch_to),
        branch_flags(s.branch_flags),
        head(PFM_REC_BRANCH | uint64_t{s.cpu} << 16 |
             uint64_t{s.branch_misc} << 32),
        ids(s.pid | uint64_t{s.tid} << 32) {}
  void StoreTo(CodecState* s) const {
    s->time = time;
    s->time_delta = time_delta;
    s->branch_to = branch_to;
    s->branch_flags = branch_flags;
    s->branch_misc = static_cast<uint32_t>(head >> 32);
  }
};

// The lead byte and both varints of a short branch whose `from` and `to`
// deltas are below 2^21, as one word, and its length: `to` is left out when
// `miss` is 0 (predicted). `bits` are the lead's time and flip bits; its
// nibble and `to`-predicted bit follow from the form and `miss` (on the
// BMI2 path from the table, a few instructions fewer). On the BMI2 path by
// lzcnt, tables and a pdep (inline asm: the builtin would need the target
// attribute on every function it is inlined through), else by Varint3Word.
template <bool kBmi2>
inline uint64_t ShortBranchWord(uint64_t bits, uint64_t from_z, uint64_t to_z,
                                uint64_t miss, size_t* size) {
#if defined(__x86_64__)
  if constexpr (kBmi2) {
    const ShortWordTables& t = kShortWord;
    const size_t fc = static_cast<size_t>(__builtin_clzll(from_z | 1));
    const size_t tc = static_cast<size_t>(__builtin_clzll(to_z | 1));
    const size_t k = size_t{t.bytes[fc]} * 4 + (t.bytes[tc] & miss);
    const uint64_t v = from_z | to_z << t.bits[fc];
    uint64_t w;
    asm("pdepq %2, %1, %0" : "=r"(w) : "r"(v), "rm"(t.mask[k]));
    *size = t.size[k];
    return bits | w | t.cont[k];
  }
#endif
  const size_t from_n = kVarint3Bytes[Log2(from_z)];
  const size_t to_n = kVarint3Bytes[Log2(to_z)];
  *size = 1 + from_n + (to_n & miss);
  const uint64_t lead = bits | kShortBranch | (~miss & kToCachedBit);
  return lead | Varint3Word(from_z, from_n) << 8 |
         (Varint3Word(to_z, to_n) & miss) << (8 * (1 + from_n));
}

// A short branch whose `from` or `to` varint is over 3 bytes (a far jump,
// rare): the lead, then the varints. Returns its size, or 0 (nothing
// written) when it does not fit before `pend`. EncodeRunOn's and
// EncodeBtsRunOn's loops share it (the rest of their short-branch step is
// written out in each: a shared helper for it cost the fused loop 3% more
// instructions, callgrind).
inline size_t PutFarShortBranch(uint8_t* p, const uint8_t* pend, uint8_t lead,
                                uint64_t from_z, uint64_t to_z, bool hit) {
  const size_t from_n = VarintBytes(from_z);
  const size_t to_n = hit ? 0 : VarintBytes(to_z);
  const size_t size = 1 + from_n + to_n;
  if (size > static_cast<size_t>(pend - p)) return 0;
  *p = lead;
  uint8_t* o = PutVarintWord(p + 1, from_z, from_n);
  if (!hit) PutVarintWord(o, to_z, to_n);
  return size;
}

// The batch encoder, on either fast path. Always inlined into its two
// entry points below, so that the BMI2 one is compiled for BMI1, BMI2 and
// lzcnt throughout (shlx, lzcnt; with the tables by clz and the loads from
// the previous record, 93 instructions a record instead of 110).
template <bool kBmi2>
__attribute__((always_inline)) inline size_t EncodeRunOn(
    const pfm_record* recs, size_t n, CodecState* st, uint8_t* out,
    size_t limit, size_t* used) {
  static_assert(offsetof(pfm_record, pid) + 4 == offsetof(pfm_record, tid),
                "pid and tid are one word");
  static_assert(offsetof(pfm_record, misc) == 4, "type, cpu, misc: one word");
  // A local copy: the byte stores through `out` may alias anything reached
  // through a pointer, so the state would be reloaded after each of them.
  CodecState s = *st;
  const pfm_record* r = recs;
  const pfm_record* const rend = recs + n;
  uint8_t* p = out;
  uint8_t* const pend = out + limit;  // where the run's bytes must end
  static constexpr uint8_t kTimeBits[3] = {kTimeAdjBit, kTimeSameBit,
                                           kTimeSameBit | kTimeAdjBit};
  while (r != rend) {
    // The loop a BTS stream lives in: branches whose cpu/pid/tid repeat,
    // misc/flags repeat or flip the predicted bit and whose time delta is
    // the previous one +-1 (interpolated stamps): the short form with the
    // time predicted, which is then always the shorter form. Anything else
    // leaves the loop for the general path below, one record, and comes
    // back.
    // Each record is compared with the previous one: first the state
    // dressed as a branch (its first word stands for type, cpu and misc),
    // then the record before (a branch the loop just encoded, so the state
    // is its, but for time_delta and the predictor). Loads from L1 instead
    // of copies of the state in registers, which the loop runs out of.
    pfm_record prev;
    {
      const RunRegs g(s);
      memcpy(&prev, &g.head, 8);
      prev.time = g.time;
      memcpy(&prev.pid, &g.ids, 8);
      prev.u.branch.to = g.branch_to;
      prev.u.branch.flags = g.branch_flags;
    }
    const pfm_record* q = &prev;
    uint64_t time_delta = s.time_delta;
    bool full = false;
    // As many records as surely fit in the short form with varints of at
    // most 3 bytes (7 bytes each): those need no check of the room left.
    const size_t fit = static_cast<size_t>(pend - p) / 7;
    const pfm_record* rstop =
        static_cast<size_t>(rend - r) < fit ? rend : r + fit;
    for (; r != rstop; q = r, ++r) {
      uint64_t rhead, qhead, rids, qids;
      memcpy(&rhead, r, sizeof(rhead));
      memcpy(&qhead, q, sizeof(qhead));
      memcpy(&rids, &r->pid, sizeof(rids));
      memcpy(&qids, &q->pid, sizeof(qids));
      const uint64_t flags = r->u.branch.flags;
      const uint64_t hx = rhead ^ qhead, fx = flags ^ q->u.branch.flags;
      // Repeated: hx == fx == 0. Flipped: hx is the misc predicted bit (bit
      // 32 of the word) and fx the raw predicted bit (bit 4), so then
      // fx << 28 == hx. Checked bitwise, without a branch on the flip,
      // which is random.
      static_assert(PFM_MISC_BRANCH_PREDICTED == 1 &&
                        PFM_BTS_RAW_PREDICTED == uint64_t{1} << 4,
                    "the flip test below");
      const uint64_t delta = r->time - q->time;
      const uint64_t dd1 = delta - time_delta + 1;  // 0, 1, 2: -1, 0, +1
      const uint64_t bad = (rids ^ qids) | (hx ^ (fx << 28)) |
                           (fx & ~uint64_t{PFM_BTS_RAW_PREDICTED});
      if (bad != 0 || dd1 >= 3) break;
      const uint64_t from = r->u.branch.from, to = r->u.branch.to;
      const uint64_t from_z = ZigZag(from - q->u.branch.to);
      const uint64_t to_z = ZigZag(to - from);
      const size_t slot = ToSlot(from);
      const bool hit = s.to_cache[slot] == to;
      static_assert(kPredFlipBit == PFM_BTS_RAW_PREDICTED << 3, "fx << 3");
      const uint64_t bits = (fx << 3) | kTimeBits[dd1];
      size_t size;
      if (__builtin_expect((from_z | to_z) < (uint64_t{1} << 21), 1)) {
        // Lead and both varints in one store. Whether `to` was predicted
        // is close to a coin toss in real code: masks, not a branch.
        const uint64_t miss = uint64_t{hit} - 1;  // all ones when not hit
        const uint64_t w =
            ShortBranchWord<kBmi2>(bits, from_z, to_z, miss, &size);
        memcpy(p, &w, sizeof(w));
      } else {
        const uint8_t lead = static_cast<uint8_t>(
            kShortBranch | bits | (hit ? kToCachedBit : 0));
        size = PutFarShortBranch(p, pend, lead, from_z, to_z, hit);
        if (size == 0) {
          full = true;
          break;
        }
        // Longer than 7 bytes: fewer of the rest surely fit.
        const size_t still = (static_cast<size_t>(pend - p) - size) / 7;
        if (static_cast<size_t>(rstop - r) - 1 > still) rstop = r + 1 + still;
      }
      p += size;
      time_delta = delta;
      s.to_cache[slot] = to;
    }
    // The state is the last record encoded here (prev: unchanged).
    s.time = q->time;
    s.time_delta = time_delta;
    s.branch_to = q->u.branch.to;
    s.branch_flags = q->u.branch.flags;
    s.branch_misc = q->misc;
    if (r == rend || full) break;
    // Any other record, or any record once the room left is under 7 bytes:
    // the general encoder (the same bytes), with the room checked.
    const size_t size = EncodeInto(*r, s, p);
    if (size > static_cast<size_t>(pend - p)) break;
    AdvanceState(*r, &s);
    p += size;
    ++r;
  }
  *st = s;
  *used = static_cast<size_t>(p - out);
  return static_cast<size_t>(r - recs);
}

#if defined(__x86_64__)
__attribute__((target("bmi,bmi2,lzcnt"))) size_t EncodeRunBmi2(
    const pfm_record* recs, size_t n, CodecState* st, uint8_t* out,
    size_t limit, size_t* used) {
  return EncodeRunOn<true>(recs, n, st, out, limit, used);
}
#endif

// EncodeRunOn fused with the drain's translation (EncodeBtsRun): the same
// bytes for the records TranslateBts would make. The first record, and any
// that leaves the short loop, is translated and goes through the general
// encoder, one record. In the loop each record's predecessor is the raw
// record before it, a user branch of the same cpu, pid and tid (the
// origin's, which the general encoder put in the state), so of what
// EncodeRunOn compares only the flags, the time and `from` (user or kernel)
// are left to check; misc follows from the flags. A record that is not a
// user branch stops the run.
template <bool kBmi2>
__attribute__((always_inline)) inline size_t EncodeBtsRunOn(
    const pfm_bts_raw* raw, size_t n, const BtsOrigin& origin,
    BtsClock* clock, CodecState* st, uint8_t* out, size_t limit,
    size_t* used) {
  CodecState s = *st;
  BtsClock c = *clock;
  const pfm_bts_raw* r = raw;
  const pfm_bts_raw* const rend = raw + n;
  uint8_t* p = out;
  uint8_t* const pend = out + limit;
  assert(n == 0 || c.n > 0);
  static_assert(PFM_X86_USER_ADDR_END == uint64_t{1} << 56,
                "a user `from` has its top byte 0");
  while (r != rend) {
    // The general encoder, one record.
    {
      if (!IsUserBranch(*r)) break;
      pfm_record rec;
      TranslateBts(*r, c.Peek(), origin, &rec);
      const size_t size = EncodeInto(rec, s, p);
      if (size > static_cast<size_t>(pend - p)) break;
      AdvanceState(rec, &s);
      p += size;
      c.Advance();
      ++r;
    }
    // The short loop, from the record after it. Record i's time delta is
    // the clock's step_q plus the carry of its remainder when it advanced to
    // i: the loop keeps only that carry (`carry`), the remainder and
    // `bias` = step_q - previous delta + 1, so that the lead's time bits
    // come from carry + bias (0, 1, 2: the delta is the previous -1, same,
    // +1). The first record's bias may be anything (the general record's
    // delta was not predicted): checked, like every record's. Time itself is
    // rebuilt from the counts once the loop ends.
    const uint64_t step_r = c.step_r, nrec = c.n;
    const uint64_t acc_r0 = c.acc_r;
    uint64_t acc_r = acc_r0;
    uint64_t carry = c.Peek() - s.time - c.step_q;  // 0 or 1
    uint64_t bias = c.step_q - s.time_delta + 1;
    bool full = false;
    const pfm_bts_raw* const first = r;
    const size_t fit = static_cast<size_t>(pend - p) / 7;
    const pfm_bts_raw* rstop =
        static_cast<size_t>(rend - r) < fit ? rend : r + fit;
    for (; r != rstop; ++r) {
      const pfm_bts_raw* const q = r - 1;
      const uint64_t flags = r->flags, from = r->from, to = r->to;
      const uint64_t fx = flags ^ q->flags;
      const uint64_t dd1 = carry + bias;  // 0, 1, 2: -1, 0, +1
      // Other flag bits than the predicted one changed (a gap marker's bit
      // among them), or a kernel `from`: the general encoder.
      const uint64_t bad =
          (fx & ~uint64_t{PFM_BTS_RAW_PREDICTED}) | (from >> 56);
      if (bad != 0 || dd1 >= 3) break;
      const uint64_t from_z = ZigZag(from - q->to);
      const uint64_t to_z = ZigZag(to - from);
      const size_t slot = ToSlot(from);
      const bool hit = s.to_cache[slot] == to;
      static_assert(kPredFlipBit == PFM_BTS_RAW_PREDICTED << 3, "fx << 3");
      const uint64_t bits = (fx << 3) | kShortWord.time_bits[dd1];
      size_t size;
      if (__builtin_expect((from_z | to_z) < (uint64_t{1} << 21), 1)) {
        // Lead and both varints in one store. Whether `to` was predicted
        // is close to a coin toss in real code: masks, not a branch.
        const uint64_t miss = uint64_t{hit} - 1;  // all ones when not hit
        const uint64_t w =
            ShortBranchWord<kBmi2>(bits, from_z, to_z, miss, &size);
        memcpy(p, &w, sizeof(w));
      } else {
        const uint8_t lead = static_cast<uint8_t>(
            kShortBranch | bits | (hit ? kToCachedBit : 0));
        size = PutFarShortBranch(p, pend, lead, from_z, to_z, hit);
        if (size == 0) {
          full = true;
          break;
        }
        // Longer than 7 bytes: fewer of the rest surely fit.
        const size_t still = (static_cast<size_t>(pend - p) - size) / 7;
        if (static_cast<size_t>(rstop - r) - 1 > still) rstop = r + 1 + still;
      }
      p += size;
      s.to_cache[slot] = to;
      bias = 1 - carry;
      // The clock to the next record (BtsClock::Advance, the remainder).
      // (One subtraction gives both the carry and the remainder.)
      acc_r += step_r;
      uint64_t wrapped;
      const bool below = __builtin_sub_overflow(acc_r, nrec, &wrapped);
      acc_r = below ? acc_r : wrapped;
      carry = !below;
    }
    if (r != first) {
      // The clock at r: k advances, of which `carries` carried.
      const uint64_t k = static_cast<uint64_t>(r - first);
      // (acc_r0 + k * step_r = carries * nrec + acc_r; in 128 bits, as
      // k * step_r may pass 2^64 for a clock of 2^32 records or more.)
      const uint64_t carries = static_cast<uint64_t>(
          (static_cast<unsigned __int128>(k) * step_r + acc_r0 - acc_r) / nrec);
      c.acc_q += k * c.step_q + carries;
      c.acc_r = acc_r;
      // The state is the last record encoded, r - 1: its delta was
      // step_q + (1 - bias), and r's is step_q + carry.
      const pfm_bts_raw& last = r[-1];
      s.time_delta = c.step_q + (1 - bias);
      s.time = c.Peek() - (c.step_q + carry);
      s.branch_to = last.to;
      s.branch_flags = last.flags;
      s.branch_misc =
          (last.flags & PFM_BTS_RAW_PREDICTED) ? PFM_MISC_BRANCH_PREDICTED : 0u;
    }
    if (r == rend || full) break;
  }
  *st = s;
  *clock = c;
  *used = static_cast<size_t>(p - out);
  return static_cast<size_t>(r - raw);
}

#if defined(__x86_64__)
__attribute__((target("bmi,bmi2,lzcnt"))) size_t EncodeBtsRunBmi2(
    const pfm_bts_raw* raw, size_t n, const BtsOrigin& origin,
    BtsClock* clock, CodecState* st, uint8_t* out, size_t limit,
    size_t* used) {
  return EncodeBtsRunOn<true>(raw, n, origin, clock, st, out, limit, used);
}
#endif

}  // namespace

size_t EncodeRun(const pfm_record* recs, size_t n, CodecState* st,
                 uint8_t* out, size_t limit, size_t* used) {
#if defined(__x86_64__)
  if (CurrentCodecFastPath() == CodecFastPath::kBmi2)
    return EncodeRunBmi2(recs, n, st, out, limit, used);
#endif
  return EncodeRunOn<false>(recs, n, st, out, limit, used);
}

size_t EncodeBtsRun(const pfm_bts_raw* raw, size_t n, const BtsOrigin& origin,
                    BtsClock* clock, CodecState* st, uint8_t* out,
                    size_t limit, size_t* used) {
#if defined(__x86_64__)
  if (CurrentCodecFastPath() == CodecFastPath::kBmi2)
    return EncodeBtsRunBmi2(raw, n, origin, clock, st, out, limit, used);
#endif
  return EncodeBtsRunOn<false>(raw, n, origin, clock, st, out, limit, used);
}

void NormalizeRecord(pfm_record* r) {
  const size_t used = UnionBytes(r->type);
  memset(r->u.raw + used, 0, sizeof(r->u.raw) - used);
}

size_t EncodedSize(const pfm_record& r, const CodecState& st) {
  if (!IsRecordType(r.type)) return 0;
  uint8_t buf[kMaxCompactRecordBytes + 8];
  return EncodeInto(r, st, buf);
}

size_t EncodeRecord(const pfm_record& r, CodecState* st, uint8_t* out) {
  if (!IsRecordType(r.type)) return 0;
  // EncodeInto may write 8 bytes past the record; `out` promises 63.
  uint8_t buf[kMaxCompactRecordBytes + 8];
  const size_t n = EncodeInto(r, *st, buf);
  memcpy(out, buf, n);
  AdvanceState(r, st);
  return n;
}

namespace {

// One record without a marker: DecodeRecord's contract, except that a lead
// byte kResetMarker is malformed here.
int DecodeOne(const uint8_t* in, size_t avail, CodecState* st,
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
    AdvanceState(r, st);
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
    AdvanceState(r, st);
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
    case PFM_REC_GAP:
      r.u.gap.from = i.Varint();
      r.u.gap.to = i.Varint();
      break;
  }
  if (!i.ok) return -EINVAL;
  AdvanceState(r, st);
  *out = r;
  return static_cast<int>(i.p - in);
}


}  // namespace

int DecodeRecord(const uint8_t* in, size_t avail, CodecState* st,
                 pfm_record* out) {
  // A writer never makes a record longer than the escape form (a delta form
  // of up to 79 bytes would decode, but no encoder emits one): decoding sees
  // at most kMaxCompactRecordBytes, so a longer one is refused as cut.
  const auto cap = [](size_t n) {
    return n < kMaxCompactRecordBytes ? n : kMaxCompactRecordBytes;
  };
  if (avail == 0 || in[0] != kResetMarker)
    return DecodeOne(in, cap(avail), st, out);
  // A marker: the record after it is decoded from a reset state; a PAD,
  // another marker or nothing after it is malformed.
  if (avail < 2 || in[1] == PFM_REC_PAD) return -EINVAL;
  CodecState fresh;
  const int n = DecodeOne(in + 1, cap(avail - 1), &fresh, out);
  if (n <= 0) return -EINVAL;
  *st = fresh;
  return n + 1;
}

namespace {

// The decoder's fast path: a run of short branches with predicted times
// whose `from` and `to` varints take at most 3 bytes each (a BTS stream),
// i.e. records of at most 1 + 3 + 3 bytes that one 8-byte load from the lead
// covers. Decodes up to `n` such records from *pp into o[0, n), stopping
// before the first record that is anything else; the caller guarantees
// 7 * n + 1 readable bytes from *pp (the last load stays inside the input).
// Advances *pp and *s past what it decoded and returns the records decoded.
// Two implementations, the same bytes in and records out (unit tests and
// fuzz/compact_batch_fuzz.cc hold them to it): portable x86-64 code, and one
// that gathers the varints with BMI2's pext, chosen once by the CPU
// (ShortRun below).
using ShortRunFn = size_t (*)(const uint8_t** pp, pfm_record* o, size_t n,
                              CodecState* s);

// Stores one decoded branch, every byte once, a word at a time, straight
// into place (assembling it on the stack first stalls on store forwarding).
inline void StoreBranch(pfm_record* o, uint64_t head, uint64_t time,
                        uint64_t ids, uint64_t from, uint64_t to,
                        uint64_t flags) {
  uint8_t* const q = reinterpret_cast<uint8_t*>(o);
  const uint64_t zero = 0;
  memcpy(q, &head, 8);
  memcpy(q + 8, &time, 8);
  memcpy(q + 16, &ids, 8);
  memcpy(q + 24, &from, 8);
  memcpy(q + 32, &to, 8);
  memcpy(q + 40, &flags, 8);
  memcpy(q + 48, &zero, 8);
  memcpy(q + 56, &zero, 8);
}

// The portable run. The record's length comes straight from the stop bits of
// the word (the first stop ends `from`, the second `to` when not
// predicted), without waiting for the values or a table: the next record's
// start is the loop's critical path.
size_t ShortRunPortable(const uint8_t** pp, pfm_record* o, size_t n,
                        CodecState* st) {
  // Per lead byte: 0 unless a short branch with a predicted time, else
  // bit 2 set and bits 0-1 the time delta's change + 1: lead bits 4 (same)
  // and 6 (adjacent) give 0 for bit 4 only, +1 for both, -1 for bit 6 only
  // (see the header).
  struct LeadTable {
    uint8_t v[256];
    constexpr LeadTable() : v() {
      for (int b = 0; b < 256; ++b) {
        const bool same = (b & kTimeSameBit) != 0, adj = (b & kTimeAdjBit) != 0;
        if ((b & kTypeMask) != kShortBranch || (!same && !adj)) continue;
        const int step = same ? (adj ? 1 : 0) : -1;
        v[b] = static_cast<uint8_t>(4 | (step + 1));
      }
    }
  };
  static constexpr LeadTable kLead;
  // Masks of the value bits of a 1..3-byte varint after gathering.
  static constexpr uint32_t kValueMask[4] = {0, 0x7f, 0x3fff, 0x1fffff};
  // A local copy: the stores through `o` may alias anything reached through
  // a pointer, so the state would be reloaded after each of them.
  CodecState s = *st;
  const uint8_t* p = *pp;
  RunRegs g(s);
  uint64_t &time = g.time, &time_delta = g.time_delta, &branch_to = g.branch_to;
  uint64_t &branch_flags = g.branch_flags, &head = g.head;
  const uint64_t ids = g.ids;
  pfm_record* const o0 = o;
  pfm_record* const ostop = o + n;
#pragma GCC unroll 2
  while (o != ostop) {
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    const uint8_t info = kLead.v[static_cast<uint8_t>(w)];
    // Stop bits of bytes 1..6 (the last byte of each varint), and two
    // guard bits in byte 7 so that the second stop always exists.
    const uint64_t stops = (w & 0x0080808080808000ull) ^ 0xc080808080808000ull;
    // `to` follows: lead bit 5 clear (read from the word, not the table:
    // this is on the chain from one record's start to the next).
    static_assert(kToCachedBit == 1u << 5, "the shift below");
    const uint64_t nh = (~w >> 5) & 1;
    // The record's last byte: `from`'s stop when `to` was predicted, the
    // next stop otherwise (the lowest stop cleared).
    const unsigned last = static_cast<unsigned>(__builtin_ctzll(stops & (stops - nh))) >> 3;
    const unsigned end1 = static_cast<unsigned>(__builtin_ctzll(stops)) >> 3;
    // Both varints at most 3 bytes (the `to` length is 0 when predicted).
    if (info == 0 || (end1 | (last - end1)) > 3) break;
    p += last + 1;
    const uint64_t x = w >> 8;
    const uint64_t v1 = ((x & 0x7full) | ((x >> 1) & 0x3f80ull) |
                         ((x >> 2) & 0x1fc000ull)) &
                        kValueMask[end1];
    const uint64_t from = branch_to + UnZigZag(v1);
    const size_t slot = ToSlot(from);
    // Both, and a select (see ShortRunBmi2); when `to` was predicted its
    // varint's length is 0 and v2 is 0.
    const uint64_t x2 = w >> (8 * end1 + 8);
    const uint64_t v2 = ((x2 & 0x7full) | ((x2 >> 1) & 0x3f80ull) |
                         ((x2 >> 2) & 0x1fc000ull)) &
                        kValueMask[last - end1];
    const uint64_t cached = s.to_cache[slot];
    const uint64_t hit = nh - 1;  // all ones when predicted
    const uint64_t to = (cached & hit) | ((from + UnZigZag(v2)) & ~hit);
    const uint64_t flip = static_cast<uint8_t>(w) >> 7;  // kPredFlipBit
    head ^= (flip * uint64_t{PFM_MISC_BRANCH_PREDICTED}) << 32;
    branch_flags ^= flip * uint64_t{PFM_BTS_RAW_PREDICTED};
    time_delta += static_cast<uint64_t>(info & 3) - 1;
    time += time_delta;
    StoreBranch(o, head, time, ids, from, to, branch_flags);
    s.to_cache[slot] = to;
    branch_to = to;
    ++o;
  }
  g.StoreTo(&s);
  *st = s;
  *pp = p;
  return static_cast<size_t>(o - o0);
}

#if defined(__x86_64__)
// The BMI2 run: one pext gathers the bits that decide the record's shape
// (the lead's `to`-predicted bit and the continuation bits of bytes 1..6)
// into a 7-bit key; a table by that key gives the record's length and the
// masks of its two varints' value bits, and a pext by each mask gathers a
// value. A table by the lead byte gives whether it is a short branch with a
// predicted time, the time delta's step and the predicted-bit flips: table
// loads instead of arithmetic, so that about 30 operations decode a record
// (the portable run takes about 70).
struct Bmi2Tables {
  // By the pext key (bit 0: `to` predicted; bit j: byte j continues).
  uint64_t m1[128];   // value bits of `from`'s varint
  uint64_t m2[128];   // value bits of `to`'s varint (0 when predicted)
  uint8_t len[128];   // the record's bytes; 0: a varint is over 3 bytes
  // By the lead byte.
  uint8_t ok[256];    // 0xff for a short branch with a predicted time
  uint64_t step[256];     // added to the time delta (-1, 0 or +1)
  uint64_t head_x[256];   // misc's predicted bit flipped, in the head word
  uint64_t flags_x[256];  // the raw predicted bit flipped

  constexpr Bmi2Tables() : m1(), m2(), len(), ok(), step(), head_x(), flags_x() {
    for (int k = 0; k < 128; ++k) {
      const bool predicted = (k & 1) != 0;
      const auto cont = [k](int byte) { return ((k >> byte) & 1) != 0; };
      int e1 = 1;
      while (e1 <= 3 && cont(e1)) ++e1;
      if (e1 > 3) continue;
      int last = e1;
      if (!predicted) {
        last = e1 + 1;
        while (last <= e1 + 3 && cont(last)) ++last;
        if (last > e1 + 3) continue;
      }
      for (int b = 1; b <= e1; ++b) m1[k] |= uint64_t{0x7f} << (8 * b);
      for (int b = e1 + 1; b <= last && !predicted; ++b)
        m2[k] |= uint64_t{0x7f} << (8 * b);
      len[k] = static_cast<uint8_t>(last + 1);
    }
    for (int b = 0; b < 256; ++b) {
      const bool same = (b & kTimeSameBit) != 0, adj = (b & kTimeAdjBit) != 0;
      if ((b & kTypeMask) != kShortBranch || (!same && !adj)) continue;
      ok[b] = 0xff;
      step[b] = static_cast<uint64_t>(same ? (adj ? 1 : 0) : -1);
      if (b & kPredFlipBit) {
        head_x[b] = uint64_t{PFM_MISC_BRANCH_PREDICTED} << 32;
        flags_x[b] = PFM_BTS_RAW_PREDICTED;
      }
    }
  }
};
// The key's bits: the lead's `to`-predicted bit, then the continuation bit
// (bit 7) of bytes 1..6, in that order (pext keeps the order of the mask).
static_assert(kToCachedBit == 1u << 5, "the key's bit 0");
constexpr uint64_t kKeyMask = 0x0080808080808000ull | kToCachedBit;

__attribute__((target("bmi,bmi2"))) size_t ShortRunBmi2(
    const uint8_t** pp, pfm_record* o, size_t n, CodecState* st) {
  static constexpr Bmi2Tables kT;
  CodecState s = *st;
  const uint8_t* p = *pp;
  RunRegs g(s);
  uint64_t &time = g.time, &time_delta = g.time_delta, &branch_to = g.branch_to;
  uint64_t &branch_flags = g.branch_flags, &head = g.head;
  const uint64_t ids = g.ids;
  pfm_record* const o0 = o;
  pfm_record* const ostop = o + n;
  while (o != ostop) {
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    const size_t lead = p[0];
    const size_t key = __builtin_ia32_pext_di(w, kKeyMask);
    // The next record's start is the loop's critical path: the lead's
    // check is a predicted branch beside it, not a step on it.
    const size_t len = kT.len[key];
    if ((len & kT.ok[lead]) == 0) break;
    p += len;
    const uint64_t from =
        branch_to + UnZigZag(__builtin_ia32_pext_di(w, kT.m1[key]));
    const size_t slot = ToSlot(from);
    // Whether `to` was predicted is close to a coin toss in real traces
    // (55-62% on bench/compact's): both, and a select, not a branch (on
    // fanout's loop stream, 55% predicted: decode 0.65-0.73 x memcpy of the
    // fixed ring with the branch, 0.75-0.87 without; no change on its random
    // stream, where none is).
    const uint64_t cached = s.to_cache[slot];
    const uint64_t delta_to =
        from + UnZigZag(__builtin_ia32_pext_di(w, kT.m2[key]));
    const uint64_t hit = 0 - (w >> 5 & 1);  // kToCachedBit
    const uint64_t to = (cached & hit) | (delta_to & ~hit);
    head ^= kT.head_x[lead];
    branch_flags ^= kT.flags_x[lead];
    time_delta += kT.step[lead];
    time += time_delta;
    StoreBranch(o, head, time, ids, from, to, branch_flags);
    s.to_cache[slot] = to;
    branch_to = to;
    ++o;
  }
  g.StoreTo(&s);
  *st = s;
  *pp = p;
  return static_cast<size_t>(o - o0);
}
#endif

// Whether `lead` starts a record the short runs decode: a short branch
// whose time delta is the previous one, or one more or less.
inline bool IsRunLead(uint8_t lead) {
  return (lead & compact_lead::kTypeMask) == compact_lead::kShortBranch &&
         (lead & (compact_lead::kTimeSameBit | compact_lead::kTimeAdjBit)) != 0;
}

// DecodeRecords with a given fast path: the run as far as it goes, then
// records the checked way (see below), and again.
size_t DecodeRecordsWith(ShortRunFn run, const uint8_t* in, size_t avail,
                         CodecState* st, pfm_record* out, size_t max,
                         size_t* used, bool* malformed) {
  CodecState s = *st;
  const uint8_t* p = in;
  const uint8_t* const end = in + avail;
  pfm_record* o = out;
  pfm_record* const oend = out + max;
  *malformed = false;
  // Records to decode the checked way before a run is tried again: grows
  // (1, 2, 4 .. 64) while runs take none, 0 once one takes some.
  size_t backoff = 0;
  while (o != oend && p != end) {
    // As many short branches as surely fit the input (7 bytes each, the
    // last 8-byte load inside it) and the output.
    const size_t in_left = static_cast<size_t>(end - p);
    size_t budget = in_left >= 8 ? (in_left - 1) / 7 : 0;
    if (budget > static_cast<size_t>(oend - o))
      budget = static_cast<size_t>(oend - o);
    const size_t k = budget != 0 ? run(&p, o, budget, &s) : 0;
    o += k;
    if (o == oend || p == end) break;
    if (budget != 0 && k == budget) continue;  // more room may be left
    // Anything else: records the checked way, until the next one may start
    // a run (a short branch whose time delta is the previous one, or one
    // more or less) and, after runs that took none (short branches whose
    // varints are too long for them), a few more. Entering a run that
    // takes none costs its state's load and store: 57% of the time of a
    // stream of such records, decoded at 23.5 M records/s before
    // (bench/report's trace, 2026-11-27).
    backoff = k != 0 ? 0 : backoff == 0 ? 1 : (backoff < 64 ? backoff * 2 : 64);
    size_t quota = k != 0 ? 1 : backoff;
    bool stop = false;
    do {
      const int n = DecodeRecord(p, static_cast<size_t>(end - p), &s, o);
      if (n <= 0) {
        *malformed = n < 0;
        stop = true;
        break;
      }
      p += n;
      ++o;
      if (quota > 0) --quota;
    } while (o != oend && p != end && (quota > 0 || !IsRunLead(*p)));
    if (stop) break;
  }
  *st = s;
  *used = static_cast<size_t>(p - in);
  return static_cast<size_t>(o - out);
}

ShortRunFn RunOf(CodecFastPath path) {
#if defined(__x86_64__)
  if (path == CodecFastPath::kBmi2) return ShortRunBmi2;
#endif
  return ShortRunPortable;
}

}  // namespace

bool CodecFastPathRuns(CodecFastPath path) {
  if (path == CodecFastPath::kPortable) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
         HasLzcnt();
#else
  return false;
#endif
}

CodecFastPath CurrentCodecFastPath() {
  return FastPathChoice().load(std::memory_order_relaxed);
}

bool SetCodecFastPath(CodecFastPath path) {
  if (!CodecFastPathRuns(path)) return false;
  FastPathChoice().store(path, std::memory_order_relaxed);
  return true;
}

const char* CodecFastPathName(CodecFastPath path) {
  return path == CodecFastPath::kBmi2 ? "bmi2" : "portable";
}

size_t DecodeRecords(const uint8_t* in, size_t avail, CodecState* st,
                     pfm_record* out, size_t max, size_t* used,
                     bool* malformed) {
  return DecodeRecordsWith(RunOf(CurrentCodecFastPath()), in, avail, st, out,
                           max, used, malformed);
}

}  // namespace pfm
