#include "kernel/uapi/proc_maps.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pfm {
namespace {

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::vector<Mapping> Parse(const std::string& text, MalformedLine malformed,
                           int* rc = nullptr, ErrorDetail* d = nullptr) {
  std::vector<Mapping> out;
  const int r = ParseProcMaps(text, malformed, &out, d);
  if (rc != nullptr) *rc = r;
  return out;
}

std::vector<Mapping> Sample() {
  std::vector<Mapping> maps(3);
  maps[0] = {0x400000, 0x401000, 0x1000, "/bin/prog with space", false, false};
  maps[1] = {0x7f0000000000, 0x7f0000002000, 0, "", true, false};
  maps[2] = {0x7ffd0000, 0x7ffd2000, 0xffffffffffff0000ull, "[vdso]", true, true};
  return maps;
}

// ---- the parser ----

TEST(ParseProcMaps, KeepsExecutableMappingsWithPathsAndSkipsMalformedLines) {
  const std::string text =
      "00400000-00401000 r--p 00000000 08:01 123 /bin/prog\n"
      "00401000-00402000 r-xp 00001000 08:01 123 /bin/prog with space\n"
      "7ffd0000-7ffd2000 r-xp 00000000 00:00 0                  [vdso]\n"
      "7ffe0000-7ffe1000 r-xp 00000000 00:00 0 \n"
      "garbage line\n";
  int rc = 1;
  const std::vector<Mapping> m = Parse(text, MalformedLine::kSkip, &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].start, 0x401000u);
  EXPECT_EQ(m[0].end, 0x402000u);
  EXPECT_EQ(m[0].offset, 0x1000u);
  EXPECT_EQ(m[0].path, "/bin/prog with space");
  EXPECT_EQ(m[1].path, "[vdso]");
  EXPECT_EQ(m[2].path, "");
  EXPECT_FALSE(m[0].writable);
  EXPECT_FALSE(m[0].shared);
}

TEST(ParseProcMaps, KeepsWritableAndSharedBits) {
  const std::vector<Mapping> m =
      Parse("10000-11000 rwxp 00000000 00:00 0\n"
            "20000-21000 r-xs 00000000 00:05 9 /memfd:jit (deleted)\n",
            MalformedLine::kSkip);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_TRUE(m[0].writable);
  EXPECT_FALSE(m[0].shared);
  EXPECT_FALSE(m[1].writable);
  EXPECT_TRUE(m[1].shared);
  EXPECT_EQ(m[1].path, "/memfd:jit (deleted)");  // the parser leaves it as printed
}

TEST(ParseProcMaps, RefusesMalformedLineNamingIt) {
  int rc = 0;
  ErrorDetail d;
  const std::vector<Mapping> m =
      Parse("00400000-00401000 r-xp 00000000 08:01 11 /bin/a\nnonsense\n",
            MalformedLine::kRefuse, &rc, &d);
  EXPECT_EQ(rc, -EINVAL);
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(Contains(d.message, "line 2")) << d.message;
  EXPECT_TRUE(Contains(d.message, "'nonsense'")) << d.message;
}

TEST(ParseProcMaps, RefusesEveryShapeTheKernelDoesNotPrint) {
  for (const char* line : {
           "00402000-00401000 r-xp 00000000 08:01 11 /a",   // ends before start
           "00401000 r-xp 00000000 08:01 11 /a",            // no end
           "00400000-00401000 r-x 00000000 08:01 11 /a",    // three perms
           "00400000-00401000 r-xq 00000000 08:01 11 /a",   // not p or s
           "00400000-00401000 r-xp zz 08:01 11 /a",         // offset not hex
           "00400000-00401000 r-xp 00000000",               // no dev, no inode
           "00400000-00401000 r-xp 00000000 08:01",         // no inode
           "10000000000000000-10000000000000001 r-xp 0 0:0 0 /a",  // 17 digits
           " 00400000-00401000 r-xp 00000000 08:01 11 /a",  // leading space
       }) {
    int rc = 0;
    Parse(line, MalformedLine::kRefuse, &rc);
    EXPECT_EQ(rc, -EINVAL) << line;
    EXPECT_TRUE(Parse(line, MalformedLine::kSkip, &rc).empty()) << line;
    EXPECT_EQ(rc, 0) << line;
  }
}

