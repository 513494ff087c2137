#include "pfm/trace_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "libpfm-bts/testing/peak_rss.h"

namespace pfm {
namespace {

std::string TempPath(const char* name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

pfm_record Branch(uint64_t i) {
  pfm_record r{};
  r.type = PFM_REC_BRANCH;
  r.time = 1000 + i;
  r.pid = r.tid = 42;
  r.u.branch.from = 0x400000 + i;
  r.u.branch.to = 0x400100 + i;
  return r;
}

TEST(TraceFile, CompleteFileRoundTrips) {
  const std::string path = TempPath("complete.pfm");
  auto w = TraceWriter::Create(path, {{"session", 3}});
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs;
  for (int i = 0; i < 1000; ++i) recs.push_back(Branch(i));
  ASSERT_TRUE(w->Append(recs.data(), 600).ok());
  ASSERT_TRUE(w->Append(recs.data() + 600, 400).ok());
  ASSERT_TRUE(w->Finish({{"exit_status", 0}}).ok());
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
  EXPECT_EQ(t->header.at("session").as_int64(), 3);
  ASSERT_EQ(t->records.size(), 1000u);
  EXPECT_EQ(t->records[999].u.branch.from, 0x400000u + 999);
  EXPECT_EQ(t->trailer.at("exit_status").as_int64(), 0);
}

TEST(TraceFile, FileCutMidBlockIsReadableUpToTheLastWholeBlock) {
  const std::string path = TempPath("cut.pfm");
  {
    // Fixed records: the cuts below are at byte offsets of that layout
    // (CompactBlockCutMidRecordKeepsItsWholeRecords is the compact case).
    auto w = TraceWriter::Create(path, {{"session", 1}}, TraceEncoding::kFixed);
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs(10, Branch(1));
    ASSERT_TRUE(w->Append(recs.data(), 10).ok());
    ASSERT_TRUE(w->Append(recs.data(), 10).ok());
    // No Finish: as if the writer was killed.
  }
  // Chop the last block in half, and then some bytes into a record: the
  // block's whole records are kept, only the partial one is lost.
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(::truncate(path.c_str(), data.size() - 5 * 64 - 20), 0);
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_EQ(t->records.size(), 10u + 4u);
  EXPECT_EQ(t->cut_reason.rfind("truncated record block", 0), 0u) << t->cut_reason;
  EXPECT_NE(t->cut_reason.find("4 of 10 records read"), std::string::npos) << t->cut_reason;
  EXPECT_EQ(t->cut_reason.find("cut short"), std::string::npos) << t->cut_reason;
  // Cut inside a block's 8-byte header: the blocks before it stay.
  const std::string path2 = TempPath("cut2.pfm");
  {
    std::ofstream out(path2, std::ios::binary);
    out << data.substr(0, data.size() - (8 + 10 * 64) + 4);
  }
  auto t2 = ReadTrace(path2);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ(t2->records.size(), 10u);
  EXPECT_EQ(t2->cut_reason.rfind("truncated block header", 0), 0u) << t2->cut_reason;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

ProcessMaps Maps(uint64_t time_ns, const std::string& path) {
  ProcessMaps m;
  m.time_ns = time_ns;
  m.pid = 4321;
  m.mappings = {Mapping{0x400000, 0x401000, 0x1000, path, false, false},
                Mapping{0x7f0000000000, 0x7f0000001000, 0, "", true, true}};
  return m;
}

// A complete file: header, records, maps at t=5, records, maps at t=9, trailer.
std::string WriteWithMaps(const char* name,
                          TraceEncoding encoding = TraceEncoding::kCompact) {
  const std::string path = TempPath(name);
  auto w = TraceWriter::Create(path, {{"session", 2}}, encoding);
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs = {Branch(1), Branch(2), Branch(40)};
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  EXPECT_TRUE(w->AppendMaps(Maps(5, "/bin/first")).ok());
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ProcessMaps second = Maps(9, "/bin/second");
  second.cut = true;  // a list over what one carries (ProcessMaps::cut)
  EXPECT_TRUE(w->AppendMaps(second).ok());
  EXPECT_TRUE(w->Finish({{"records", 6}}).ok());
  return path;
}

TEST(TraceFile, MapsBlocksRoundTripInOrder) {
  auto t = ReadTrace(WriteWithMaps("maps.pfm"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  EXPECT_EQ(t->records.size(), 6u);
  ASSERT_EQ(t->maps.size(), 2u);
  EXPECT_EQ(t->maps[0].time_ns, 5u);
  EXPECT_EQ(t->maps[0].pid, 4321);
  EXPECT_EQ(t->maps[0].mappings, Maps(5, "/bin/first").mappings);
  EXPECT_FALSE(t->maps[0].cut);
  EXPECT_EQ(t->maps[1].time_ns, 9u);
  EXPECT_EQ(t->maps[1].mappings, Maps(9, "/bin/second").mappings);
  EXPECT_TRUE(t->maps[1].cut);
  EXPECT_FALSE(t->trailer.contains("maps"));
}

TEST(TraceFile, AppendMapsRefusesWhatItCannotCarryAndWritesNothing) {
  const std::string path = TempPath("badmaps.pfm");
  auto w = TraceWriter::Create(path, {{"session", 1}});
  ASSERT_TRUE(w.ok());
  ProcessMaps bad = Maps(1, "/x");
  bad.mappings[1].start = bad.mappings[1].end + 1;
  absl::Status s = w->AppendMaps(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mapping 1"), std::string::npos) << s;
  bad.mappings[1] = Mapping{1, 2, 0, std::string(kMaxMappingPath + 1, 'p')};
  EXPECT_EQ(w->AppendMaps(bad).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w->Finish({}).ok());
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
  EXPECT_TRUE(t->maps.empty());
}

TEST(TraceFile, DamagedMapsBlockCutsTheTraceKeepingWhatCameBefore) {
  const std::string path = WriteWithMaps("damaged_maps.pfm");
  std::string data = ReadAll(path);
  // The second MAPS block's count: after magic+version (12), the header
  // block, a records block, the first MAPS block, a records block, then
  // 8 bytes of block header and 16 of fixed part.
  const std::string marker = "/bin/second";
  const size_t second_path = data.find(marker);
  ASSERT_NE(second_path, std::string::npos);
  const size_t count_at = second_path - kMappingFixedBytes - kMappingsHeaderBytes;
  ASSERT_EQ(data[count_at], 2);
  data[count_at + 3] = 0x7f;  // an absurd count
  WriteAll(path, data);
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_NE(t->cut_reason.find("damaged MAPS block"), std::string::npos) << t->cut_reason;
  EXPECT_EQ(t->records.size(), 6u);
  ASSERT_EQ(t->maps.size(), 1u);
  EXPECT_EQ(t->maps[0].mappings[0].path, "/bin/first");
  // The cut list's block (kind 5): a flag other than bit 0 is damage too.
  data = ReadAll(WriteWithMaps("reserved_maps.pfm"));
  ASSERT_EQ(data[count_at - 4], 1);  // the second block's flags: cut
  ASSERT_EQ(data[count_at - 24], 5);  // its kind
  data[count_at - 1] = 1;
  WriteAll(path, data);
  t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->cut_reason.find("unknown flags 0x1000001"), std::string::npos) << t->cut_reason;
  EXPECT_EQ(t->maps.size(), 1u);
  // A whole list's block (kind 4) keeps its word reserved: a flag there is
  // damage, cut or not.
  data = ReadAll(WriteWithMaps("reserved_maps.pfm"));
  data[count_at - 24] = 4;
  WriteAll(path, data);
  t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->cut_reason.find("reserved field is not 0"), std::string::npos) << t->cut_reason;
  EXPECT_EQ(t->maps.size(), 1u);
}

TEST(TraceFile, FileCutAtEveryByteIsReadUpToTheCutOrRefused) {
  for (TraceEncoding e : {TraceEncoding::kCompact, TraceEncoding::kFixed}) {
  const std::string data = ReadAll(WriteWithMaps("every.pfm", e));
  const std::string path = TempPath("every_cut.pfm");
  size_t last_records = 0;
  for (size_t n = 0; n < data.size(); ++n) {
    WriteAll(path, data.substr(0, n));
    auto t = ReadTrace(path);
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << n;
      continue;
    }
    EXPECT_FALSE(t->complete) << n;
    EXPECT_FALSE(t->cut_reason.empty()) << n;
    EXPECT_LE(t->maps.size(), 2u);
    // A longer prefix never reads fewer records, and those it reads are
    // the file's.
    EXPECT_GE(t->records.size(), last_records) << n;
    last_records = t->records.size();
    for (size_t i = 0; i < t->records.size(); ++i)
      EXPECT_EQ(t->records[i].u.branch.from, Branch(i % 3 == 2 ? 40 : i % 3 + 1).u.branch.from)
          << n << " " << i;
  }
  EXPECT_EQ(last_records, 6u);
  }
}

TEST(TraceFile, RefusesVersionOneNamingTheRemedy) {
  std::string data = ReadAll(WriteWithMaps("v1.pfm"));
  data[8] = 1;
  const std::string path = TempPath("v1_cut.pfm");
  WriteAll(path, data);
  absl::Status s = ReadTrace(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("trace version 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("re-record with this pfmctl"), std::string::npos) << s;
}

TEST(TraceFile, RefusesAFileThatIsNotATrace) {
  const std::string path = TempPath("not.pfm");
  std::ofstream(path) << "hello world, not a trace";
  EXPECT_EQ(ReadTrace(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTrace(TempPath("missing.pfm")).status().code(), absl::StatusCode::kNotFound);
}

TEST(TraceFile, DirectoriesAndDevicesAreRefusedNotRead) {
  absl::StatusOr<Trace> t = ReadTrace(TempPath(""));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("is a directory"), std::string::npos) << t.status();
  // /dev/zero never ends: it must not be read at all.
  t = ReadTrace("/dev/zero");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos) << t.status();
}

// Reads `path` with TraceReader into a Trace (records, maps, trailer, cut).
Trace ReadByReader(const std::string& path, TraceReader::Options o, size_t* max_piece) {
  Trace t;
  auto r = TraceReader::Open(path, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return t;
  t.header = r->header();
  for (;;) {
    auto e = r->Next();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || *e == TraceReader::Event::kEnd) break;
    if (*e == TraceReader::Event::kRecords) {
      EXPECT_FALSE(r->records().empty());
      if (max_piece) *max_piece = std::max(*max_piece, r->records().size());
      t.records.insert(t.records.end(), r->records().begin(), r->records().end());
    }
    if (*e == TraceReader::Event::kMaps) t.maps.push_back(r->maps());
    if (*e == TraceReader::Event::kTrailer) {
      t.trailer = r->trailer();
      t.complete = true;
    }
  }
  t.cut_reason = r->cut_reason();
  EXPECT_EQ(r->Next().value_or(TraceReader::Event::kRecords), TraceReader::Event::kEnd);
  return t;
}

TEST(TraceReader, HandsOutABigBlockInBoundedPiecesInOrder) {
  const std::string path = TempPath("big.pfm");
  auto w = TraceWriter::Create(path, {{"session", 7}});
  ASSERT_TRUE(w.ok());
  std::vector<pfm_record> recs;
  for (int i = 0; i < 3 * static_cast<int>(kTraceReaderChunk) + 5; ++i) recs.push_back(Branch(i));
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());  // one block
  ASSERT_TRUE(w->AppendMaps(Maps(3, "/bin/x")).ok());
  ASSERT_TRUE(w->Finish({{"records", recs.size()}}).ok());
  EXPECT_EQ(w->bytes(), ReadAll(path).size());
  size_t max_piece = 0;
  Trace t = ReadByReader(path, {}, &max_piece);
  EXPECT_TRUE(t.complete);
  EXPECT_EQ(t.header.at("session").as_int64(), 7);
  EXPECT_EQ(max_piece, kTraceReaderChunk);
  ASSERT_EQ(t.records.size(), recs.size());
  for (size_t i = 0; i < recs.size(); ++i) ASSERT_EQ(t.records[i].time, recs[i].time) << i;
  ASSERT_EQ(t.maps.size(), 1u);
}

// The reader, the skipping reader and ReadTrace agree at every cut: the same
// records, maps and reason.
TEST(TraceReader, AgreesWithReadTraceAndSkippingAtEveryCut) {
  for (TraceEncoding e : {TraceEncoding::kCompact, TraceEncoding::kFixed}) {
  SCOPED_TRACE(e == TraceEncoding::kCompact ? "compact" : "fixed");
  const std::string data = ReadAll(WriteWithMaps("agree.pfm", e));
  const std::string path = TempPath("agree_cut.pfm");
  for (size_t n = 0; n <= data.size(); ++n) {
    WriteAll(path, data.substr(0, n));
    auto whole = ReadTrace(path);
    auto opened = TraceReader::Open(path);
    ASSERT_EQ(whole.ok(), opened.ok()) << n;
    if (!whole.ok()) {
      EXPECT_EQ(whole.status(), opened.status()) << n;
      continue;
    }
    const Trace read = ReadByReader(path, {}, nullptr);
    TraceReader::Options skip;
    skip.skip_records = true;
    const Trace skipped = ReadByReader(path, skip, nullptr);
    EXPECT_EQ(read.records.size(), whole->records.size()) << n;
    EXPECT_EQ(read.cut_reason, whole->cut_reason) << n;
    EXPECT_EQ(skipped.cut_reason, whole->cut_reason) << n;
    EXPECT_EQ(read.complete, whole->complete) << n;
    EXPECT_EQ(skipped.complete, whole->complete) << n;
    EXPECT_EQ(read.maps.size(), whole->maps.size()) << n;
    EXPECT_EQ(skipped.maps.size(), whole->maps.size()) << n;
    EXPECT_TRUE(skipped.records.empty());
  }
  }
}

TEST(TraceReader, ManyEmptyBlocksDoNotExhaustTheStack) {
  const std::string path = TempPath("empty_blocks.pfm");
  auto w = TraceWriter::Create(path, {});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Finish({}).ok());
  std::string data = ReadAll(path);
  // Before the trailer: a million RECORDS blocks of no records.
  const size_t trailer_at = data.rfind(std::string("\x03\0\0\0", 4));
  ASSERT_NE(trailer_at, std::string::npos);
  std::string empty(8, '\0');
  empty[0] = 2;
  std::string blocks;
  for (int i = 0; i < 1000000; ++i) blocks += empty;
  data.insert(trailer_at, blocks);
  WriteAll(path, data);
  for (bool skip : {false, true}) {
    TraceReader::Options o;
    o.skip_records = skip;
    const Trace t = ReadByReader(path, o, nullptr);
    EXPECT_TRUE(t.complete) << t.cut_reason;
  }
}

TEST(TraceReader, HeaderMustComeFirst) {
  const std::string path = TempPath("noheader.pfm");
  // A RECORDS block (of no records) first.
  std::string data(kTraceMagic, 8);
  data += std::string("\x02\0\0\0", 4) + std::string("\x02\0\0\0", 4) +
          std::string("\0\0\0\0", 4);
  WriteAll(path, data);
  auto r = TraceReader::Open(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // A header that is not a JSON object.
  data = std::string(kTraceMagic, 8) + std::string("\x02\0\0\0", 4) +
         std::string("\x01\0\0\0\x05\0\0\0[1,2]", 13);
  WriteAll(path, data);
  r = TraceReader::Open(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("trace has no header"), std::string::npos) << r.status();
}

using testing::PeakRssGrowthKib;

// The file's bytes with `block` inserted after the header block.
std::string InsertAfterHeader(const std::string& data, const std::string& block) {
  uint32_t header_len;
  std::memcpy(&header_len, data.data() + 12 + 4, 4);
  std::string out = data;
  out.insert(12 + 8 + header_len, block);
  return out;
}

std::string BlockHeader(uint32_t kind, uint32_t len) {
  std::string h(8, '\0');
  std::memcpy(h.data(), &kind, 4);
  std::memcpy(h.data() + 4, &len, 4);
  return h;
}

// A later version's block of a kind this one does not know, binary: skipped
// by its length, the rest of the file read as usual, by every reader.
TEST(TraceReader, SkipsABlockOfAnUnknownKind) {
  const std::string path = TempPath("unknown_kind.pfm");
  {
    auto w = TraceWriter::Create(path, {{"session", 4}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs = {Branch(0), Branch(1), Branch(2)};
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish({{"records", 3}}).ok());
  }
  const std::string with_unknown =
      InsertAfterHeader(ReadAll(path), BlockHeader(7, 2) + std::string("\x01\x02", 2));
  WriteAll(path, with_unknown);
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  ASSERT_EQ(t->records.size(), 3u);
  EXPECT_EQ(t->records[2].time, Branch(2).time);
  TraceReader::Options skip;
  skip.skip_records = true;
  t = ReadTrace(path, skip);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete) << t->cut_reason;
  EXPECT_EQ(t->records_in_file, 3u);
  // Cut inside it: a truncated block, as for any other kind.
  const size_t unknown_at = with_unknown.find(BlockHeader(7, 2));
  WriteAll(path, with_unknown.substr(0, unknown_at + 8 + 1));
  t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_EQ(t->cut_reason, "truncated block at byte " + std::to_string(unknown_at));
}

// A header block that claims 64 MiB in a 20-byte file: no header, and no
// 64 MiB buffer made for the bytes that are not there.
TEST(TraceReader, OpenDoesNotAllocateAHeaderLengthTheFileDoesNotHave) {
  const std::string path = TempPath("huge_header.pfm");
  WriteAll(path, std::string(kTraceMagic, 8) + std::string("\x02\0\0\0", 4) +
                     BlockHeader(1, kMaxTraceBlock));
  ASSERT_EQ(ReadAll(path).size(), 20u);
  absl::StatusOr<TraceReader> r = absl::InternalError("not opened");
  const long growth = PeakRssGrowthKib([&] { r = TraceReader::Open(path); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("trace has no header"), std::string::npos) << r.status();
  if (growth < 0) GTEST_SKIP() << "cannot reset the peak RSS";
  EXPECT_LT(growth, 16 * 1024) << "KiB";
}

// A length over the limit is a damaged length, not the end of the file.
TEST(TraceReader, BlockLengthOverTheLimitIsDamagedNotTruncated) {
  const std::string path = TempPath("over_limit.pfm");
  {
    auto w = TraceWriter::Create(path, {{"session", 5}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs(2, Branch(1));
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  }
  std::string data = ReadAll(path);
  const size_t at = data.size();
  data += BlockHeader(2, kMaxTraceBlock + 64) + std::string(256, '\0');
  WriteAll(path, data);
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_EQ(t->records.size(), 2u);
  EXPECT_EQ(t->cut_reason, "damaged block at byte " + std::to_string(at) + ": length " +
                               std::to_string(kMaxTraceBlock + 64) + " is over the limit of " +
                               std::to_string(kMaxTraceBlock) + " bytes");
}

// As perf record keeps perf.data.old: a non-empty regular file is moved
// aside, replacing an older .old; nothing else is touched.
TEST(KeepAsOld, MovesANonEmptyFileAsideAndLeavesTheRestAlone) {
  const std::string path = TempPath("keep.pfm"), old = path + ".old";
  ::unlink(path.c_str());
  ::unlink(old.c_str());
  auto write = [](const std::string& p, const std::string& text) {
    std::ofstream(p, std::ios::trunc) << text;
  };
  auto read = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(KeepAsOld(path).ok()) << "missing: nothing to keep";
  EXPECT_NE(::access(old.c_str(), F_OK), 0);
  write(path, "");
  EXPECT_TRUE(KeepAsOld(path).ok());
  EXPECT_NE(::access(old.c_str(), F_OK), 0) << "an empty file is not kept";
  write(path, "first");
  ASSERT_TRUE(KeepAsOld(path).ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_EQ(read(old), "first");
  write(path, "second");
  ASSERT_TRUE(KeepAsOld(path).ok());
  EXPECT_EQ(read(old), "second") << "the older .old is replaced";
  // Not a regular file: left alone.
  const std::string fifo = TempPath("keep.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(KeepAsOld(fifo).ok());
  EXPECT_EQ(::access((fifo + ".old").c_str(), F_OK), -1);
  ::unlink(fifo.c_str());
  // A symlink (to a non-empty file) is not moved: -o /dev/stdout.
  write(path, "target");
  const std::string link = TempPath("keep.link");
  ::unlink(link.c_str());
  ::unlink((link + ".old").c_str());
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_TRUE(KeepAsOld(link).ok());
  EXPECT_EQ(::access((link + ".old").c_str(), F_OK), -1);
  EXPECT_EQ(read(link), "target");
  ::unlink(link.c_str());
  // A rename that fails says so and moves nothing: .old is a directory
  // that is not empty.
  write(path, "third");
  ::unlink(old.c_str());
  ASSERT_EQ(::mkdir(old.c_str(), 0700), 0);
  write(old + "/x", "x");
  const absl::Status st = KeepAsOld(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot keep " + path + " as " + old + ": "), std::string::npos)
      << st;
  EXPECT_EQ(read(path), "third");
  ::unlink((old + "/x").c_str());
  ::rmdir(old.c_str());
  ::unlink(path.c_str());
}


// ---- compact blocks (version 3) ----

// One record of every ring type, as a ring reader delivers them (unused
// union bytes zero), with cpu/pid/tid/misc changing; `i` varies them.
std::vector<pfm_record> EveryType(uint64_t i) {
  std::vector<pfm_record> out;
  for (uint16_t type = PFM_REC_BRANCH; type < PFM_REC_TYPE_MAX; ++type) {
    pfm_record r{};
    r.type = type;
    r.cpu = static_cast<uint16_t>(i % 3);
    r.misc = static_cast<uint32_t>(i & 1);
    r.time = 1000000 + i * 977 + type;
    r.pid = 100 + static_cast<uint32_t>(i % 2);
    r.tid = 200 + static_cast<uint32_t>(i % 5);
    for (int k = 0; k < 40; ++k) r.u.raw[k] = static_cast<uint8_t>(i * 31 + k * 7 + type);
    NormalizeRecord(&r);
    out.push_back(r);
  }
  return out;
}

uint32_t FileVersion(const std::string& path) {
  const std::string data = ReadAll(path);
  uint32_t v = 0;
  if (data.size() >= 12) std::memcpy(&v, data.data() + 8, 4);
  return v;
}

// The kinds of the file's blocks, in order.
std::vector<uint32_t> BlockKinds(const std::string& data) {
  std::vector<uint32_t> kinds;
  for (size_t at = 12; at + 8 <= data.size();) {
    uint32_t kind, len;
    std::memcpy(&kind, data.data() + at, 4);
    std::memcpy(&len, data.data() + at + 4, 4);
    kinds.push_back(kind);
    at += 8 + len;
  }
  return kinds;
}

bool SameBytes(const pfm_record& a, const pfm_record& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// `path` read by ReadTrace and by TraceReader (ReadByReader): both must
// give the same, so each test checks each (ReadTrace's error fails the test
// and gives an empty Trace).
std::vector<Trace> ReadBothWays(const std::string& path) {
  std::vector<Trace> out(2);
  absl::StatusOr<Trace> whole = ReadTrace(path);
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (whole.ok()) out[0] = std::move(*whole);
  out[1] = ReadByReader(path, {}, nullptr);
  return out;
}

// Every record comes back byte for byte, in order: those the codec carries
// in compact blocks, and those it would not give back exactly (garbage in
// the union bytes a type does not use, a type from a later version) in
// fixed blocks between them.
TEST(TraceFile, CompactFileGivesBackExactlyWhatWasAppended) {
  const std::string path = TempPath("compact_exact.pfm");
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 50; ++i) {
    std::vector<pfm_record> some = EveryType(i);
    recs.insert(recs.end(), some.begin(), some.end());
    if (i % 7 == 3) {
      pfm_record dirty = some[0];  // a branch with bytes past its flags
      dirty.u.raw[30] = 0x5a;
      recs.push_back(dirty);
      pfm_record later{};  // a type this version does not have
      later.type = PFM_REC_TYPE_MAX + 3;
      later.time = 77;
      std::memset(later.u.raw, 0xab, sizeof(later.u.raw));
      recs.push_back(later);
      pfm_record lost = some[PFM_REC_LOST - 1];  // LOST with bytes past its count
      lost.u.raw[12] = 1;
      recs.push_back(lost);
    }
  }
  auto w = TraceWriter::Create(path, {{"session", 9}});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(w->Finish({{"records", recs.size()}}).ok());
  EXPECT_EQ(w->records(), recs.size());
  EXPECT_EQ(w->bytes(), ReadAll(path).size());
  EXPECT_EQ(FileVersion(path), kTraceVersion);
  const std::vector<uint32_t> kinds = BlockKinds(ReadAll(path));
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 6u), 8);  // compact runs
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), 2u), 7);  // the odd ones
  for (const Trace& t : ReadBothWays(path)) {
    EXPECT_TRUE(t.complete) << t.cut_reason;
    ASSERT_EQ(t.records.size(), recs.size());
    for (size_t i = 0; i < recs.size(); ++i)
      ASSERT_TRUE(SameBytes(t.records[i], recs[i])) << i << " type " << recs[i].type;
  }
  TraceReader::Options skip;
  skip.skip_records = true;
  auto counted = ReadTrace(path, skip);
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(counted->records_in_file, recs.size());
}

// A branch stream like a real trace's (loops: repeated targets, steady
// times) takes a few bytes a branch instead of 64, and a big Append is cut
// into blocks the reader decodes piece by piece across its reads: every
// record back, in pieces of at most kTraceReaderChunk.
TEST(TraceFile, CompactBranchesTakeAFewBytesEachAndBigAppendsReadBack) {
  const std::string path = TempPath("compact_big.pfm");
  std::vector<pfm_record> recs;
  uint64_t t = 5000000;
  for (uint64_t i = 0; i < 600000; ++i) {
    pfm_record r{};
    r.type = PFM_REC_BRANCH;
    r.pid = r.tid = 42;
    t += 3 + (i % 7 == 0);
    r.time = t;
    const uint64_t loop = (i / 100) % 40;  // 40 loops of 100 iterations
    r.u.branch.from = 0x401000 + loop * 0x40 + (i % 3) * 8;
    r.u.branch.to = 0x401000 + loop * 0x40 + ((i + 1) % 3) * 8;
    r.misc = (i % 5 != 0) ? PFM_MISC_BRANCH_PREDICTED : 0;
    recs.push_back(r);
  }
  auto w = TraceWriter::Create(path, {{"session", 1}});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(w->Finish({}).ok());
  const std::string data = ReadAll(path);
  const double per_record = static_cast<double>(data.size()) / recs.size();
  EXPECT_LT(per_record, 4.0) << data.size() << " bytes";
  std::printf("compact: %.2f bytes a record\n", per_record);
  const std::vector<uint32_t> kinds = BlockKinds(data);
  EXPECT_GE(std::count(kinds.begin(), kinds.end(), 6u), 2);  // over kCompactTraceBlockBytes
  size_t max_piece = 0;
  const Trace back = ReadByReader(path, {}, &max_piece);
  EXPECT_TRUE(back.complete) << back.cut_reason;
  EXPECT_EQ(max_piece, kTraceReaderChunk);
  ASSERT_EQ(back.records.size(), recs.size());
  if (std::memcmp(back.records.data(), recs.data(), recs.size() * sizeof(pfm_record)) != 0) {
    for (size_t i = 0; i < recs.size(); ++i)
      ASSERT_TRUE(SameBytes(back.records[i], recs[i])) << i;
  }
  // The same records in a fixed file: 64 bytes each.
  const std::string fixed_path = TempPath("fixed_big.pfm");
  auto f = TraceWriter::Create(fixed_path, {{"session", 1}}, TraceEncoding::kFixed);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Append(recs.data(), recs.size()).ok());
  ASSERT_TRUE(f->Finish({}).ok());
  EXPECT_EQ(FileVersion(fixed_path), kTraceVersionFixed);
  struct stat st {};
  ASSERT_EQ(::stat(fixed_path.c_str(), &st), 0);
  EXPECT_GT(static_cast<size_t>(st.st_size), recs.size() * 64);
  EXPECT_LT(data.size() * 10, static_cast<size_t>(st.st_size));
  ::unlink(fixed_path.c_str());
  ::unlink(path.c_str());
}

// Cut inside a compact block's bytes, the block's records before the cut
// are read and only the one it splits is lost; the reason counts them.
TEST(TraceFile, CompactBlockCutMidRecordKeepsItsWholeRecords) {
  const std::string path = TempPath("compact_cut.pfm");
  std::vector<pfm_record> recs = EveryType(1);  // 12 records of varied sizes
  {
    auto w = TraceWriter::Create(path, {{"session", 1}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  }
  const std::string data = ReadAll(path);
  // Where the second block's records end, by the codec itself.
  std::vector<size_t> ends;
  CodecState st;
  size_t at = 0;
  for (const pfm_record& r : recs) {
    uint8_t buf[kMaxCompactRecordBytes];
    at += EncodeRecord(r, &st, buf);
    ends.push_back(at);
  }
  const size_t block2 = data.size() - (8 + 8 + at);
  for (size_t k = 0; k < recs.size(); ++k) {
    // One byte short of record k's end: records 0..k-1 whole.
    WriteAll(path, data.substr(0, block2 + 16 + ends[k] - 1));
    auto t = ReadTrace(path);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE(t->complete);
    ASSERT_EQ(t->records.size(), recs.size() + k) << k;
    for (size_t i = 0; i < k; ++i) EXPECT_TRUE(SameBytes(t->records[recs.size() + i], recs[i]));
    EXPECT_EQ(t->cut_reason, "truncated record block at byte " + std::to_string(block2) + ": " +
                                 std::to_string(k) + " of " + std::to_string(recs.size()) +
                                 " records read");
  }
}

// The compact block's own fields checked: flags, a count the bytes cannot
// hold, bytes that do not decode, padding, bytes after the last record.
// Each ends the reading as damage at that block, the records before it
// (and the block's own decoded ones) kept, nothing allocated for a count
// the file does not have.
TEST(TraceFile, DamagedCompactBlocksEndTheReadingSayingWhy) {
  const std::string path = TempPath("compact_damaged.pfm");
  {
    auto w = TraceWriter::Create(path, {{"session", 1}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs = {Branch(1), Branch(2)};
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
  }
  const std::string good = ReadAll(path);
  // A block of `count` records, flags `flags`, over `bytes`.
  auto block = [](uint32_t count, uint32_t flags, const std::string& bytes) {
    std::string b = BlockHeader(6, static_cast<uint32_t>(8 + bytes.size()));
    b.append(reinterpret_cast<const char*>(&count), 4);
    b.append(reinterpret_cast<const char*>(&flags), 4);
    return b + bytes;
  };
  // Two branches' bytes, by the codec.
  std::string two;
  {
    CodecState st;
    uint8_t buf[kMaxCompactRecordBytes];
    for (uint64_t i : {5, 6}) {
      const size_t n = EncodeRecord(Branch(i), &st, buf);
      two.append(reinterpret_cast<const char*>(buf), n);
    }
  }
  const std::string at = std::to_string(good.size());
  struct Case {
    std::string block;
    size_t records;  // read in all
    std::string reason;
  } cases[] = {
      {block(2, 1, two), 2, "damaged record block at byte " + at + ": unknown flags 0x1"},
      {block(4000000000u, 0, two), 2,
       "damaged record block at byte " + at + ": 4000000000 records in " +
           std::to_string(two.size()) + " bytes"},
      {block(1, 0, ""), 2, "damaged record block at byte " + at + ": 1 records in 0 bytes"},
      {BlockHeader(6, 3) + "abc", 2,
       "damaged record block at byte " + at + ": 3 bytes, shorter than its fixed part"},
      {block(3, 0, two + std::string(1, '\0')), 4,
       "damaged record block at byte " + at + ": record 3 of 3 is padding"},
      {block(3, 0, two + std::string("\x0d\x0d", 2)), 4,
       "damaged record block at byte " + at + ": record 3 of 3 does not decode"},
      {block(1, 0, two), 3,
       "damaged record block at byte " + at + ": bytes after its last record (1)"},
      {block(3, 0, two), 4,
       "damaged record block at byte " + at + ": its bytes end after record 2 of 3"},
  };
  // Cut by the end of the file, but a PAD well before the cut: damage,
  // not a cut record.
  {
    const std::string b = block(3, 0, two + std::string(1, '\0') + std::string(200, '\x01'));
    WriteAll(path, good + b.substr(0, 16 + two.size() + 1 + 100));
    auto t = ReadTrace(path);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->records.size(), 4u);
    EXPECT_EQ(t->cut_reason, "damaged record block at byte " + at + ": record 3 of 3 is padding");
  }
  for (const Case& c : cases) {
    WriteAll(path, good + c.block + BlockHeader(3, 2) + "{}");
    for (const Trace& t : ReadBothWays(path)) {
      EXPECT_FALSE(t.complete) << c.reason;
      EXPECT_EQ(t.records.size(), c.records) << c.reason;
      EXPECT_EQ(t.cut_reason, c.reason);
    }
  }
}

// The skipping pass decodes compact blocks, so it stops where a reading
// stops; with unchecked_compact (a pass for the MAPS blocks only) it counts
// them by their prefix, unread, and goes on past bytes that do not decode.
TEST(TraceReader, SkippingChecksCompactBlocksUnlessToldNotTo) {
  const std::string path = TempPath("compact_skip.pfm");
  std::string bad_block;
  {
    auto w = TraceWriter::Create(path, {{"session", 1}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs = {Branch(1), Branch(2), Branch(3)};
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->AppendMaps(Maps(4, "/bin/x")).ok());
    ASSERT_TRUE(w->Finish({}).ok());
  }
  std::string data = ReadAll(path);
  // The compact block's last byte given a continuation bit: the third
  // record's last varint runs past the block, so it no longer decodes.
  const std::vector<uint32_t> kinds = BlockKinds(data);
  ASSERT_EQ(kinds[1], 6u);
  uint32_t header_len, block_len;
  std::memcpy(&header_len, data.data() + 16, 4);
  const size_t block_at = 12 + 8 + header_len;
  std::memcpy(&block_len, data.data() + block_at + 4, 4);
  data[block_at + 8 + block_len - 1] = static_cast<char>(data[block_at + 8 + block_len - 1] | 0x80);
  WriteAll(path, data);
  TraceReader::Options checked;
  checked.skip_records = true;
  auto c = ReadTrace(path, checked);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->complete);
  EXPECT_EQ(c->records_in_file, 2u);
  EXPECT_TRUE(c->maps.empty());
  EXPECT_EQ(c->cut_reason, ReadTrace(path)->cut_reason);
  EXPECT_NE(c->cut_reason.find("record 3 of 3 does not decode"), std::string::npos)
      << c->cut_reason;
  TraceReader::Options unchecked = checked;
  unchecked.unchecked_compact = true;
  auto u = ReadTrace(path, unchecked);
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u->complete) << u->cut_reason;
  EXPECT_EQ(u->records_in_file, 3u);
  EXPECT_EQ(u->maps.size(), 1u);
  // Cut inside the block, both decode what is there: the same cut.
  WriteAll(path, data.substr(0, block_at + 8 + block_len - 2));
  c = ReadTrace(path, checked);
  u = ReadTrace(path, unchecked);
  ASSERT_TRUE(c.ok() && u.ok());
  EXPECT_EQ(u->cut_reason, c->cut_reason);
  EXPECT_EQ(u->records_in_file, c->records_in_file);
  EXPECT_NE(c->cut_reason.find("truncated record block"), std::string::npos) << c->cut_reason;
}

// Any byte of a compact file changed: the reader reads or cuts, never
// crashes or reads past what it has (ASan, --config=asan), and never hands
// out more records than the blocks declare.
TEST(TraceFile, CompactFileWithAnyByteChangedIsReadOrCut) {
  const std::string data = ReadAll(WriteWithMaps("flip.pfm"));
  const std::string path = TempPath("flip_one.pfm");
  for (size_t n = 12; n < data.size(); ++n) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::string d = data;
      d[n] = static_cast<char>(d[n] ^ x);
      WriteAll(path, d);
      auto t = ReadTrace(path);
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << n;
        continue;
      }
      EXPECT_LE(t->records.size(), 1024u) << n;
      if (!t->complete) {
        EXPECT_FALSE(t->cut_reason.empty()) << n;
      }
    }
  }
}

// Version 2 (fixed records only) is still read; a version this reader does
// not know is refused naming the versions it reads.
TEST(TraceFile, ReadsVersionTwoAndRefusesALaterOne) {
  const std::string v2 = WriteWithMaps("v2.pfm", TraceEncoding::kFixed);
  EXPECT_EQ(FileVersion(v2), 2u);
  auto t = ReadTrace(v2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->complete);
  EXPECT_EQ(t->records.size(), 6u);
  std::string data = ReadAll(v2);
  data[8] = 4;
  WriteAll(v2, data);
  absl::Status s = ReadTrace(v2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("trace version 4 (this pfmctl reads versions 2 and 3)"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace pfm
