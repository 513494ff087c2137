#include "kernel/uapi/compact_codec.h"
#include "kernel/uapi/bts_translate.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

constexpr uint64_t kKernelAddr = 0xffffffff81000000ull;

pfm_record Rec(uint16_t type, uint64_t time) {
  pfm_record r;
  memset(&r, 0, sizeof(r));
  r.type = type;
  r.time = time;
  return r;
}

pfm_record Branch(uint64_t time, uint64_t from, uint64_t to) {
  pfm_record r = Rec(PFM_REC_BRANCH, time);
  r.cpu = 3;
  r.pid = 4242;
  r.tid = 4243;
  r.u.branch.from = from;
  r.u.branch.to = to;
  return r;
}

bool Same(const pfm_record& a, const pfm_record& b) {
  return memcmp(&a, &b, sizeof(a)) == 0;
}

// Encodes `in` as one chunk, checks EncodedSize agrees, decodes it back and
// expects each record byte-identical to its normalized form.
void ExpectRoundTrip(const std::vector<pfm_record>& in) {
  std::vector<uint8_t> buf(in.size() * kMaxCompactRecordBytes + 1);
  CodecState enc;
  size_t used = 0;
  for (const pfm_record& r : in) {
    const size_t predicted = EncodedSize(r, enc);
    const size_t n = EncodeRecord(r, &enc, buf.data() + used);
    ASSERT_EQ(n, predicted);
    ASSERT_GT(n, 0u);
    ASSERT_LE(n, kMaxCompactRecordBytes);
    used += n;
  }
  buf[used] = PFM_REC_PAD;
  CodecState dec;
  size_t off = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    pfm_record got;
    const int n = DecodeRecord(buf.data() + off, used - off, &dec, &got);
    ASSERT_GT(n, 0) << "record " << i << " at offset " << off;
    pfm_record want = in[i];
    NormalizeRecord(&want);
    ASSERT_TRUE(Same(got, want)) << "record " << i << " type " << want.type;
    off += static_cast<size_t>(n);
  }
  EXPECT_EQ(off, used);
  pfm_record pad;
  EXPECT_EQ(DecodeRecord(buf.data() + used, 1, &dec, &pad), 0);
}

std::vector<pfm_record> OneOfEachType(uint64_t v64, uint32_t v32,
                                      uint16_t v16, uint64_t time) {
  std::vector<pfm_record> out;
  for (uint16_t t = PFM_REC_BRANCH; t < PFM_REC_TYPE_MAX; ++t) {
    pfm_record r = Rec(t, time);
    r.cpu = v16;
    r.pid = v32;
    r.tid = v32;
    r.misc = v32;
    switch (t) {
      case PFM_REC_BRANCH:
        r.u.branch = {v64, ~v64, v64};
        break;
      case PFM_REC_PEBS:
        r.u.pebs = {v64, v64, v64, v64, v32, v32};
        break;
      case PFM_REC_SWITCH_OUT:
      case PFM_REC_SWITCH_IN:
        r.u.sw = {v32, v32};
        break;
      case PFM_REC_LOST:
      case PFM_REC_THROTTLE:
        r.u.lost.count = v64;
        break;
      case PFM_REC_COUNTER:
        r.u.counter = {v64, v64, v64, v32, 0};
        break;
      case PFM_REC_RESIZED:
        r.u.resized = {v64, v64};
        break;
      case PFM_REC_EXIT:
        r.u.exit.status = static_cast<int64_t>(v64);
        break;
      case PFM_REC_GAP:
        r.u.gap = {v64, ~v64};
        break;
    }
    out.push_back(r);
  }
  return out;
}

TEST(CompactCodec, ZigZagKeepsSmallNegativeDeltasShort) {
  EXPECT_EQ(ZigZag(0), 0u);
  EXPECT_EQ(ZigZag(static_cast<uint64_t>(-1)), 1u);
  EXPECT_EQ(ZigZag(1), 2u);
  EXPECT_EQ(ZigZag(static_cast<uint64_t>(INT64_MIN)), UINT64_MAX);
  EXPECT_EQ(VarintBytes(0), 1u);
  EXPECT_EQ(VarintBytes(127), 1u);
  EXPECT_EQ(VarintBytes(128), 2u);
  EXPECT_EQ(VarintBytes(UINT64_MAX), 10u);
}

TEST(CompactCodec, RoundTripsEveryTypeWithZeros) {
  ExpectRoundTrip(OneOfEachType(0, 0, 0, 0));
}

TEST(CompactCodec, RoundTripsEveryTypeWithMaximumValues) {
  ExpectRoundTrip(OneOfEachType(UINT64_MAX, UINT32_MAX, UINT16_MAX,
                                UINT64_MAX));
}

TEST(CompactCodec, RoundTripsKernelAddressesAndNegativeExitStatus) {
  std::vector<pfm_record> in = OneOfEachType(kKernelAddr, 7, 1, 1000);
  pfm_record exit = Rec(PFM_REC_EXIT, 1000);
  exit.u.exit.status = -9;
  in.push_back(exit);
  // A user branch right after a kernel one: the from delta spans the space.
  in.push_back(Branch(1001, 0x401000, 0x401100));
  in.push_back(Branch(1002, kKernelAddr + 16, 0x401000));
  ExpectRoundTrip(in);
}

