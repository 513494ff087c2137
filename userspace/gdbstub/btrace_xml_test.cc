#include "userspace/gdbstub/btrace_xml.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pfm::gdbstub {
namespace {

// As gdbserver's read_btrace writes them.
const std::string kHead =
    "<!DOCTYPE btrace SYSTEM \"btrace.dtd\">\n"
    "<btrace version=\"1.0\">\n";
const std::string kTail = "</btrace>\n";

TEST(BtsXml, NoBranchesIsOneBlockEndingAtPcForDelta) {
  EXPECT_EQ(BtsXml({}, 0x401000, BtraceRead::kDelta),
            kHead + "<block begin=\"0x0\" end=\"0x401000\"/>\n" + kTail);
}

// The begin-0 block is dropped for whole-trace reads, as linux_read_bts does.
TEST(BtsXml, NoBranchesIsEmptyForWholeTraceReads) {
  EXPECT_EQ(BtsXml({}, 0x401000, BtraceRead::kAll), kHead + kTail);
  EXPECT_EQ(BtsXml({}, 0x401000, BtraceRead::kNew), kHead + kTail);
  EXPECT_EQ(BtsXml({}, 0x401000, BtraceRead::kAll), EmptyBtraceXml());
}

TEST(BtsXml, OneBranchSplitsTheTraceInTwoNewestFirst) {
  const std::vector<Branch> b = {{0x401010, 0x401100}};
  const std::string newest = "<block begin=\"0x401100\" end=\"0x401120\"/>\n";
  EXPECT_EQ(BtsXml(b, 0x401120, BtraceRead::kDelta),
            kHead + newest + "<block begin=\"0x0\" end=\"0x401010\"/>\n" + kTail);
  EXPECT_EQ(BtsXml(b, 0x401120, BtraceRead::kAll), kHead + newest + kTail);
}

TEST(BtsXml, ThreeBranchesGiveFourBlocksNewestFirst) {
  const std::vector<Branch> b = {
      {0x1010, 0x1100},  // oldest
      {0x1110, 0x1200},
      {0x1210, 0x7fffffffe300},  // newest
  };
  const std::string blocks =
      "<block begin=\"0x7fffffffe300\" end=\"0x7fffffffe320\"/>\n"
      "<block begin=\"0x1200\" end=\"0x1210\"/>\n"
      "<block begin=\"0x1100\" end=\"0x1110\"/>\n";
  EXPECT_EQ(BtsXml(b, 0x7fffffffe320, BtraceRead::kDelta),
            kHead + blocks + "<block begin=\"0x0\" end=\"0x1010\"/>\n" + kTail);
  EXPECT_EQ(BtsXml(b, 0x7fffffffe320, BtraceRead::kNew), kHead + blocks + kTail);
}

TEST(BtsXml, FullWidthAddressesPrintInLowerCaseHex) {
  const std::vector<Branch> b = {{0xFFFFFFFFFFFFFFFF, 0xABCDEF0123456789}};
  EXPECT_EQ(BtsXml(b, 0xABCDEF0123456790, BtraceRead::kAll),
            kHead + "<block begin=\"0xabcdef0123456789\" end=\"0xabcdef0123456790\"/>\n" + kTail);
}

TEST(ParseBtraceRead, KnowsTheThreeAnnexes) {
  BtraceRead r = BtraceRead::kAll;
  ASSERT_TRUE(ParseBtraceRead("delta", &r));
  EXPECT_EQ(r, BtraceRead::kDelta);
  ASSERT_TRUE(ParseBtraceRead("new", &r));
  EXPECT_EQ(r, BtraceRead::kNew);
  ASSERT_TRUE(ParseBtraceRead("all", &r));
  EXPECT_EQ(r, BtraceRead::kAll);
  for (const char* bad : {"", "All", "alll", "delta "}) EXPECT_FALSE(ParseBtraceRead(bad, &r));
}

TEST(BtraceConfXml, NamesTheBtsBufferSize) {
  EXPECT_EQ(BtraceConfXml(0x10000),
            "<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n"
            "<bts size=\"0x10000\" />\n"
            "</btrace-conf>\n");
}

TEST(BtraceConfXml, HasNoFormatWhenNotRecording) {
  EXPECT_EQ(BtraceConfXml(0),
            "<!DOCTYPE btrace-conf SYSTEM \"btrace-conf.dtd\">\n"
            "<btrace-conf version=\"1.0\">\n"
            "</btrace-conf>\n");
}

TEST(XferSlice, MarksMoreWithMAndTheLastChunkWithL) {
  std::string reply;
  ASSERT_TRUE(XferSlice("abcdef", 0, 4, &reply));
  EXPECT_EQ(reply, "mabcd");
  ASSERT_TRUE(XferSlice("abcdef", 4, 4, &reply));
  EXPECT_EQ(reply, "lef");
  ASSERT_TRUE(XferSlice("abcdef", 0, 6, &reply));
  EXPECT_EQ(reply, "labcdef");
  ASSERT_TRUE(XferSlice("abcdef", 0, 5, &reply));
  EXPECT_EQ(reply, "mabcde");
  ASSERT_TRUE(XferSlice("abcdef", 2, UINT64_MAX, &reply));
  EXPECT_EQ(reply, "lcdef");
}

TEST(XferSlice, AtOrPastTheEndIsJustL) {
  std::string reply;
  ASSERT_TRUE(XferSlice("abcdef", 6, 1, &reply));
  EXPECT_EQ(reply, "l");
  ASSERT_TRUE(XferSlice("abcdef", UINT64_MAX, 4096, &reply));
  EXPECT_EQ(reply, "l");
  ASSERT_TRUE(XferSlice("", 0, 4096, &reply));
  EXPECT_EQ(reply, "l");
}

TEST(XferSlice, RefusesZeroLengthAndKeepsBinaryBytes) {
  std::string reply = "untouched";
  EXPECT_FALSE(XferSlice("abc", 0, 0, &reply));
  EXPECT_EQ(reply, "untouched");
  ASSERT_TRUE(XferSlice(std::string("\0$#", 3), 0, 2, &reply));
  EXPECT_EQ(reply, std::string("m\0$", 3));
}

// Reading a document in chunks the way GDB does gives it back whole.
TEST(XferSlice, ChunksReassembleTheDocument) {
  const std::string doc = BtsXml({{1, 2}, {3, 4}, {5, 6}}, 7, BtraceRead::kDelta);
  for (uint64_t chunk : {1u, 7u, 64u, 4096u}) {
    std::string got, reply;
    uint64_t offset = 0;
    while (true) {
      ASSERT_TRUE(XferSlice(doc, offset, chunk, &reply));
      got += reply.substr(1);
      offset += reply.size() - 1;
      if (reply[0] == 'l') break;
      ASSERT_EQ(reply[0], 'm');
    }
    EXPECT_EQ(got, doc) << chunk;
  }
}

}  // namespace
}  // namespace pfm::gdbstub