TEST(ParseProcMaps, LastLineNeedsNoNewlineAndEmptyLinesAreIgnored) {
  int rc = 1;
  const std::vector<Mapping> m =
      Parse("\n\nffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]",
            MalformedLine::kRefuse, &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].start, 0xffffffffff600000u);
  EXPECT_EQ(m[0].path, "[vsyscall]");
}

TEST(ParseProcMaps, PathOverPathMaxIsMalformed) {
  const std::string head = "00400000-00401000 r-xp 00000000 08:01 11 /";
  int rc = 1;
  EXPECT_EQ(Parse(head + std::string(kMaxMappingPath - 1, 'a'), MalformedLine::kRefuse,
                  &rc).size(),
            1u);
  Parse(head + std::string(kMaxMappingPath, 'a'), MalformedLine::kRefuse, &rc);
  EXPECT_EQ(rc, -EINVAL);
}

TEST(ParseProcMaps, KeepsAtMostTheLimitOfMappings) {
  std::string text;
  char line[96];
  for (uint32_t i = 0; i <= kMaxMappings; ++i) {
    std::snprintf(line, sizeof(line), "%x-%x r-xp 00000000 00:00 0\n", i * 2, i * 2 + 1);
    text += line;
  }
  int rc = 1;
  EXPECT_EQ(Parse(text, MalformedLine::kSkip, &rc).size(), kMaxMappings);
  EXPECT_EQ(rc, 0);
  // The cut is said: one mapping over the limit, and none at the limit.
  std::vector<Mapping> kept;
  bool cut = false;
  EXPECT_EQ(ParseProcMaps(text, MalformedLine::kSkip, &kept, nullptr, &cut), 0);
  EXPECT_TRUE(cut);
  ASSERT_EQ(kept.size(), kMaxMappings);
  EXPECT_EQ(kept.back().start, uint64_t{kMaxMappings - 1} * 2);  // the lowest ones
  const std::string whole = text.substr(0, text.rfind('\n', text.size() - 2) + 1);
  EXPECT_EQ(ParseProcMaps(whole, MalformedLine::kSkip, &kept, nullptr, &cut), 0);
  EXPECT_FALSE(cut);
  EXPECT_EQ(kept.size(), kMaxMappings);
  ErrorDetail d;
  EXPECT_TRUE(Parse(text, MalformedLine::kRefuse, &rc, &d).empty());
  EXPECT_EQ(rc, -E2BIG);
  EXPECT_TRUE(Contains(d.message, "more than 65536")) << d.message;
}

TEST(ParseProcMaps, ReadsThisProcessesMapsStrictly) {
  std::ifstream in("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  int rc = 1;
  ErrorDetail d;
  const std::vector<Mapping> m = Parse(text, MalformedLine::kRefuse, &rc, &d);
  ASSERT_EQ(rc, 0) << d.message;
  ASSERT_FALSE(m.empty());
  for (size_t i = 1; i < m.size(); ++i) EXPECT_LE(m[i - 1].end, m[i].start);
}

TEST(KeepFileBacked, DropsAnonymousAndPseudoMappingsAndStripsDeleted) {
  std::vector<Mapping> m = Parse(
      "00400000-00401000 r--p 00000000 08:01 11 /bin/prog\n"
      "00401000-00402000 r-xp 00001000 08:01 11 /bin/prog\n"
      "7f0000000000-7f0000001000 r-xp 00002000 08:01 12 /tmp/my lib.so (deleted)\n"
      "7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]\n"
      "7ffe00000000-7ffe00001000 rwxp 00000000 00:00 0\n",
      MalformedLine::kRefuse);
  ASSERT_EQ(m.size(), 4u);
  KeepFileBacked(&m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].start, 0x401000u);
  EXPECT_EQ(m[0].end, 0x402000u);
  EXPECT_EQ(m[0].offset, 0x1000u);
  EXPECT_EQ(m[0].path, "/bin/prog");
  EXPECT_EQ(m[1].path, "/tmp/my lib.so");
  EXPECT_EQ(m[1].offset, 0x2000u);
}