TEST(CompactCodec, RoundTripsDecreasingTime) {
  std::vector<pfm_record> in;
  in.push_back(Branch(UINT64_MAX, 0x1000, 0x2000));
  in.push_back(Branch(0, 0x2010, 0x1000));
  in.push_back(Branch(1ull << 63, 0x1010, 0x2000));
  in.push_back(Branch(5, 0x2010, 0x1000));
  ExpectRoundTrip(in);
}

TEST(CompactCodec, WorstCaseRecordsUseTheEscapeAndFitTheBound) {
  // Each record first in its chunk with all-ones fields: a PEBS record's
  // delta form is then 79 bytes and must be escaped.
  int escaped = 0;
  for (const pfm_record& r :
       OneOfEachType(UINT64_MAX, UINT32_MAX, UINT16_MAX, UINT64_MAX)) {
    CodecState st;
    uint8_t buf[kMaxCompactRecordBytes];
    const size_t n = EncodeRecord(r, &st, buf);
    EXPECT_LE(n, kMaxCompactRecordBytes);
    if ((buf[0] & 0x0f) == 0x0f) {
      ++escaped;
      EXPECT_EQ(n, kMaxCompactRecordBytes);
    }
    ExpectRoundTrip({r});
  }
  EXPECT_GE(escaped, 1);
}

TEST(CompactCodec, IgnoresAndZeroesBytesOutsideTheTypesUnion) {
  pfm_record r = Rec(PFM_REC_LOST, 10);
  memset(r.u.raw, 0xab, sizeof(r.u.raw));
  CodecState enc, dec;
  uint8_t buf[kMaxCompactRecordBytes];
  const size_t n = EncodeRecord(r, &enc, buf);
  pfm_record got;
  ASSERT_EQ(DecodeRecord(buf, n, &dec, &got), static_cast<int>(n));
  EXPECT_EQ(got.u.lost.count, 0xababababababababull);
  for (size_t i = 8; i < sizeof(got.u.raw); ++i) EXPECT_EQ(got.u.raw[i], 0);
}

TEST(CompactCodec, RefusesPadAndUnknownTypesOnEncode) {
  CodecState st;
  uint8_t buf[kMaxCompactRecordBytes];
  EXPECT_EQ(EncodeRecord(Rec(PFM_REC_PAD, 1), &st, buf), 0u);
  EXPECT_EQ(EncodeRecord(Rec(PFM_REC_TYPE_MAX, 1), &st, buf), 0u);
  EXPECT_EQ(EncodedSize(Rec(PFM_REC_TYPE_MAX, 1), st), 0u);
}

// Random records drawn to hit every field width, a fixed seed.
pfm_record RandomRecord(std::mt19937_64& rng) {
  const auto pick = [&rng]() -> uint64_t {
    switch (rng() % 5) {
      case 0: return 0;
      case 1: return rng() & 0x7f;
      case 2: return rng() & 0xffff;
      case 3: return UINT64_MAX - (rng() & 0xff);
      default: return rng();
    }
  };
  pfm_record r;
  // Garbage everywhere, then the fields: encoders must not care.
  for (size_t i = 0; i < sizeof(r); ++i)
    reinterpret_cast<uint8_t*>(&r)[i] = static_cast<uint8_t>(rng());
  r.type = static_cast<uint16_t>(1 + rng() % (PFM_REC_TYPE_MAX - 1));
  r.cpu = static_cast<uint16_t>(rng() % 3 == 0 ? pick() : 2);
  r.pid = static_cast<uint32_t>(rng() % 3 == 0 ? pick() : 100);
  r.tid = static_cast<uint32_t>(rng() % 3 == 0 ? pick() : 101);
  r.misc = static_cast<uint32_t>(rng() % 2 == 0 ? pick() : 0);
  r.time = pick();
  return r;
}

TEST(CompactCodec, RoundTripsRandomRecords) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 200; ++round) {
    std::vector<pfm_record> in;
    for (int i = 0; i < 64; ++i) in.push_back(RandomRecord(rng));
    ExpectRoundTrip(in);
    if (HasFatalFailure()) return;
  }
}

