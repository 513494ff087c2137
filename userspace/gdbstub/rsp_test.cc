#include "userspace/gdbstub/rsp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pfm::gdbstub {
namespace {

using Kind = RspEvent::Kind;

std::vector<RspEvent> FeedAll(PacketReader* r, const std::string& bytes) {
  std::vector<RspEvent> out;
  r->Feed(bytes.data(), bytes.size(), &out);
  return out;
}

std::vector<Kind> Kinds(const std::vector<RspEvent>& events) {
  std::vector<Kind> k;
  for (const RspEvent& e : events) k.push_back(e.kind);
  return k;
}

std::string Checksum(const std::string& escaped) {
  uint8_t sum = 0;
  for (char c : escaped) sum = static_cast<uint8_t>(sum + static_cast<uint8_t>(c));
  return ToHex(&sum, 1);
}

// ---- PacketReader ----

TEST(PacketReader, DeliversPacketsAcksAndInterrupts) {
  PacketReader r(64);
  const auto ev = FeedAll(&r, "+$g#67-\x03$?#3f");
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kAck, Kind::kPacket, Kind::kNack,
                                          Kind::kInterrupt, Kind::kPacket}));
  EXPECT_EQ(ev[1].payload, "g");
  EXPECT_EQ(ev[4].payload, "?");
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(PacketReader, AcceptsEitherCaseChecksum) {
  PacketReader r(64);
  const auto ev = FeedAll(&r, "$OK#9a$OK#9A");
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kPacket, Kind::kPacket}));
  EXPECT_EQ(ev[1].payload, "OK");
}

TEST(PacketReader, GivesTheSameEventsHoweverTheStreamIsSplit) {
  const std::string stream = "+$m401000,10#" + Checksum("m401000,10") + "\x03junk-" +
                             EncodePacket("X10,4:$#}*") + "$g#00";
  PacketReader whole(64);
  const auto expected = FeedAll(&whole, stream);
  ASSERT_EQ(Kinds(expected), (std::vector<Kind>{Kind::kAck, Kind::kPacket, Kind::kInterrupt,
                                                Kind::kGarbage, Kind::kNack, Kind::kPacket,
                                                Kind::kBadChecksum}));
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    PacketReader r(64);
    std::vector<RspEvent> got;
    r.Feed(stream.data(), cut, &got);
    r.Feed(stream.data() + cut, stream.size() - cut, &got);
    ASSERT_EQ(Kinds(got), Kinds(expected)) << "cut at " << cut;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].payload, expected[i].payload);
  }
  PacketReader bytewise(64);
  std::vector<RspEvent> got;
  for (char c : stream) bytewise.Feed(&c, 1, &got);
  EXPECT_EQ(Kinds(got), Kinds(expected));
}

TEST(PacketReader, ReportsBadChecksumsAndCarriesOn) {
  PacketReader r(64);
  const auto ev = FeedAll(&r, "$g#68$g#6z$g#zz$g#67");
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kBadChecksum, Kind::kBadChecksum,
                                          Kind::kBadChecksum, Kind::kPacket}));
  EXPECT_EQ(ev[0].payload, "g");
}

// A '$' where a checksum digit belongs starts the next packet rather than
// being swallowed as a digit.
TEST(PacketReader, ChecksumCutShortByANewPacket) {
  PacketReader r(64);
  const auto ev = FeedAll(&r, "$g#6$g#67$?#$?#3f");
  EXPECT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kBadChecksum, Kind::kPacket,
                                          Kind::kBadChecksum, Kind::kPacket}));
}

TEST(PacketReader, DollarInsideAPacketRestartsIt) {
  PacketReader r(64);
  const auto ev = FeedAll(&r, "$abc$g#67");
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kGarbage, Kind::kPacket}));
  EXPECT_EQ(ev[1].payload, "g");
}

TEST(PacketReader, ReportsOneGarbageEventPerRun) {
  PacketReader r(64);
  auto ev = FeedAll(&r, "abc");
  ev = FeedAll(&r, "def$g#67xyz+#");
  EXPECT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kPacket, Kind::kGarbage, Kind::kAck,
                                          Kind::kGarbage}));
}

// 0x03 and '+' inside a packet are data (X carries raw binary).
TEST(PacketReader, ControlBytesInsideAPacketArePayload) {
  PacketReader r(64);
  const std::string payload = "X10,3:\x03+-";
  const auto ev = FeedAll(&r, "$" + payload + "#" + Checksum(payload));
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kPacket}));
  EXPECT_EQ(ev[0].payload, payload);
}

