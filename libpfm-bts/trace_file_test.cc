#include "pfm/trace_file.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

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
    auto w = TraceWriter::Create(path, {{"session", 1}});
    ASSERT_TRUE(w.ok());
    std::vector<pfm_record> recs(10, Branch(1));
    ASSERT_TRUE(w->Append(recs.data(), 10).ok());
    ASSERT_TRUE(w->Append(recs.data(), 10).ok());
    // No Finish: as if the writer was killed.
  }
  // Chop the last block in half.
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(::truncate(path.c_str(), data.size() - 5 * 64), 0);
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->complete);
  EXPECT_EQ(t->records.size(), 10u);
  EXPECT_NE(t->cut_reason.find("cut short"), std::string::npos);
}

TEST(TraceFile, RefusesAFileThatIsNotATrace) {
  const std::string path = TempPath("not.pfm");
  std::ofstream(path) << "hello world, not a trace";
  EXPECT_EQ(ReadTrace(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTrace(TempPath("missing.pfm")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pfm