TEST(CompactCodec, TruncatedRecordsAreRefusedWithoutOverRead) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (int i = 0; i < 500; ++i) {
    const pfm_record r = RandomRecord(rng);
    CodecState enc;
    uint8_t buf[kMaxCompactRecordBytes];
    const size_t n = EncodeRecord(r, &enc, buf);
    for (size_t cut = 0; cut < n; ++cut) {
      // An exact-size heap copy: ASan/valgrind would flag any over-read.
      std::unique_ptr<uint8_t[]> exact(new uint8_t[cut == 0 ? 1 : cut]);
      memcpy(exact.get(), buf, cut);
      CodecState dec;
      const CodecState before = dec;
      pfm_record out;
      memset(&out, 0x5a, sizeof(out));
      ASSERT_EQ(DecodeRecord(exact.get(), cut, &dec, &out), -EINVAL)
          << "type " << r.type << " cut at " << cut << " of " << n;
      EXPECT_EQ(memcmp(&before, &dec, sizeof(dec)), 0);  // state untouched
      EXPECT_EQ(out.type, 0x5a5a);                        // output untouched
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(CompactCodec, GarbageNeverDecodesPastAvail) {
  std::mt19937_64 rng(99);
  int refused = 0, decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    const size_t len = 1 + rng() % 80;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
    for (size_t j = 0; j < len; ++j) buf[j] = static_cast<uint8_t>(rng());
    CodecState st;
    pfm_record out;
    const int n = DecodeRecord(buf.get(), len, &st, &out);
    ASSERT_LE(n, static_cast<int>(len));
    ASSERT_TRUE(n == -EINVAL || n >= 0);
    if (n < 0) ++refused;
    if (n > 0) {
      ++decoded;
      EXPECT_TRUE(IsRecordType(out.type));
    }
  }
  // Both outcomes occur: the test exercises refusal and acceptance.
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

TEST(CompactCodec, RefusesOverlongVarintsAndOverflowingFields) {
  CodecState st;
  pfm_record out;
  // BRANCH, time varint of eleven bytes.
  uint8_t overlong[16] = {PFM_REC_BRANCH};
  for (int i = 1; i <= 11; ++i) overlong[i] = 0x80;
  EXPECT_EQ(DecodeRecord(overlong, sizeof(overlong), &st, &out), -EINVAL);
  // The tenth byte may only hold bit 63.
  uint8_t tenth[16] = {PFM_REC_LOST, 0};
  for (int i = 2; i <= 10; ++i) tenth[i] = 0xff;
  tenth[11] = 0x02;
  EXPECT_EQ(DecodeRecord(tenth, sizeof(tenth), &st, &out), -EINVAL);
  // cpu = 65536 does not fit 16 bits.
  const uint8_t cpu[] = {PFM_REC_LOST | 0x10, 0, 0x80, 0x80, 0x04, 0};
  EXPECT_EQ(DecodeRecord(cpu, sizeof(cpu), &st, &out), -EINVAL);
  // Unknown types, escaped (every plain lead nibble is a type or a form).
  static_assert(PFM_REC_TYPE_MAX == 13, "a new type: pick an unknown one below");
  uint8_t esc[kMaxCompactRecordBytes] = {0xdf};  // type 13: none yet
  EXPECT_EQ(DecodeRecord(esc, sizeof(esc), &st, &out), -EINVAL);
  EXPECT_EQ(DecodeRecord(esc, 0, &st, &out), -EINVAL);
}

// A branch stream like a user program's: code in a 4 MiB text range, the
// next branch a few instructions after the previous target, mostly short
// jumps, branches a few hundred ns apart, one task on one CPU.
std::vector<pfm_record> SyntheticBranchStream(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<pfm_record> out;
  uint64_t time = 1'700'000'000'000'000'000ull;
  uint64_t to = 0x400000;
  for (size_t i = 0; i < n; ++i) {
    time += 100 + rng() % 400;
    uint64_t from = to + 2 + rng() % 60;
    uint64_t target;
    if (rng() % 10 < 7) {
      target = from + (rng() % 512) - 256;  // loops, if/else
    } else {
      target = 0x400000 + rng() % (4u << 20);  // calls, returns
    }
    pfm_record r = Branch(time, from, target);
    const bool predicted = rng() % 10 != 0;
    r.misc = predicted ? PFM_MISC_BRANCH_PREDICTED : 0;
    r.u.branch.flags = predicted ? PFM_BTS_RAW_PREDICTED : 0;
    out.push_back(r);
    to = target;
  }
  return out;
}

TEST(CompactCodec, TypicalBranchStreamIsWellUnderAThirdOfFixed) {
  const std::vector<pfm_record> in = SyntheticBranchStream(100000, 1);
  // Encode as the ring does: a state reset at every 4096-byte chunk.
  CodecState st;
  size_t in_chunk = 0, bytes = 0;
  uint8_t buf[kMaxCompactRecordBytes];
  for (const pfm_record& r : in) {
    size_t n = EncodedSize(r, st);
    if (in_chunk + n > PFM_RING_CHUNK) {
      bytes += PFM_RING_CHUNK - in_chunk;  // padding counts
      in_chunk = 0;
      st.Reset();
    }
    n = EncodeRecord(r, &st, buf);
    in_chunk += n;
    bytes += n;
  }
  const double per_record = static_cast<double>(bytes) / in.size();
  std::cout << "compact: " << per_record
            << " bytes/record on a synthetic branch stream (fixed: "
            << PFM_RECORD_FIXED_SIZE << ")\n";
  RecordProperty("bytes_per_branch_record_x100",
                 static_cast<int>(per_record * 100));
  EXPECT_LT(per_record, 21.0);
  EXPECT_LE(per_record, 8.0);
  ExpectRoundTrip(std::vector<pfm_record>(in.begin(), in.begin() + 500));
}

}  // namespace
}  // namespace pfm