TEST(PacketReader, DropsOversizedPacketsWithoutBufferingThemAndResyncs) {
  PacketReader r(4);
  const std::string big = "$0123456789+\x03-abc#00\x03$g#67";
  std::vector<RspEvent> ev;
  for (char c : big) {
    r.Feed(&c, 1, &ev);
    EXPECT_LE(r.buffered(), 4u);
  }
  // The body's '+', 0x03 and '-' are not events; the 0x03 after it is.
  EXPECT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kOversized, Kind::kInterrupt, Kind::kPacket}));

  // Exactly max_payload fits.
  PacketReader fits(4);
  EXPECT_EQ(Kinds(FeedAll(&fits, EncodePacket("abcd"))), (std::vector<Kind>{Kind::kPacket}));

  // An oversized packet cut off by a '$' resyncs there.
  PacketReader cut(4);
  EXPECT_EQ(Kinds(FeedAll(&cut, "$0123456$g#67")),
            (std::vector<Kind>{Kind::kOversized, Kind::kPacket}));
  PacketReader cut_in_checksum(4);
  EXPECT_EQ(Kinds(FeedAll(&cut_in_checksum, "$0123456#0$g#67")),
            (std::vector<Kind>{Kind::kOversized, Kind::kPacket}));
}

// ---- EncodePacket / Unescape ----

TEST(EncodePacket, FramesWithChecksumOfTheSentBytes) {
  EXPECT_EQ(EncodePacket("OK"), "$OK#9a");
  EXPECT_EQ(EncodePacket(""), "$#00");
}

TEST(EncodePacket, EscapesAllFourSpecialBytes) {
  const std::string escaped = "}\x04}\x03}]}\x0a";
  EXPECT_EQ(EncodePacket("$#}*"), "$" + escaped + "#" + Checksum(escaped));
  EXPECT_EQ(EncodePacket("a*b"), "$a}\x0a" "b#" + Checksum("a}\x0a" "b"));
}

TEST(EncodePacket, EveryByteValueSurvivesTheRoundTrip) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  all += all;
  PacketReader r(1024);
  const auto ev = FeedAll(&r, EncodePacket(all));
  ASSERT_EQ(Kinds(ev), (std::vector<Kind>{Kind::kPacket}));
  std::string back;
  ASSERT_TRUE(Unescape(ev[0].payload, &back));
  EXPECT_EQ(back, all);
}

TEST(Unescape, RefusesALoneTrailingEscape) {
  std::string out;
  EXPECT_TRUE(Unescape("a}]b}\x03", &out));
  EXPECT_EQ(out, "a}b#");
  EXPECT_TRUE(Unescape("", &out));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(Unescape("ab}", &out));
  EXPECT_FALSE(Unescape("}", &out));
}

// ---- hex ----

TEST(Hex, EncodesLowerCaseAndDecodesEitherCase) {
  const unsigned char b[] = {0x00, 0xab, 0xff, 0x10};
  EXPECT_EQ(ToHex(b, sizeof(b)), "00abff10");
  std::string bytes;
  ASSERT_TRUE(FromHex("00ABff10", &bytes));
  EXPECT_EQ(bytes, std::string("\x00\xab\xff\x10", 4));
  EXPECT_TRUE(FromHex("", &bytes));
  EXPECT_EQ(bytes, "");
  EXPECT_FALSE(FromHex("abc", &bytes));
  EXPECT_FALSE(FromHex("0g", &bytes));
  EXPECT_FALSE(FromHex(" 0", &bytes));
}

