#include "userspace/pfmctl/export.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "libpfm-bts/perf_data.h"
#include "pfm/trace_file.h"

namespace pfm {
namespace {

std::string TempPath(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

pfm_record Branch(uint64_t time) {
  pfm_record r{};
  r.type = PFM_REC_BRANCH;
  r.time = time;
  r.pid = r.tid = 42;
  r.u.branch.from = 0x401000;
  r.u.branch.to = 0x401100;
  return r;
}

// A trace of `n` branches; finished (with a trailer) or not.
std::string WriteTrace(const std::string& name, int n, bool finish,
                       const std::vector<ProcessMaps>& maps = {},
                       TraceEncoding encoding = TraceEncoding::kCompact) {
  const std::string path = TempPath(name);
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(
      path, {{"kind", "record"}, {"command", "prog"}, {"pid", 42}}, encoding);
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<pfm_record> recs;
  for (int i = 0; i < n; ++i) recs.push_back(Branch(1000 + i));
  EXPECT_TRUE(w->Append(recs.data(), recs.size()).ok());
  for (const ProcessMaps& m : maps) EXPECT_TRUE(w->AppendMaps(m).ok());
  if (finish) {
    EXPECT_TRUE(w->Finish({{"records", n}}).ok());
  }
  return path;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

TEST(Export, FormatsAreOneTable) {
  EXPECT_EQ(ExportFormatList(), "perf, chrome-json");
  EXPECT_TRUE(CheckExportFormat("perf").ok());
  EXPECT_TRUE(CheckExportFormat("chrome-json").ok());
  absl::Status s = CheckExportFormat("ctf");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown export format 'ctf' (formats: perf, chrome-json)");
}

TEST(Export, UnknownFormatIsRefusedBeforeAnythingIsWritten) {
  const std::string trace = WriteTrace("fmt.pfmtrace", 3, true);
  const std::string out = TempPath("fmt.out");
  absl::StatusOr<ExportResult> r = ExportTrace({trace, out, "json", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("formats: perf, chrome-json"), std::string::npos);
  EXPECT_EQ(FileSize(out), 0u);
}

TEST(Export, CompleteTraceIsExportedWithTheFormatsSummary) {
  ProcessMaps m;
  m.pid = 42;
  m.mappings.push_back({0x401000, 0x402000, 0x1000, "/bin/prog", false, false});
  ProcessMaps later_empty;  // an empty list does not hide the earlier one
  later_empty.pid = 42;
  const std::string trace = WriteTrace("ok.pfmtrace", 5, true, {m, later_empty});
  absl::StatusOr<ExportResult> r =
      ExportTrace({trace, TempPath("ok.data"), "perf", {"pfmctl", "export"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 5u);
  EXPECT_EQ(boost::json::serialize(r->detail["samples"]), "5");
  EXPECT_EQ(boost::json::serialize(r->detail["side_records"]), "2") << "COMM and one MMAP2";
  EXPECT_EQ(boost::json::serialize(r->detail["events"]), R"(["branches"])");
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Export, PerfStreamsTheFileAndWritesWhatTheWholeTraceInMemoryGives) {
  // 200,000 branches of 3 threads, out of time order within and across the
  // reorder's chunks (64 Ki records), in 1,000-record pieces, with an exec's
  // MAPS block halfway, and counters in the trailer.
  const std::string path = TempPath("big.pfmtrace");
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(
      path, {{"kind", "record"}, {"command", "prog arg"}, {"pid", 42}});
  ASSERT_TRUE(w.ok()) << w.status();
  ProcessMaps m1, m2;
  m1.pid = m2.pid = 42;
  m1.mappings.push_back({0x401000, 0x402000, 0x1000, "/bin/prog", false, false});
  m2.mappings.push_back({0x401000, 0x403000, 0x1000, "/bin/other", false, false});
  m2.time_ns = 1000 + 100000 * 5;
  ASSERT_TRUE(w->AppendMaps(m1).ok());
  uint64_t seed = 7;
  std::vector<pfm_record> piece;
  for (int i = 0; i < 200000; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    pfm_record r = Branch(1000 + i * 5 + (seed >> 40) % 3000);
    r.tid = 42 + static_cast<uint32_t>((seed >> 20) % 3);
    r.u.branch.from = 0x401000 + i % 4096;
    piece.push_back(r);
    if (piece.size() == 1000) {
      ASSERT_TRUE(w->Append(piece.data(), piece.size()).ok());
      piece.clear();
    }
    if (i == 100000) {
      ASSERT_TRUE(w->AppendMaps(m2).ok());
    }
  }
  ASSERT_TRUE(w->Finish({{"records", 200000},
                         {"counters", boost::json::array{{{"event", "task-clock"},
                                                          {"value", 123},
                                                          {"time_enabled", 10},
                                                          {"time_running", 10}}}}})
                  .ok());
  const std::vector<std::string> cmdline = {"pfmctl", "export", path};
  absl::StatusOr<ExportResult> r =
      ExportTrace({path, TempPath("big.data"), "perf", cmdline});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 200000u);
  EXPECT_EQ(boost::json::serialize(r->detail["samples"]), "200000");
  EXPECT_EQ(boost::json::serialize(r->detail["sort_runs"]), "0");
  const uint64_t held = r->detail["peak_held_records"].as_uint64();
  EXPECT_GT(held, 0u);
  EXPECT_LT(held, 4000u) << "only what overlaps the next chunk waits";

  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  PerfDataOptions o;
  o.maps = &t->maps.back();
  for (const ProcessMaps& pm : t->maps) o.all_maps.push_back(&pm);
  o.cmdline = cmdline;
  ASSERT_TRUE(WritePerfData(*t, o, TempPath("big_in_memory.data")).ok());
  const std::string streamed = FileBytes(TempPath("big.data"));
  EXPECT_GT(streamed.size(), 200000u * 48);
  EXPECT_TRUE(streamed == FileBytes(TempPath("big_in_memory.data")))
      << "the streamed export differs from the in-memory one";
}

TEST(Export, CutShortTraceIsExportedAsFarAsItReadsThenDataLoss) {
  const std::string trace = WriteTrace("cut.pfmtrace", 4, false);
  const std::string out = TempPath("cut.data");
  absl::StatusOr<ExportResult> r = ExportTrace({trace, out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("cut short"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("exported 4 records to " + out), std::string::npos)
      << r.status();
  EXPECT_GT(FileSize(out), 104u) << "written before the error";

  // Damage inside a block: the records before it are exported. (Fixed
  // records, whose block length is laid out below.)
  std::string bytes;
  {
    std::ifstream in(WriteTrace("damaged.pfmtrace", 4, true, {}, TraceEncoding::kFixed),
                     std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string damaged = TempPath("damaged2.pfmtrace");
  // The RECORDS block after the header gets a length of 65: not whole
  // records. Blocks: u32 kind, u32 length, payload; the header's is first.
  uint32_t header_len;
  std::memcpy(&header_len, bytes.data() + 12 + 4, 4);
  const size_t at = 12 + 8 + header_len + 4;
  const uint32_t bad = 65;
  bytes.replace(at, 4, reinterpret_cast<const char*>(&bad), 4);
  std::ofstream(damaged, std::ios::binary) << bytes;
  r = ExportTrace({damaged, out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("exported 0 records"), std::string::npos) << r.status();
}

TEST(Export, WhatIsNotATraceIsRefusedClearly) {
  const std::string out = TempPath("x.data");
  absl::StatusOr<ExportResult> r = ExportTrace({TempPath("missing.pfmtrace"), out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  r = ExportTrace({TempPath(""), out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is a directory"), std::string::npos) << r.status();
  r = ExportTrace({"/dev/zero", out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos) << r.status();
  const std::string junk = TempPath("junk.pfmtrace");
  std::ofstream(junk) << "not a trace at all";
  r = ExportTrace({junk, out, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a pfm trace file"), std::string::npos);
}

TEST(Export, TheTraceIsNeverItsOwnOutput) {
  const std::string trace = WriteTrace("self.pfmtrace", 3, true);
  const uint64_t size = FileSize(trace);
  absl::StatusOr<ExportResult> r = ExportTrace({trace, trace, "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FileSize(trace), size);
  r = ExportTrace({trace, TempPath("no/such/dir/out.data"), "perf", {}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// Every format's output that cannot be created is the same error, saying
// why (docs/export.md: exit 2, as a usage error).
TEST(Export, AnOutputThatCannotBeCreatedIsInvalidArgumentSayingWhyInEveryFormat) {
  const std::string trace = WriteTrace("noout.pfmtrace", 3, true);
  const std::string out = TempPath("no/such/dir/out");
  for (const char* format : {"perf", "chrome-json"}) {
    absl::StatusOr<ExportResult> r = ExportTrace({trace, out, format, {}});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << format << r.status();
    EXPECT_EQ(r.status().message(), "cannot write " + out + ": No such file or directory")
        << format;
  }
}

// A binary whose build-id is not the recorded one is a warning line the
// caller prints (text mode), as well as part of the detail (--json).
TEST(Export, ChangedBinariesAreWarningLinesForTheCaller) {
  const std::string bin = TempPath("rebuilt_prog");
  std::ofstream(bin) << "not the binary that ran";
  ProcessMaps m;
  m.pid = 42;
  m.mappings.push_back({0x401000, 0x402000, 0x1000, bin, false, false});
  m.mappings.back().build_id = std::string("\x12\x34\xab\xcd", 4);
  const std::string trace = WriteTrace("rebuilt.pfmtrace", 3, true, {m});
  absl::StatusOr<ExportResult> r = ExportTrace({trace, TempPath("rebuilt.data"), "perf", {}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->warnings,
            (std::vector<std::string>{
                bin + ": build-id 1234abcd when recorded, none now (the file changed since "
                      "the recording)"}));
  EXPECT_EQ(boost::json::serialize(r->detail["warnings"]),
            boost::json::serialize(boost::json::array{boost::json::value(r->warnings[0])}));

  r = ExportTrace({WriteTrace("unchanged.pfmtrace", 3, true), TempPath("unchanged.data"),
                   "perf", {}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->warnings.empty());
}

}  // namespace
}  // namespace pfm