namespace pfm {
namespace {

// A loop's branches: the same few (from, to) pairs over and over, at evenly
// interpolated times (as a drain stamps BTS records).
std::vector<pfm_record> LoopStream(size_t n) {
  std::vector<pfm_record> out;
  const uint64_t pairs[3][2] = {{0x401627, 0x401649}, {0x401660, 0x401615},
                                {0x401665, 0x40164c}};
  for (size_t i = 0; i < n; ++i) {
    pfm_record r{};
    r.type = PFM_REC_BRANCH;
    r.cpu = 1;
    r.pid = r.tid = 4242;
    r.time = 1000000 + i * 333 + (i * 1000 / 3) % 2;  // deltas 333/334
    r.u.branch.from = pairs[i % 3][0];
    r.u.branch.to = pairs[i % 3][1];
    out.push_back(r);
  }
  return out;
}

TEST(CompactCodecShortBranch, LoopsCostAFewBytesPerBranchAndRoundTrip) {
  std::vector<pfm_record> in = LoopStream(300);
  ExpectRoundTrip(in);
  CodecState st;
  uint8_t buf[kMaxCompactRecordBytes];
  size_t total = 0;
  for (const pfm_record& r : in) total += EncodeRecord(r, &st, buf);
  const double per = double(total) / in.size();
  std::cout << "loop stream: " << per << " bytes/branch\n";
  // Targets cached: lead + from delta (1-2 bytes) + a time delta when it
  // moves by 2 (this stream's deltas are 332..334).
  EXPECT_LE(per, 2.8);  // the long form alone needs about 5.7 here
}

TEST(CompactCodecShortBranch, AMispredictedTargetFallsBackToItsDelta) {
  std::vector<pfm_record> in = LoopStream(30);
  in[20].u.branch.to = 0x500000;  // a different target for a cached `from`
  in[25].u.branch.flags = 0x10;   // flags change: the long form
  in[26].cpu = 3;                 // cpu change: the long form
  ExpectRoundTrip(in);
}

// Every lead bit of the short form, decoded from hand-made bytes: the time
// codes (same, +1, -1, explicit), the cached `to` and the predicted flip.
TEST(CompactCodecShortBranch, EachLeadBitDecodesAsSpecified) {
  CodecState st;
  st.time = 1000;
  st.time_delta = 50;
  st.branch_to = 0x400000;
  st.branch_misc = PFM_MISC_BRANCH_PREDICTED;
  st.branch_flags = PFM_BTS_RAW_PREDICTED;
  struct Case {
    uint8_t lead;
    uint64_t time;
    bool flipped;
  };
  const Case cases[] = {
      {0x0e | 0x10, 1050, false},         // d = p
      {0x0e | 0x10 | 0x40, 1051, false},  // d = p + 1
      {0x0e | 0x40, 1049, false},         // d = p - 1
      {0x0e | 0x80 | 0x10, 1050, true},   // predicted bit flipped
  };
  for (const Case& c : cases) {
    CodecState s = st;
    const uint8_t bytes[] = {c.lead, 0x04, 0x06};  // from +2, to - from +3
    pfm_record r;
    ASSERT_EQ(DecodeRecord(bytes, sizeof(bytes), &s, &r), 3) << int(c.lead);
    EXPECT_EQ(r.type, PFM_REC_BRANCH);
    EXPECT_EQ(r.time, c.time) << int(c.lead);
    EXPECT_EQ(r.u.branch.from, 0x400002u);
    EXPECT_EQ(r.u.branch.to, 0x400005u);
    EXPECT_EQ(r.misc, c.flipped ? 0u : uint32_t{PFM_MISC_BRANCH_PREDICTED});
    EXPECT_EQ(r.u.branch.flags,
              c.flipped ? 0u : uint64_t{PFM_BTS_RAW_PREDICTED});
    // And the encoder picks exactly that form for the decoded record.
    CodecState e = st;
    uint8_t out[kMaxCompactRecordBytes];
    ASSERT_EQ(EncodeRecord(r, &e, out), 3u);
    EXPECT_EQ(out[0], c.lead);
  }
  // Explicit time: zz(d - p) follows the lead.
  CodecState s = st;
  const uint8_t bytes[] = {0x0e | 0x20, 0x0a, 0x04};  // d = p + 5, to cached
  pfm_record r;
  ASSERT_EQ(DecodeRecord(bytes, sizeof(bytes), &s, &r), 3);
  EXPECT_EQ(r.time, 1055u);
  EXPECT_EQ(r.u.branch.to, 0u);  // the predictor's empty entry
}

// Real BTS flips the predicted bit now and then; a flip alone keeps the
// short form (lead + from delta once the loop's targets are cached).
TEST(CompactCodecShortBranch, PredictedFlipsStayShort) {
  std::vector<pfm_record> in = LoopStream(300);
  for (size_t i = 0; i < in.size(); ++i) {
    if (i % 7 == 3) continue;
    in[i].misc = PFM_MISC_BRANCH_PREDICTED;
    in[i].u.branch.flags = PFM_BTS_RAW_PREDICTED;
  }
  ExpectRoundTrip(in);
  auto bytes = [](const std::vector<pfm_record>& v) {
    CodecState st;
    uint8_t buf[kMaxCompactRecordBytes];
    size_t total = 0;
    for (const pfm_record& r : v) total += EncodeRecord(r, &st, buf);
    return total;
  };
  // The first record pays for its flags once (long form); after that the
  // flips cost nothing over the same stream without them.
  const std::vector<pfm_record> plain = LoopStream(300);
  EXPECT_LE(bytes(in), bytes(plain) + 2);
}

// A stream of everything the batch paths must treat like the record-by-
// record ones: runs of short branches with predicted and unpredicted times,
// predicted-bit flips, misc changes, far jumps (varints over 3 and over 8
// bytes), cpu/pid changes and every other type now and then.
std::vector<pfm_record> BatchTestStream(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<pfm_record> out;
  uint64_t time = 1'000'000, step = 13, to = 0x400000;
  for (size_t i = 0; i < n; ++i) {
    const unsigned pick = rng() % 100;
    if (pick < 3) {
      std::vector<pfm_record> any = OneOfEachType(
          rng(), static_cast<uint32_t>(rng() % 5), 3, time);
      pfm_record r = any[rng() % any.size()];
      NormalizeRecord(&r);
      out.push_back(r);
      continue;
    }
    if (pick < 6) step = rng() % 3 == 0 ? rng() : rng() % 1000;
    time += step + rng() % 2;
    const uint64_t from = to + 2 + rng() % 200;
    uint64_t target = 0x400000 + (rng() % 64) * 16;
    if (pick >= 90) target = rng() % 2 ? kKernelAddr + rng() % 4096 : rng();
    pfm_record r = Branch(time, from, target);
    if (pick == 50) r.pid = 99;
    if (pick == 51) r.cpu = 7;
    const bool predicted = rng() % 10 != 0;
    r.misc = predicted ? PFM_MISC_BRANCH_PREDICTED : 0;
    if (pick == 52) r.misc |= PFM_MISC_BRANCH_KERNEL_FROM;
    r.u.branch.flags = predicted ? PFM_BTS_RAW_PREDICTED : 0;
    if (pick == 53) r.u.branch.flags |= 1;
    out.push_back(r);
    to = target;
  }
  return out;
}

// The codec on each of its fast paths that runs on this CPU (EncodeRun and
// DecodeRecords; the chosen path is restored after each test).
class CodecOnEachPath : public ::testing::TestWithParam<CodecFastPath> {
 protected:
  void SetUp() override {
    if (!SetCodecFastPath(GetParam()))
      GTEST_SKIP() << CodecFastPathName(GetParam())
                   << " does not run on this CPU";
  }
  void TearDown() override { SetCodecFastPath(chosen_); }