// ---- the binary encoding ----

std::string Encode(const std::vector<Mapping>& maps) {
  std::string out;
  EXPECT_EQ(EncodeMappings(maps, SIZE_MAX, &out), maps.size());
  return out;
}

int Decode(const std::string& bytes, std::vector<Mapping>* out,
           ErrorDetail* d = nullptr) {
  return DecodeMappings(bytes, out, d);
}

TEST(MappingsCodec, RoundTrips) {
  for (const std::vector<Mapping>& maps : {std::vector<Mapping>{}, Sample()}) {
    const std::string bytes = Encode(maps);
    size_t want = kMappingsHeaderBytes;
    for (const Mapping& m : maps) want += kMappingFixedBytes + m.path.size();
    EXPECT_EQ(bytes.size(), want);
    std::vector<Mapping> back = {Mapping{}};  // replaced, not appended to
    ASSERT_EQ(Decode(bytes, &back), 0);
    EXPECT_EQ(back, maps);
  }
}

TEST(MappingsCodec, LayoutIsLittleEndianAsDocumented) {
  const std::vector<Mapping> one = {{0x0102030405060708ull, 0x1112131415161718ull, 0x21,
                                     "/x", true, true}};
  const std::string b = Encode(one);
  const unsigned char want[] = {1, 0, 0, 0,                           // count
                                8, 7, 6, 5, 4, 3, 2, 1,               // start
                                0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // end
                                0x21, 0, 0, 0, 0, 0, 0, 0,            // offset
                                3, 0, 0, 0,                           // flags
                                2, 0, 0, 0,                           // path_len
                                '/', 'x'};
  ASSERT_EQ(b.size(), sizeof(want));
  EXPECT_EQ(std::memcmp(b.data(), want, sizeof(want)), 0);
}

TEST(MappingsCodec, TruncatedInputAtEveryLengthIsAnError) {
  const std::string bytes = Encode(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<Mapping> out = Sample();
    ErrorDetail d;
    EXPECT_EQ(Decode(bytes.substr(0, n), &out, &d), -EINVAL) << n;
    EXPECT_TRUE(out.empty()) << n;
    EXPECT_NE(d.message[0], '\0') << n;
  }
  std::vector<Mapping> out;
  EXPECT_EQ(Decode(bytes + '\0', &out), -EINVAL);  // trailing bytes
}

TEST(MappingsCodec, RefusesAbsurdCountsBeforeAllocating) {
  for (uint32_t count : {kMaxMappings + 1, 0xffffffffu, 2u}) {
    // A count and one entry's worth of bytes (or fewer than the count needs).
    std::string bytes = Encode(Sample()).substr(0, kMappingsHeaderBytes + kMappingFixedBytes);
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(count >> (8 * i));
    std::vector<Mapping> out;
    ErrorDetail d;
    EXPECT_EQ(Decode(bytes, &out, &d), -EINVAL) << count;
    EXPECT_TRUE(Contains(d.message, "count")) << d.message;
  }
}