TEST(Hex, ParsesOneToSixteenDigitsOnly) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseHexU64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseHexU64("DeadBeef", &v));
  EXPECT_EQ(v, 0xdeadbeefu);
  EXPECT_TRUE(ParseHexU64("ffffffffffffffff", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_TRUE(ParseHexU64("0000000000000001", &v));
  EXPECT_EQ(v, 1u);
  for (const char* bad : {"", "10000000000000000", "-1", "0x10", "1 ", "g", "1,2"})
    EXPECT_FALSE(ParseHexU64(bad, &v)) << bad;
}

// ---- thread ids ----

TEST(ThreadIdParse, AcceptsEveryForm) {
  ThreadId t;
  ASSERT_TRUE(ParseThreadId("-1", &t));
  EXPECT_EQ(t, (ThreadId{0, ThreadId::kAll, false}));
  ASSERT_TRUE(ParseThreadId("0", &t));
  EXPECT_EQ(t, (ThreadId{0, ThreadId::kAny, false}));
  ASSERT_TRUE(ParseThreadId("1a2b", &t));
  EXPECT_EQ(t, (ThreadId{0, 0x1a2b, false}));
  ASSERT_TRUE(ParseThreadId("p1a.2b", &t));
  EXPECT_EQ(t, (ThreadId{0x1a, 0x2b, true}));
  ASSERT_TRUE(ParseThreadId("p-1.-1", &t));
  EXPECT_EQ(t, (ThreadId{-1, -1, true}));
  ASSERT_TRUE(ParseThreadId("p1a.0", &t));
  EXPECT_EQ(t, (ThreadId{0x1a, 0, true}));
  ASSERT_TRUE(ParseThreadId("p1a", &t));  // the manual: pPID means pPID.-1
  EXPECT_EQ(t, (ThreadId{0x1a, -1, true}));
}

TEST(ThreadIdParse, RefusesMalformedIds) {
  ThreadId t;
  for (const char* bad : {"", "p", "p.1", "p1.", "-2", "-", "xyz", "p-1.5", "p1.2.3",
                          "12345678901234567", "8000000000000000", "p8000000000000000.1",
                          "1 ", "q1.2"})
    EXPECT_FALSE(ParseThreadId(bad, &t)) << bad;
}

// ---- ParseRequest ----

Request Parse(const std::string& s) { return ParseRequest(s); }

void ExpectMalformed(const std::string& s) {
  const Request r = ParseRequest(s);
  EXPECT_EQ(r.kind, Request::kMalformed) << s;
  EXPECT_FALSE(r.error.empty()) << s;
}

TEST(ParseRequest, BareLetterPackets) {
  EXPECT_EQ(Parse("?").kind, Request::kHaltReason);
  EXPECT_EQ(Parse("g").kind, Request::kReadRegs);
  EXPECT_EQ(Parse("k").kind, Request::kKill);
  for (const char* bad : {"?x", "g0", "kk"}) ExpectMalformed(bad);
}

TEST(ParseRequest, RegisterWrites) {
  Request r = Parse("G0011aAbB");
  ASSERT_EQ(r.kind, Request::kWriteRegs);
  EXPECT_EQ(r.bytes, std::string("\x00\x11\xaa\xbb", 4));
  for (const char* bad : {"G", "G0", "Gzz"}) ExpectMalformed(bad);

  r = Parse("p10");
  ASSERT_EQ(r.kind, Request::kReadReg);
  EXPECT_EQ(r.regno, 16);
  for (const char* bad : {"p", "pzz", "p100000000", "p-1"}) ExpectMalformed(bad);

  r = Parse("P10=0011223344556677");
  ASSERT_EQ(r.kind, Request::kWriteReg);
  EXPECT_EQ(r.regno, 16);
  EXPECT_EQ(r.bytes, std::string("\x00\x11\x22\x33\x44\x55\x66\x77", 8));
  for (const char* bad : {"P10", "P10=", "P=00", "P10=0", "Pz=00", "P10=zz"}) ExpectMalformed(bad);
}

TEST(ParseRequest, MemoryReads) {
  const Request r = Parse("m401000,10");
  ASSERT_EQ(r.kind, Request::kReadMem);
  EXPECT_EQ(r.addr, 0x401000u);
  EXPECT_EQ(r.length, 0x10u);
  EXPECT_EQ(Parse("mffffffffffffffff,100000").length, kMaxMemoryLength);
  for (const char* bad : {"m", "m401000", "m401000,", "m,10", "mxyz,10", "m401000,1g",
                          "m401000,100001", "m11112222333344445,1", "m1,11112222333344445"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, HexMemoryWrites) {
  const Request r = Parse("M1000,2:abCD");
  ASSERT_EQ(r.kind, Request::kWriteMem);
  EXPECT_EQ(r.addr, 0x1000u);
  EXPECT_EQ(r.length, 2u);
  EXPECT_EQ(r.bytes, "\xab\xcd");
  for (const char* bad : {"M1000,3:abcd", "M1000,1:abcd", "M1000,2:abc", "M1000,2",
                          "M1000,2:zzzz", "M1000:abcd", "Mq,1:ab", "M1000,100001:"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, BinaryMemoryWritesAreUnescaped) {
  Request r = Parse("X1000,5:a}]}\x03:,");
  ASSERT_EQ(r.kind, Request::kWriteMemBinary);
  EXPECT_EQ(r.addr, 0x1000u);
  EXPECT_EQ(r.bytes, "a}#:,");

  // GDB probes for X support with a zero-length write.
  r = Parse("X401000,0:");
  ASSERT_EQ(r.kind, Request::kWriteMemBinary);
  EXPECT_EQ(r.length, 0u);
  EXPECT_EQ(r.bytes, "");

  r = Parse(std::string("X0,2:\0\x03", 7));
  ASSERT_EQ(r.kind, Request::kWriteMemBinary);
  EXPECT_EQ(r.bytes, std::string("\0\x03", 2));

  for (const char* bad : {"X1000,2:a}]b", "X1000,1:}", "X1000,1", "X1000,0", "Xz,1:a",
                          "X1000,100001:"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, ContinueAndStep) {
  Request r = Parse("c");
  ASSERT_EQ(r.kind, Request::kContinue);
  EXPECT_FALSE(r.has_addr);
  EXPECT_FALSE(r.has_signal);
  r = Parse("c401000");
  ASSERT_EQ(r.kind, Request::kContinue);
  EXPECT_TRUE(r.has_addr);
  EXPECT_EQ(r.addr, 0x401000u);
  r = Parse("s");
  EXPECT_EQ(r.kind, Request::kStep);
  r = Parse("C05");
  ASSERT_EQ(r.kind, Request::kContinue);
  EXPECT_TRUE(r.has_signal);
  EXPECT_EQ(r.signal, 5);
  EXPECT_FALSE(r.has_addr);
  r = Parse("S0b;10");
  ASSERT_EQ(r.kind, Request::kStep);
  EXPECT_EQ(r.signal, 11);
  EXPECT_TRUE(r.has_addr);
  EXPECT_EQ(r.addr, 0x10u);
  for (const char* bad : {"cxyz", "s;1", "C", "C123", "C05;", "Cz", "S05;zz", "C;10"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, VCont) {
  EXPECT_EQ(Parse("vCont?").kind, Request::kVContQuery);

  Request r = Parse("vCont;c");
  ASSERT_EQ(r.kind, Request::kVCont);
  ASSERT_EQ(r.actions.size(), 1u);
  EXPECT_EQ(r.actions[0].action, 'c');
  EXPECT_FALSE(r.actions[0].thread.has_value());

  r = Parse("vCont;s:p1.2;C05:1a;c:-1;t:p1.-1;S0b;r1000,2000:p1.1");
  ASSERT_EQ(r.kind, Request::kVCont);
  ASSERT_EQ(r.actions.size(), 6u);
  EXPECT_EQ(r.actions[0].action, 's');
  EXPECT_EQ(*r.actions[0].thread, (ThreadId{1, 2, true}));
  EXPECT_EQ(r.actions[1].action, 'C');
  EXPECT_EQ(r.actions[1].signal, 5);
  EXPECT_EQ(*r.actions[1].thread, (ThreadId{0, 0x1a, false}));
  EXPECT_EQ(*r.actions[2].thread, (ThreadId{0, -1, false}));
  EXPECT_EQ(r.actions[3].action, 't');
  EXPECT_EQ(r.actions[4].action, 'S');
  EXPECT_EQ(r.actions[4].signal, 11);
  EXPECT_FALSE(r.actions[4].thread.has_value());
  EXPECT_EQ(r.actions[5].action, 'r');
  EXPECT_EQ(r.actions[5].start, 0x1000u);
  EXPECT_EQ(r.actions[5].end, 0x2000u);

  for (const char* bad : {"vCont", "vCont;", "vCont;x", "vCont;c:", "vCont;C", "vCont;r1000",
                          "vCont;r1000,", "vCont;c;", "vCont;cz", "vCont;s:p-1.5", "vCont;t1",
                          "vCont?;c", "vCont:c"})
    ExpectMalformed(bad);
  EXPECT_EQ(Parse("vContX").kind, Request::kUnsupported);
}

TEST(ParseRequest, ThreadSelectionAndAliveness) {
  Request r = Parse("Hg0");
  ASSERT_EQ(r.kind, Request::kSetThread);
  EXPECT_EQ(r.which, 'g');
  EXPECT_EQ(r.thread, (ThreadId{0, 0, false}));
  r = Parse("Hc-1");
  ASSERT_EQ(r.kind, Request::kSetThread);
  EXPECT_EQ(r.which, 'c');
  EXPECT_EQ(r.thread.tid, -1);
  r = Parse("Hgp1a.2b");
  EXPECT_EQ(r.thread, (ThreadId{0x1a, 0x2b, true}));
  for (const char* bad : {"H", "Hg", "Hgxyz", "Hc-2", "Hgp-1.3"}) ExpectMalformed(bad);
  EXPECT_EQ(Parse("Hs1").kind, Request::kUnsupported);

  r = Parse("T1a2b");
  ASSERT_EQ(r.kind, Request::kThreadAlive);
  EXPECT_EQ(r.thread.tid, 0x1a2b);
  ExpectMalformed("T");
  ExpectMalformed("Tp");
}

TEST(ParseRequest, Breakpoints) {
  Request r = Parse("Z0,401000,1");
  ASSERT_EQ(r.kind, Request::kInsertBreak);
  EXPECT_EQ(r.break_type, 0);
  EXPECT_EQ(r.addr, 0x401000u);
  EXPECT_EQ(r.break_kind, 1u);
  r = Parse("z2,7ffc0010,8");
  ASSERT_EQ(r.kind, Request::kRemoveBreak);
  EXPECT_EQ(r.break_type, 2);
  EXPECT_EQ(r.break_kind, 8u);
  // Target-side conditions and commands are skipped.
  r = Parse("Z0,401000,1;X3,220027;cmds:0,X1,00");
  ASSERT_EQ(r.kind, Request::kInsertBreak);
  EXPECT_EQ(r.addr, 0x401000u);
  EXPECT_EQ(r.break_kind, 1u);
  EXPECT_EQ(Parse("Z4,1,1").break_type, 4);
  for (const char* bad : {"Z", "Z0", "Z0,", "Z0,401000", "Z0,zz,1", "Z0,1,zz", "Z0;1,1",
                          "z1,1,", "Z0,1,1,1"})
    ExpectMalformed(bad);
  EXPECT_EQ(Parse("Z5,1,1").kind, Request::kUnsupported);
}

TEST(ParseRequest, QSupported) {
  Request r = Parse("qSupported");
  ASSERT_EQ(r.kind, Request::kSupported);
  EXPECT_TRUE(r.features.empty());
  r = Parse("qSupported:multiprocess+;swbreak+;xmlRegisters=i386");
  ASSERT_EQ(r.kind, Request::kSupported);
  EXPECT_EQ(r.features,
            (std::vector<std::string>{"multiprocess+", "swbreak+", "xmlRegisters=i386"}));
  for (const char* bad : {"qSupported:", "qSupported:a;;b", "qSupported:a;", "qSupported;a"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, QXferRead) {
  Request r = Parse("qXfer:btrace:read:all:0,fff");
  ASSERT_EQ(r.kind, Request::kXferRead);
  EXPECT_EQ(r.object, "btrace");
  EXPECT_EQ(r.annex, "all");
  EXPECT_EQ(r.offset, 0u);
  EXPECT_EQ(r.length, 0xfffu);
  r = Parse("qXfer:btrace-conf:read::1a,3fb");
  ASSERT_EQ(r.kind, Request::kXferRead);
  EXPECT_EQ(r.object, "btrace-conf");
  EXPECT_EQ(r.annex, "");
  EXPECT_EQ(r.offset, 0x1au);
  EXPECT_EQ(r.length, 0x3fbu);
  EXPECT_EQ(Parse("qXfer:features:write:target.xml:0:abc").kind, Request::kUnsupported);
  for (const char* bad : {"qXfer", "qXfer:", "qXfer:btrace", "qXfer:btrace:read",
                          "qXfer:btrace:read:all", "qXfer:btrace:read:all:0",
                          "qXfer:btrace:read:all:x,1", "qXfer::read::0,1",
                          "qXfer:btrace:read:all:0,1:2"})
    ExpectMalformed(bad);
}

TEST(ParseRequest, ThreadQueriesAndSessionPackets) {
  EXPECT_EQ(Parse("qfThreadInfo").kind, Request::kThreadInfoFirst);
  EXPECT_EQ(Parse("qsThreadInfo").kind, Request::kThreadInfoNext);
  EXPECT_EQ(Parse("qC").kind, Request::kCurrentThread);
  EXPECT_EQ(Parse("QStartNoAckMode").kind, Request::kStartNoAck);
  // Names match whole: qCRC is another packet.
  EXPECT_EQ(Parse("qCRC:1000,10").kind, Request::kUnsupported);
  ExpectMalformed("qC:1");

  Request r = Parse("qAttached");
  ASSERT_EQ(r.kind, Request::kAttached);
  EXPECT_FALSE(r.has_pid);
  r = Parse("qAttached:1a");
  ASSERT_EQ(r.kind, Request::kAttached);
  EXPECT_TRUE(r.has_pid);
  EXPECT_EQ(r.pid, 0x1a);
  for (const char* bad : {"qAttached:", "qAttached:zz", "qAttached;1"}) ExpectMalformed(bad);

  r = Parse("vKill;1a");
  ASSERT_EQ(r.kind, Request::kVKill);
  EXPECT_EQ(r.pid, 0x1a);
  for (const char* bad : {"vKill", "vKill;", "vKill;-1", "vKill:1"}) ExpectMalformed(bad);

  r = Parse("D");
  ASSERT_EQ(r.kind, Request::kDetach);
  EXPECT_FALSE(r.has_pid);
  r = Parse("D;1a");
  ASSERT_EQ(r.kind, Request::kDetach);
  EXPECT_TRUE(r.has_pid);
  EXPECT_EQ(r.pid, 0x1a);
  for (const char* bad : {"D;", "Dx", "D;zz", "D1"}) ExpectMalformed(bad);
}

TEST(ParseRequest, Btrace) {
  for (const char* mode : {"bts", "pt", "off"}) {
    const Request r = Parse(std::string("Qbtrace:") + mode);
    ASSERT_EQ(r.kind, Request::kBtraceEnable) << mode;
    EXPECT_EQ(r.mode, mode);
  }
  for (const char* bad : {"Qbtrace", "Qbtrace:", "Qbtrace:xyz", "Qbtrace:bts:1"})
    ExpectMalformed(bad);

  // GDB sends the size as "0x%x" (remote.c btrace_sync_conf).
  Request r = Parse("Qbtrace-conf:bts:size=0x10000");
  ASSERT_EQ(r.kind, Request::kBtraceConfSize);
  EXPECT_EQ(r.value, 0x10000u);
  r = Parse("Qbtrace-conf:bts:size=ffffffff");
  ASSERT_EQ(r.kind, Request::kBtraceConfSize);
  EXPECT_EQ(r.value, 0xffffffffu);
  EXPECT_EQ(Parse("Qbtrace-conf:pt:size=0x4000").kind, Request::kUnsupported);
  for (const char* bad : {"Qbtrace-conf", "Qbtrace-conf:bts:size=", "Qbtrace-conf:bts:size=0x",
                          "Qbtrace-conf:bts:size=100000000", "Qbtrace-conf:bts:size=zz",
                          "Qbtrace-conf:bts:size=0x1 "})
    ExpectMalformed(bad);
}

TEST(ParseRequest, UnknownPacketsAreUnsupported) {
  for (const char* s : {"", "vMustReplyEmpty", "!", "qSymbol::", "qOffsets", "qTStatus",
                        "vFile:open:", "QNonStop:1", "Hs0", "x1000,4", "\x03"})
    EXPECT_EQ(Parse(s).kind, Request::kUnsupported) << s;
}

// Every prefix of every sample (a packet cut anywhere) parses to something.
TEST(ParseRequest, TruncatedPacketsNeverCrash) {
  for (const char* s :
       {"m401000,10", "M1000,2:abcd", "X1000,3:a}]b", "vCont;s:p1.2;C05:1a;r1,2:-1",
        "Z0,401000,1;X3,220027", "qXfer:btrace:read:all:0,fff", "qSupported:a+;b-",
        "Qbtrace-conf:bts:size=0x10000", "Hgp1.2", "C05;1000", "P10=0011", "D;1a"}) {
    const std::string full = s;
    for (size_t n = 0; n <= full.size(); ++n) ParseRequest(full.substr(0, n));
  }
}

}  // namespace
}  // namespace pfm::gdbstub