 private:
  const CodecFastPath chosen_ = CurrentCodecFastPath();
};

INSTANTIATE_TEST_SUITE_P(CompactCodecBatch, CodecOnEachPath,
                         ::testing::Values(CodecFastPath::kPortable,
                                           CodecFastPath::kBmi2),
                         [](const auto& info) {
                           return std::string(CodecFastPathName(info.param));
                         });

// EncodeRun (the batch encoder's loop) writes the bytes EncodeRecord writes
// one by one, stops exactly where the next record would pass `limit`, and
// leaves the same state.
TEST_P(CodecOnEachPath, EncodeRunIsEncodeRecordOneByOne) {
  const std::vector<pfm_record> in = BatchTestStream(20000, 5);
  std::vector<uint8_t> want;
  std::vector<size_t> ends;
  std::vector<CodecState> states;
  CodecState st;
  for (const pfm_record& r : in) {
    uint8_t buf[kMaxCompactRecordBytes];
    const size_t n = EncodeRecord(r, &st, buf);
    ASSERT_EQ(n, EncodedSize(r, states.empty() ? CodecState() : states.back()));
    want.insert(want.end(), buf, buf + n);
    ends.push_back(want.size());
    states.push_back(st);
  }
  std::mt19937_64 rng(9);
  std::vector<uint8_t> got(want.size() + kMaxCompactRecordBytes + 8);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t first = rng() % in.size();
    const size_t count = rng() % (in.size() - first) + 1;
    const size_t base = first == 0 ? 0 : ends[first - 1];
    const size_t limit = trial % 2 ? SIZE_MAX / 2 : rng() % 4096;
    CodecState run = first == 0 ? CodecState() : states[first - 1];
    size_t used = 0;
    const size_t k =
        EncodeRun(in.data() + first, count, &run, got.data(), limit, &used);
    // k records fit, the next would not.
    ASSERT_LE(k, count);
    ASSERT_EQ(used, (k == 0 ? base : ends[first + k - 1]) - base);
    ASSERT_LE(used, limit);
    if (k < count) {
      ASSERT_GT(ends[first + k] - base, limit);
    }
    ASSERT_EQ(memcmp(got.data(), want.data() + base, used), 0) << trial;
    ASSERT_TRUE(run == (k == 0 ? (first == 0 ? CodecState() : states[first - 1])
                               : states[first + k - 1]));
  }
}

// A drain's raw BTS records for EncodeBtsRun: user branches with small
// deltas, repeated targets and predicted-bit flips, now and then a far jump
// (varints over 3 bytes), another flag bit set, and (with `others`) a
// kernel branch or a soft-BTS gap marker.
std::vector<pfm_bts_raw> BtsTestStream(size_t n, uint32_t seed, bool others) {
  std::mt19937_64 rng(seed);
  std::vector<pfm_bts_raw> out;
  uint64_t to = 0x400000;
  for (size_t i = 0; i < n; ++i) {
    const unsigned pick = rng() % 200;
    pfm_bts_raw b;
    b.from = to + 2 + rng() % 200;
    b.to = 0x400000 + (rng() % 64) * 16;
    if (pick < 6) b.to = rng() % (uint64_t{1} << 47);
    b.flags = rng() % 10 != 0 ? PFM_BTS_RAW_PREDICTED : 0;
    if (pick == 7) b.flags |= 1;
    if (others && pick == 8) b.from = kKernelAddr + rng() % 4096;
    if (others && pick == 9) b.flags = PFM_BTS_RAW_GAP;
    out.push_back(b);
    to = b.to;
  }
  return out;
}

// EncodeBtsRun (the fused drain's loop) writes the bytes EncodeRecord writes
// for TranslateBts's records one by one, with the drain's interpolated
// times, stops where the next record would pass `limit` or is not a user
// branch, and leaves the same state and clock; over clocks whose steps are
// below one, around one and far above it.
TEST_P(CodecOnEachPath, EncodeBtsRunIsTheTranslationEncodedOneByOne) {
  const BtsOrigin origin{3, 4242, 4243};
  for (const bool others : {false, true}) {
    for (const uint64_t span : {uint64_t{0}, uint64_t{777}, uint64_t{20000},
                                uint64_t{50001}, uint64_t{1} << 40}) {
      SCOPED_TRACE(testing::Message() << "span " << span << " others " << others);
      const std::vector<pfm_bts_raw> raw =
          BtsTestStream(20000, static_cast<uint32_t>(span % 97 + others), others);
      std::vector<uint8_t> want;
      std::vector<size_t> ends;
      std::vector<CodecState> states;
      std::vector<BtsClock> clocks;  // clocks[i]: at record i
      CodecState st;
      BtsClock clock(1'000'000, span, raw.size());
      for (const pfm_bts_raw& b : raw) {
        clocks.push_back(clock);
        pfm_record r;
        TranslateBts(b, clock.Next(), origin, &r);
        uint8_t buf[kMaxCompactRecordBytes];
        const size_t n = EncodeRecord(r, &st, buf);
        want.insert(want.end(), buf, buf + n);
        ends.push_back(want.size());
        states.push_back(st);
      }
      clocks.push_back(clock);
      std::mt19937_64 rng(span + 1);
      std::vector<uint8_t> got(want.size() + kMaxCompactRecordBytes + 8);
      for (int trial = 0; trial < 300; ++trial) {
        const size_t first = rng() % raw.size();
        const size_t count = rng() % (raw.size() - first) + 1;
        const size_t base = first == 0 ? 0 : ends[first - 1];
        const size_t limit = trial % 2 ? SIZE_MAX / 2 : rng() % 4096;
        CodecState run = first == 0 ? CodecState() : states[first - 1];
        BtsClock c = clocks[first];
        size_t used = 0;
        const size_t k = EncodeBtsRun(raw.data() + first, count, origin, &c,
                                      &run, got.data(), limit, &used);
        // Where it had to stop: the first record that is not a user branch
        // or does not fit.
        size_t expect = 0;
        while (expect < count && IsUserBranch(raw[first + expect]) &&
               ends[first + expect] - base <= limit)
          ++expect;
        ASSERT_EQ(k, expect) << trial;
        ASSERT_EQ(used, (k == 0 ? base : ends[first + k - 1]) - base);
        ASSERT_EQ(memcmp(got.data(), want.data() + base, used), 0) << trial;
        ASSERT_TRUE(run == (k == 0 ? (first == 0 ? CodecState() : states[first - 1])
                                   : states[first + k - 1]))
            << trial;
        ASSERT_EQ(c.Peek(), clocks[first + k].Peek()) << trial;
        ASSERT_EQ(c.acc_r, clocks[first + k].acc_r) << trial;
      }
    }
  }
}

// DecodeRecords (the reader's batch decoder) returns what DecodeRecord does
// one by one: the records, the state, and where it stops (PAD, malformed
// bytes, the end of the input, `max`), reset markers included.
TEST_P(CodecOnEachPath, DecodeRecordsIsDecodeRecordOneByOne) {
  const std::vector<pfm_record> in = BatchTestStream(5000, 6);
  std::vector<uint8_t> bytes;
  CodecState st;
  std::mt19937_64 rng(4);
  for (const pfm_record& r : in) {
    uint8_t buf[kMaxCompactUnitBytes];
    size_t n;
    if (rng() % 50 == 0) {  // a reset marker, as a shared batch puts them
      st.Reset();
      buf[0] = kResetMarker;
      n = 1 + EncodeRecord(r, &st, buf + 1);
    } else {
      n = EncodeRecord(r, &st, buf);
    }
    bytes.insert(bytes.end(), buf, buf + n);
  }
  const size_t full = bytes.size();
  bytes.push_back(PFM_REC_PAD);
  std::vector<pfm_record> got(in.size() + 1);
  for (int trial = 0; trial < 60; ++trial) {
    // Cut anywhere (mid-record too), or stop at the PAD, or at `max`.
    const size_t avail = trial == 0 ? full + 1 : rng() % (full + 2);
    const size_t max = trial % 3 == 0 ? rng() % in.size() : got.size();
    CodecState one, batch;
    size_t off = 0, k1 = 0;
    int last = 1;
    while (k1 < max && off < avail) {
      pfm_record r;
      last = DecodeRecord(bytes.data() + off, avail - off, &one, &r);
      if (last <= 0) break;
      ASSERT_EQ(memcmp(&r, &in[k1], sizeof(r)), 0) << k1;
      off += static_cast<size_t>(last);
      ++k1;
    }
    size_t used = 0;
    bool malformed = true;
    const size_t k2 = DecodeRecords(bytes.data(), avail, &batch, got.data(),
                                    max, &used, &malformed);
    ASSERT_EQ(k2, k1) << trial;
    ASSERT_EQ(used, off);
    ASSERT_EQ(malformed, k1 < max && off < avail && last < 0);
    ASSERT_TRUE(batch == one);
    for (size_t i = 0; i < k2; ++i)
      ASSERT_EQ(memcmp(&got[i], &in[i], sizeof(pfm_record)), 0) << i;
  }
}

// Stretches of short branches the runs cannot take (targets far away: the
// varints are too long for them; DecodeRecords then decodes the checked way
// for 1, 2, 4 .. 64 records before it tries a run again) between stretches
// they can, of every length around those steps: the records, state and
// bytes used are DecodeRecord's one by one, whatever `max` cuts.
TEST_P(CodecOnEachPath, StretchesTheRunsCannotTakeDecodeAsOneByOne) {
  std::mt19937_64 rng(23);
  std::vector<pfm_record> in;
  uint64_t time = 5'000'000, to = 0x400000;
  for (size_t stretch = 0; stretch < 60; ++stretch) {
    const bool far = stretch % 2 == 0;
    const size_t len = far ? 1 + rng() % 150 : 1 + rng() % 80;
    for (size_t i = 0; i < len; ++i) {
      time += 7;  // the same delta: a short branch with a predicted time
      const uint64_t from = to + 3;
      const uint64_t target = far ? 0x7f0000000000 + (rng() % (uint64_t{1} << 40))
                                  : 0x400000 + (rng() % 64) * 16;
      pfm_record r = Branch(time, from, target);
      r.misc = PFM_MISC_BRANCH_PREDICTED;
      r.u.branch.flags = PFM_BTS_RAW_PREDICTED;
      in.push_back(r);
      to = target;
    }
  }
  std::vector<uint8_t> bytes;
  CodecState st;
  for (const pfm_record& r : in) {
    uint8_t buf[kMaxCompactRecordBytes];
    const size_t n = EncodeRecord(r, &st, buf);
    bytes.insert(bytes.end(), buf, buf + n);
  }
  std::vector<pfm_record> got(in.size());
  for (size_t max : {in.size(), size_t{1}, size_t{3}, size_t{64}, size_t{65}, size_t{100}}) {
    CodecState batch;
    size_t off = 0, k = 0;
    while (k < in.size()) {
      size_t used = 0;
      bool malformed = true;
      const size_t n = DecodeRecords(bytes.data() + off, bytes.size() - off, &batch,
                                     got.data() + k, std::min(max, in.size() - k), &used,
                                     &malformed);
      ASSERT_FALSE(malformed) << k;
      ASSERT_GT(n, 0u) << k;
      off += used;
      k += n;
    }
    EXPECT_EQ(off, bytes.size()) << max;
    EXPECT_TRUE(batch == st) << max;
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(memcmp(&got[i], &in[i], sizeof(pfm_record)), 0) << max << " " << i;
  }
}

// Bytes made to look like short branches (leads with the 0xE nibble, every
// mix of the predicted bits, varints of 1 to 5 bytes with stray stop bits,
// now and then a byte of anything): wherever the fast path takes a record
// or leaves it to the checked decoder, the records, the state, the stopping
// point and the verdict are DecodeRecord's one by one.
TEST_P(CodecOnEachPath, ShortBranchLookalikesDecodeAsOneByOne) {
  std::mt19937_64 rng(11);
  std::vector<pfm_record> want(4096), got(4096);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint8_t> bytes;
    while (bytes.size() < 2000) {
      if (rng() % 40 == 0) {
        bytes.push_back(static_cast<uint8_t>(rng()));
        continue;
      }
      bytes.push_back(static_cast<uint8_t>(0x0e | (rng() % 16) << 4));
      for (int v = 0; v < 2; ++v) {
        const int len = 1 + static_cast<int>(rng() % 16 == 0 ? rng() % 5 : rng() % 3);
        for (int b = 0; b < len; ++b)
          bytes.push_back(static_cast<uint8_t>(rng() % 128 | (b + 1 < len ? 0x80 : 0)));
      }
    }
    const size_t avail = bytes.size() - rng() % 8;
    CodecState one;
    size_t off = 0, k1 = 0;
    int last = 1;
    while (off < avail && k1 < want.size()) {
      last = DecodeRecord(bytes.data() + off, avail - off, &one, &want[k1]);
      if (last <= 0) break;
      off += static_cast<size_t>(last);
      ++k1;
    }
    CodecState batch;
    size_t used = 0;
    bool malformed = false;
    const size_t k2 = DecodeRecords(bytes.data(), avail, &batch, got.data(),
                                    got.size(), &used, &malformed);
    ASSERT_EQ(k2, k1) << trial;
    ASSERT_EQ(used, off) << trial;
    ASSERT_EQ(malformed, off < avail && last < 0) << trial;
    ASSERT_TRUE(batch == one) << trial;
    for (size_t i = 0; i < k2; ++i)
      ASSERT_EQ(memcmp(&got[i], &want[i], sizeof(pfm_record)), 0)
          << trial << " " << i;
  }
}