TEST(MappingsCodec, RefusesBadEntries) {
  const std::string good = Encode({Mapping{0x1000, 0x2000, 0, "/a", false, false}});
  auto with = [&](size_t at, uint32_t v) {
    std::string b = good;
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>(v >> (8 * i));
    return b;
  };
  std::vector<Mapping> out;
  EXPECT_EQ(Decode(with(4, 0x3000), &out), -EINVAL);  // start > end
  EXPECT_EQ(Decode(with(28, 8), &out), -EINVAL);       // unknown flag bit
  EXPECT_EQ(Decode(with(28, 0x80000000u), &out), -EINVAL);
  EXPECT_EQ(Decode(with(32, kMaxMappingPath + 1), &out), -EINVAL);
  EXPECT_EQ(Decode(with(32, 0xffffffffu), &out), -EINVAL);
  EXPECT_EQ(Decode(with(32, 3), &out), -EINVAL);  // longer than what is left
  EXPECT_EQ(Decode(with(32, 1), &out), -EINVAL);  // leaves a byte behind
  EXPECT_EQ(Decode(good, &out), 0);
}

// Build-ids (issue 17): flag bit 2, then a length byte and the id after the
// path; entries without one are encoded as before the field existed.
TEST(MappingsCodec, BuildIdsRoundTripAfterThePath) {
  std::vector<Mapping> maps = Sample();
  maps[0].build_id = std::string("\xc8\x91\x56\xeb\x00\xbf", 6);
  maps[1].build_id.assign(kMaxBuildIdBytes, '\x7f');
  const std::string bytes = Encode(maps);
  size_t want = kMappingsHeaderBytes;
  for (const Mapping& m : maps)
    want += kMappingFixedBytes + m.path.size() + (m.build_id.empty() ? 0 : 1 + m.build_id.size());
  EXPECT_EQ(bytes.size(), want);
  std::vector<Mapping> back;
  ASSERT_EQ(Decode(bytes, &back), 0);
  EXPECT_EQ(back, maps);
  // The first entry's layout: flags with bit 2, path, length, id.
  const size_t flags_at = kMappingsHeaderBytes + 24;
  EXPECT_EQ(static_cast<uint8_t>(bytes[flags_at]) & kMappingHasBuildId, kMappingHasBuildId);
  const size_t id_at = kMappingsHeaderBytes + kMappingFixedBytes + maps[0].path.size();
  EXPECT_EQ(static_cast<uint8_t>(bytes[id_at]), 6u);
  EXPECT_EQ(bytes.substr(id_at + 1, 6), maps[0].build_id);
  // An entry without a build-id is byte for byte what it was without the field.
  std::vector<Mapping> plain = Sample();
  std::vector<Mapping> one = {maps[0], plain[1]};
  EXPECT_EQ(Encode(one).substr(Encode(one).size() - (kMappingFixedBytes + plain[1].path.size())),
            Encode({plain[1]}).substr(kMappingsHeaderBytes));
  // Decoding stays bounded: every truncation of it is refused.
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<Mapping> out;
    EXPECT_EQ(Decode(bytes.substr(0, n), &out), -EINVAL) << n;
    EXPECT_TRUE(out.empty());
  }
}

TEST(MappingsCodec, RefusesBadBuildIds) {
  Mapping m{0x1000, 0x2000, 0, "/a", false, false};
  m.build_id = "\x01\x02";
  const std::string good = Encode({m});
  const size_t len_at = good.size() - 3;
  std::vector<Mapping> out;
  ASSERT_EQ(Decode(good, &out), 0);
  EXPECT_EQ(out[0].build_id, m.build_id);
  std::string b = good;
  b[len_at] = 0;  // no id: the flag would be a second spelling of "none"
  ErrorDetail d;
  EXPECT_EQ(Decode(b, &out, &d), -EINVAL);
  EXPECT_TRUE(Contains(d.message, "build-id")) << d.message;
  b[len_at] = static_cast<char>(kMaxBuildIdBytes + 1);
  EXPECT_EQ(Decode(b, &out), -EINVAL);
  b[len_at] = 3;  // longer than what is left
  EXPECT_EQ(Decode(b, &out), -EINVAL);
  b[len_at] = 1;  // leaves a byte behind
  EXPECT_EQ(Decode(b, &out), -EINVAL);
  // An over-long id is not encodable: it ends the encoded prefix.
  m.build_id.assign(kMaxBuildIdBytes + 1, 'x');
  EXPECT_FALSE(IsEncodableMapping(m));
  std::string enc;
  EXPECT_EQ(EncodeMappings({m}, SIZE_MAX, &enc), 0u);
}

