// Replays fuzz/corpus/NAME/* and fuzz/crashers/NAME/* through the fuzz
// entries, so every input a fuzzer once found (crash, hang, new coverage)
// keeps being checked by the ordinary test run, sanitizer configs included.
// The entries abort on a broken contract; a hang shows as a test timeout.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/fuzz_targets.h"

namespace pfm::fuzz {
namespace {

std::string Dir(const std::string& rel) {
  const char* src = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (src == nullptr) return "fuzz/" + rel;
  return std::string(src) + "/" + (ws ? ws : "__main__") + "/fuzz/" + rel;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

size_t ReplayAll(const std::string& name, int (*entry)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (const char* kind : {"corpus/", "crashers/"}) {
    for (const std::string& f : Files(Dir(kind + name))) {
      std::ifstream in(f, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SCOPED_TRACE(f);
      EXPECT_EQ(entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
      ++n;
    }
  }
  return n;
}

TEST(FuzzRegression, WireDecoderSurvivesEveryStoredInput) {
  EXPECT_GT(ReplayAll("wire", FuzzWireDecoder), 0u);
}

TEST(FuzzRegression, CompactDecoderSurvivesEveryStoredInput) {
  EXPECT_GT(ReplayAll("compact", FuzzCompactDecoder), 0u);
}

TEST(FuzzRegression, CompactBatchKeepsItsContractOnEveryStoredInput) {
  EXPECT_GT(ReplayAll("compact_batch", FuzzCompactBatch), 0u);
}

TEST(FuzzRegression, FusedBtsEncoderIsTheTranslationOnEveryStoredInput) {
  EXPECT_GT(ReplayAll("compact_bts", FuzzCompactBts), 0u);
}

// Includes the two hostile ring headers whose positions near 2^64 made
// Snapshot loop (practically) forever before the wrap fixes.
TEST(FuzzRegression, RingReaderSurvivesEveryStoredInput) {
  EXPECT_GE(ReplayAll("ring", FuzzRingReader), 2u);
}

TEST(FuzzRegression, MapsSurviveEveryStoredInput) {
  EXPECT_GT(ReplayAll("maps", FuzzMaps), 0u);
}

TEST(FuzzRegression, RspSurvivesEveryStoredInput) {
  EXPECT_GT(ReplayAll("rsp", FuzzRsp), 0u);
}

TEST(FuzzRegression, TraceFilesReadTheSameEveryWayOnEveryStoredInput) {
  EXPECT_GT(ReplayAll("trace", FuzzTraceFile), 0u);
}

// Entries must not crash on the degenerate inputs either.
TEST(FuzzRegression, EmptyAndOneByteInputsAreHarmless) {
  const uint8_t b[1] = {0xff};
  for (auto* entry : {FuzzWireDecoder, FuzzCompactDecoder, FuzzCompactBatch,
                      FuzzRingReader, FuzzMaps, FuzzRsp, FuzzTraceFile}) {
    EXPECT_EQ(entry(b, 0), 0);
    EXPECT_EQ(entry(b, 1), 0);
  }
}

}  // namespace
}  // namespace pfm::fuzz