// The reset marker: the record after it decodes from a reset state; it is
// never alone, before a PAD, before another marker or cut; a refusal leaves
// state and output alone.
// The drain's clock (kernel/uapi/bts_translate.h) against its definition,
// record i of n over (t0, t0 + span] at t0 + floor(span * (i + 1) / n),
// computed in 128 bits: spans below, at and far above n, up to 2^63.
TEST(BtsClock, StampsTheFloorOfEachRecordsShareOfTheSpan) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t n = trial < 4 ? uint64_t{1} + trial : rng() % 5000 + 1;
    uint64_t span;
    switch (trial % 4) {
      case 0: span = rng() % n; break;                // under a tick a record
      case 1: span = n * (rng() % 5) + rng() % n; break;
      case 2: span = rng() % (uint64_t{1} << 40); break;
      default: span = rng() >> 1; break;              // up to 2^63
    }
    const uint64_t t0 = rng() >> 2;
    BtsClock c(t0, span, n);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t want = t0 + static_cast<uint64_t>(
                                     static_cast<unsigned __int128>(span) * (i + 1) / n);
      ASSERT_EQ(c.Next(), want) << "n " << n << " span " << span << " i " << i;
    }
    EXPECT_EQ(c.Peek() - t0 - span, span / n) << "one step past the last";
  }
}