TEST(MappingsCodec, EncodesTheLongestPrefixThatFits) {
  const std::vector<Mapping> maps = Sample();
  const size_t first = kMappingsHeaderBytes + kMappingFixedBytes + maps[0].path.size();
  std::string out;
  EXPECT_EQ(EncodeMappings(maps, first, &out), 1u);
  EXPECT_EQ(out.size(), first);
  EXPECT_EQ(EncodeMappings(maps, first - 1, &out), 0u);
  EXPECT_EQ(out.size(), kMappingsHeaderBytes);
  EXPECT_EQ(EncodeMappings(maps, 0, &out), 0u);
  EXPECT_EQ(out.size(), kMappingsHeaderBytes);
  std::vector<Mapping> back;
  ASSERT_EQ(Decode(out, &back), 0);
  EXPECT_TRUE(back.empty());
  // A mapping the decoder would refuse ends the prefix.
  std::vector<Mapping> bad = maps;
  bad[1].start = bad[1].end + 1;
  EXPECT_EQ(EncodeMappings(bad, SIZE_MAX, &out), 1u);
  bad[1] = maps[1];
  bad[1].path.assign(kMaxMappingPath + 1, 'p');
  EXPECT_EQ(EncodeMappings(bad, SIZE_MAX, &out), 1u);
  ASSERT_EQ(Decode(out, &back), 0);
  EXPECT_EQ(back.size(), 1u);
}

// A long list in parts (the helper's kMaps): each part encodes the longest
// run from `first` that fits, and the parts decoded one after the other are
// the list.
TEST(MappingsCodec, ALongListGoesInPartsThatMakeItUpAgain) {
  std::vector<Mapping> maps;
  for (int i = 0; i < 50; ++i) {
    Mapping m;
    m.start = 0x400000 + 0x2000 * static_cast<uint64_t>(i);
    m.end = m.start + 0x1000;
    m.offset = 0x1000 * static_cast<uint64_t>(i);
    m.path = "/lib/" + std::string(static_cast<size_t>(10 + i), 'a' + i % 26);
    if (i % 7 == 0) m.build_id = std::string(20, static_cast<char>(i));
    maps.push_back(m);
  }
  std::vector<Mapping> back;
  size_t at = 0, parts = 0;
  while (at < maps.size()) {
    std::string enc;
    const size_t k = EncodeMappings(maps, at, 300, &enc);
    ASSERT_GT(k, 0u) << "at " << at;
    EXPECT_LE(enc.size(), 300u);
    std::vector<Mapping> part;
    ASSERT_EQ(Decode(enc, &part), 0);
    ASSERT_EQ(part.size(), k);
    back.insert(back.end(), part.begin(), part.end());
    at += k;
    ++parts;
  }
  EXPECT_GT(parts, 5u);
  ASSERT_EQ(back.size(), maps.size());
  for (size_t i = 0; i < maps.size(); ++i) {
    EXPECT_EQ(back[i].start, maps[i].start) << i;
    EXPECT_EQ(back[i].path, maps[i].path) << i;
    EXPECT_EQ(back[i].build_id, maps[i].build_id) << i;
  }
  // Past the end: an empty part.
  std::string enc;
  EXPECT_EQ(EncodeMappings(maps, maps.size() + 3, SIZE_MAX, &enc), 0u);
  EXPECT_EQ(enc.size(), kMappingsHeaderBytes);
}

TEST(MappingsCodec, ParsedMapsAlwaysEncode) {
  std::ifstream in("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const std::vector<Mapping> m = Parse(text, MalformedLine::kSkip);
  ASSERT_FALSE(m.empty());
  std::vector<Mapping> back;
  ASSERT_EQ(Decode(Encode(m), &back), 0);
  EXPECT_EQ(back, m);
}

}  // namespace
}  // namespace pfm