TEST(CompactCodecBatch, ResetMarkerResetsTheStateForTheRecordAfterIt) {
  const pfm_record a = Branch(1000, 0x401000, 0x401100);
  const pfm_record b = Branch(1013, 0x401120, 0x401000);
  CodecState enc;
  uint8_t buf[2 * kMaxCompactUnitBytes];
  size_t n = EncodeRecord(a, &enc, buf);
  buf[n] = kResetMarker;
  CodecState fresh;
  const size_t m = EncodeRecord(b, &fresh, buf + n + 1);
  CodecState dec;
  pfm_record got;
  ASSERT_EQ(DecodeRecord(buf, n + 1 + m, &dec, &got), static_cast<int>(n));
  const CodecState before = dec;
  ASSERT_EQ(DecodeRecord(buf + n, 1 + m, &dec, &got), static_cast<int>(1 + m));
  EXPECT_EQ(memcmp(&got, &b, sizeof(got)), 0);
  EXPECT_TRUE(dec == fresh);
  // Without the marker, the same bytes decode to something else.
  CodecState wrong = before;
  ASSERT_GT(DecodeRecord(buf + n + 1, m, &wrong, &got), 0);
  EXPECT_NE(memcmp(&got, &b, sizeof(got)), 0);
  // Malformed uses of the marker.
  const uint8_t alone[] = {kResetMarker};
  const uint8_t then_pad[] = {kResetMarker, PFM_REC_PAD, 0};
  const uint8_t twice[] = {kResetMarker, kResetMarker, buf[n + 1], 0, 0, 0};
  for (auto [p, len] : {std::pair<const uint8_t*, size_t>{alone, 1},
                        {then_pad, 3}, {twice, 6}, {buf + n, m}}) {
    CodecState s = before;
    pfm_record untouched;
    memset(&untouched, 0x5a, sizeof(untouched));
    pfm_record out = untouched;
    EXPECT_EQ(DecodeRecord(p, len, &s, &out), -EINVAL);
    EXPECT_TRUE(s == before);
    EXPECT_EQ(memcmp(&out, &untouched, sizeof(out)), 0);
  }
}

// No writer makes a record longer than the escape form, so a longer delta
// form (a PEBS record can reach 79 bytes) is refused: a record with its
// marker always fits kMaxCompactUnitBytes, which the history sizing counts.
TEST(CompactCodecBatch, RefusesRecordsLongerThanTheEscapeForm) {
  uint8_t pebs[80];
  pebs[0] = PFM_REC_PEBS | 0xf0;  // cpu, pid, tid and misc follow
  size_t off = 1;
  auto varint = [&](int bytes) {
    for (int i = 0; i < bytes - 1; ++i) pebs[off++] = 0xff;
    pebs[off++] = 0x01;
  };
  varint(10);  // time
  varint(3);   // cpu 16 bits: 0x7fff | 1 << 14 ... within 16 bits
  pebs[off - 1] = 0x03;
  for (int i = 0; i < 3; ++i) varint(5);  // pid, tid, misc: 32 bits
  for (int i = 0; i < 4; ++i) varint(10);
  for (int i = 0; i < 2; ++i) varint(5);
  ASSERT_EQ(off, 79u);
  CodecState st;
  pfm_record out;
  EXPECT_EQ(DecodeRecord(pebs, off, &st, &out), -EINVAL);
  // The same values escaped (63 bytes) are fine.
  pfm_record r = Rec(PFM_REC_PEBS, UINT64_MAX);
  r.cpu = UINT16_MAX;
  r.pid = r.tid = r.misc = UINT32_MAX;
  r.u.pebs = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT32_MAX,
              UINT32_MAX};
  uint8_t buf[kMaxCompactRecordBytes];
  CodecState enc;
  ASSERT_EQ(EncodeRecord(r, &enc, buf), kMaxCompactRecordBytes);
  EXPECT_EQ(DecodeRecord(buf, sizeof(buf), &st, &out),
            static_cast<int>(kMaxCompactRecordBytes));
}

}  // namespace
}  // namespace pfm
