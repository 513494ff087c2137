#include "libpfm-bts/perf_data.h"

#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/uapi/pfm_uapi.h"
#include "pfm/trace_file.h"

namespace pfm {
namespace {

namespace json = boost::json;

std::string TempPath(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

// ---- A reader of what the writer wrote, by the documented offsets. ----

uint64_t Le(const std::string& s, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s.at(off + i));
  return v;
}

struct PerfRecord {
  uint32_t type = 0;
  uint16_t misc = 0;
  std::string bytes;  // the whole record, header included
  uint64_t U64(size_t off) const { return Le(bytes, off, 8); }
  uint32_t U32(size_t off) const { return static_cast<uint32_t>(Le(bytes, off, 4)); }
};

struct PerfFile {
  std::string bytes;
  uint64_t attr_size = 0, attrs_offset = 0, attrs_size = 0, data_offset = 0, data_size = 0;
  std::vector<PerfRecord> records;
  std::map<int, std::string> features;  // bit -> contents
  uint64_t U64(size_t off) const { return Le(bytes, off, 8); }
  uint32_t U32(size_t off) const { return static_cast<uint32_t>(Le(bytes, off, 4)); }
  // Attr i's bytes (kPerfAttrBytes).
  std::string Attr(size_t i) const {
    return bytes.substr(attrs_offset + i * attr_size, kPerfAttrBytes);
  }
  size_t Attrs() const { return attrs_size / attr_size; }
  std::vector<uint32_t> Types() const {
    std::vector<uint32_t> t;
    for (const PerfRecord& r : records) t.push_back(r.type);
    return t;
  }
  std::vector<PerfRecord> OfType(uint32_t type) const {
    std::vector<PerfRecord> out;
    for (const PerfRecord& r : records)
      if (r.type == type) out.push_back(r);
    return out;
  }
};

PerfFile Load(const std::string& path) {
  PerfFile f;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  f.bytes = ss.str();
  EXPECT_GE(f.bytes.size(), kPerfHeaderBytes);
  if (f.bytes.size() < kPerfHeaderBytes) return f;
  f.attr_size = f.U64(16);
  f.attrs_offset = f.U64(24);
  f.attrs_size = f.U64(32);
  f.data_offset = f.U64(40);
  f.data_size = f.U64(48);
  for (size_t off = f.data_offset; off < f.data_offset + f.data_size;) {
    PerfRecord r;
    r.type = f.U32(off);
    r.misc = static_cast<uint16_t>(Le(f.bytes, off + 4, 2));
    const size_t size = Le(f.bytes, off + 6, 2);
    EXPECT_GE(size, 8u);
    EXPECT_EQ(size % 8, 0u);
    if (size < 8) break;
    r.bytes = f.bytes.substr(off, size);
    f.records.push_back(r);
    off += size;
  }
  size_t index = f.data_offset + f.data_size;
  for (int bit = 0; bit < 256; ++bit) {
    if (!((f.U64(72 + 8 * (bit / 64)) >> (bit % 64)) & 1)) continue;
    f.features[bit] = f.bytes.substr(f.U64(index), f.U64(index + 8));
    index += 16;
  }
  return f;
}

// perf's header string at `off` of `s`: the text, and *next after it.
std::string HeaderString(const std::string& s, size_t off, size_t* next) {
  const uint32_t len = static_cast<uint32_t>(Le(s, off, 4));
  *next = off + 4 + len;
  return std::string(s.c_str() + off + 4);
}

// A record's time: a sample's after its IDENTIFIER (when the first
// attr's sample_type has it), ip and pid/tid; any other record's in the
// sample_id_all trailer, before cpu (and the IDENTIFIER, last). nullopt for
// FINISHED_ROUND, which has none.
std::optional<uint64_t> RecordTime(const PerfFile& f, const PerfRecord& r) {
  if (r.type == kPerfRecordFinishedRound) return std::nullopt;
  const bool id = Le(f.Attr(0), 24, 8) & PERF_SAMPLE_IDENTIFIER;
  if (r.type == PERF_RECORD_SAMPLE) return r.U64(8 + (id ? 8 : 0) + 16);
  return r.U64(r.bytes.size() - 16 - (id ? 8 : 0));
}

// ---- Traces ----

pfm_record Rec(uint16_t type, uint64_t time, uint32_t pid = 42, uint32_t tid = 42) {
  pfm_record r{};
  r.type = type;
  r.time = time;
  r.pid = pid;
  r.tid = tid;
  r.cpu = 1;
  return r;
}

pfm_record Branch(uint64_t time, uint64_t from, uint64_t to) {
  pfm_record r = Rec(PFM_REC_BRANCH, time);
  r.u.branch.from = from;
  r.u.branch.to = to;
  return r;
}

pfm_record Pebs(uint64_t time, uint64_t ip, uint64_t addr, uint64_t latency,
                uint32_t request) {
  pfm_record r = Rec(PFM_REC_PEBS, time);
  r.u.pebs.ip = ip;
  r.u.pebs.addr = addr;
  r.u.pebs.latency = latency;
  r.u.pebs.event = request;
  return r;
}

Trace RecordTrace(std::vector<pfm_record> records) {
  Trace t;
  t.header = {{"kind", "record"},
              {"command", "/usr/local/bin/a-very-long-program-name arg"},
              {"pid", 42},
              {"spec", {{"bts", "lossless"}, {"filter", "user"}}}};
  t.records = std::move(records);
  t.complete = true;
  return t;
}

PerfFile Export(const Trace& t, const std::string& name, PerfDataOptions options = {},
                PerfDataSummary* summary = nullptr) {
  const std::string path = TempPath(name);
  absl::StatusOr<PerfDataSummary> s = WritePerfData(t, options, path);
  EXPECT_TRUE(s.ok()) << s.status();
  if (summary != nullptr && s.ok()) *summary = *s;
  return Load(path);
}

constexpr uint64_t kBtsSampleType = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                    PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;

// Bit `bit` of the attr's flags word (offset 40): disabled is bit 0, then
// inherit, pinned, exclusive, exclude_user (4), exclude_kernel (5),
// exclude_hv (6), exclude_idle, mmap (8), comm (9), freq, inherit_stat,
// enable_on_exec, task (13), watermark, precise_ip (15-16), mmap_data,
// sample_id_all (18), ..., mmap2 (23), comm_exec (24), use_clockid,
// context_switch (26).
bool Flag(const std::string& attr, int bit) { return (Le(attr, 40, 8) >> bit) & 1; }

TEST(PerfData, HeaderAndAttrSitAtTheDocumentedOffsets) {
  PerfDataOptions options;
  options.cmdline = {"pfmctl", "export", "t"};
  PerfFile f = Export(RecordTrace({Branch(1000, 0x401000, 0x401100)}), "layout.data", options);
  const std::string& b = f.bytes;
  EXPECT_EQ(b.substr(0, 8), "PERFILE2");
  EXPECT_EQ(f.U64(8), 104u) << "header size";
  EXPECT_EQ(f.U64(16), 144u) << "attr_size: a 128-byte attr and its ids section";
  EXPECT_EQ(f.U64(24), 104u) << "attrs.offset";
  EXPECT_EQ(f.U64(32), 144u) << "attrs.size: one event";
  EXPECT_EQ(f.U64(40), 104u + 144 + 8) << "data.offset: after the attrs and the one id";
  EXPECT_EQ(f.U64(56), 0u) << "event_types.offset";
  EXPECT_EQ(f.U64(64), 0u) << "event_types.size";
  EXPECT_EQ(f.U64(72), (1ULL << 7) | (1ULL << 11) | (1ULL << 12) | (1ULL << 21))
      << "features: NRCPUS, CMDLINE, EVENT_DESC, SAMPLE_TIME";
  EXPECT_EQ(f.U64(80) | f.U64(88) | f.U64(96), 0u);
  EXPECT_EQ(f.U64(40) + f.U64(48) + 4 * 16 + f.features[7].size() + f.features[11].size() +
                f.features[12].size() + f.features[21].size(),
            b.size())
      << "the feature index right after the data, then the contents";

  const std::string attr = f.Attr(0);
  EXPECT_EQ(Le(attr, 0, 4), static_cast<uint64_t>(PERF_TYPE_HARDWARE));
  EXPECT_EQ(Le(attr, 4, 4), 128u) << "attr.size: perf 6.1 refuses 136";
  EXPECT_EQ(Le(attr, 8, 8), static_cast<uint64_t>(PERF_COUNT_HW_BRANCH_INSTRUCTIONS));
  EXPECT_EQ(Le(attr, 16, 8), 1u) << "sample_period 1: perf's BTS";
  EXPECT_EQ(Le(attr, 24, 8), kBtsSampleType) << "one event: no IDENTIFIER";
  EXPECT_EQ(Le(attr, 32, 8), static_cast<uint64_t>(PERF_FORMAT_TOTAL_TIME_ENABLED |
                                                   PERF_FORMAT_TOTAL_TIME_RUNNING));
  EXPECT_FALSE(Flag(attr, 4)) << "exclude_user";
  EXPECT_TRUE(Flag(attr, 5)) << "exclude_kernel: filter user";
  EXPECT_TRUE(Flag(attr, 18)) << "sample_id_all";
  EXPECT_TRUE(Flag(attr, 23)) << "mmap2";
  EXPECT_TRUE(Flag(attr, 24)) << "comm_exec";
  EXPECT_TRUE(Flag(attr, 26)) << "context_switch";
  EXPECT_EQ(Le(attr, 40, 8) >> 15 & 3, 0u) << "precise_ip";
  // The ids section after the attr: one id, 1, at the end of the attrs.
  EXPECT_EQ(f.U64(104 + 128), 104u + 144) << "ids.offset";
  EXPECT_EQ(f.U64(104 + 136), 8u) << "ids.size";
  EXPECT_EQ(f.U64(104 + 144), 1u) << "the id";
}

TEST(PerfData, BranchIsABtsSampleFromTo) {
  pfm_record user = Branch(1000, 0x401000, 0x401100);
  pfm_record kernel = Branch(2000, 0xffffffff81000000, 0x401200);
  kernel.cpu = 3;
  PerfFile f = Export(RecordTrace({user, kernel}), "branch.data");
  std::vector<PerfRecord> s = f.OfType(PERF_RECORD_SAMPLE);
  ASSERT_EQ(s.size(), 2u);
  // header, ip, pid+tid, time, addr, cpu+res, period.
  EXPECT_EQ(s[0].bytes.size(), 8u + 6 * 8);
  EXPECT_EQ(s[0].misc, PERF_RECORD_MISC_USER);
  EXPECT_EQ(s[0].U64(8), 0x401000u);
  EXPECT_EQ(s[0].U32(16), 42u);
  EXPECT_EQ(s[0].U32(20), 42u);
  EXPECT_EQ(s[0].U64(24), 1000u);
  EXPECT_EQ(s[0].U64(32), 0x401100u);
  EXPECT_EQ(s[0].U32(40), 1u) << "cpu";
  EXPECT_EQ(s[0].U64(48), 1u) << "period";
  EXPECT_EQ(s[1].misc, PERF_RECORD_MISC_KERNEL) << "a kernel from-address";
  EXPECT_EQ(s[1].U32(40), 3u);
}

TEST(PerfData, BtsAndPebsAreTwoEventsThatNameThemselvesInEverySample) {
  Trace t = RecordTrace({Branch(1000, 0x401000, 0x401100),
                         Pebs(1500, 0x401234, 0x7f0000001000, 37, 5)});
  t.trailer = {{"counters", json::array{{{"event", "MEM_LOAD_RETIRED.L3_MISS"},
                                         {"pebs", true},
                                         {"period", 2000},
                                         {"request", 5},
                                         {"value", 4000},
                                         {"time_enabled", 10},
                                         {"time_running", 10}}}}};
  PerfDataSummary sum;
  PerfFile f = Export(t, "pebs.data", {}, &sum);
  ASSERT_EQ(f.Attrs(), 2u);
  EXPECT_EQ(sum.events, (std::vector<std::string>{"branches:u", "MEM_LOAD_RETIRED.L3_MISS"}));
  const std::string bts = f.Attr(0), pebs = f.Attr(1);
  EXPECT_EQ(Le(bts, 24, 8), kBtsSampleType | PERF_SAMPLE_IDENTIFIER);
  EXPECT_EQ(Le(pebs, 24, 8), kBtsSampleType | PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_WEIGHT);
  EXPECT_EQ(Le(pebs, 0, 4), static_cast<uint64_t>(PERF_TYPE_RAW));
  EXPECT_EQ(Le(pebs, 16, 8), 2000u) << "sample_period from the trailer";
  EXPECT_EQ(Le(pebs, 40, 8) >> 15 & 3, 2u) << "precise_ip";
  EXPECT_TRUE(Flag(pebs, 18));
  EXPECT_FALSE(Flag(pebs, 23)) << "only the first event carries the side records";
  EXPECT_EQ(f.U64(104 + 2 * 144 + 8), 2u) << "the PEBS event's id";

  std::vector<PerfRecord> s = f.OfType(PERF_RECORD_SAMPLE);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].bytes.size(), 8u + 7 * 8);
  EXPECT_EQ(s[0].U64(8), 1u) << "IDENTIFIER first: the branches event";
  EXPECT_EQ(s[0].U64(16), 0x401000u);
  // header, id, ip, pid+tid, time, addr, cpu+res, period, weight.
  const PerfRecord& p = s[1];
  EXPECT_EQ(p.bytes.size(), 8u + 8 * 8);
  EXPECT_EQ(p.misc, PERF_RECORD_MISC_USER | PERF_RECORD_MISC_EXACT_IP);
  EXPECT_EQ(p.U64(8), 2u);
  EXPECT_EQ(p.U64(16), 0x401234u);
  EXPECT_EQ(p.U64(32), 1500u);
  EXPECT_EQ(p.U64(40), 0x7f0000001000u) << "the data address";
  EXPECT_EQ(p.U64(56), 2000u) << "period";
  EXPECT_EQ(p.U64(64), 37u) << "weight: the latency";
  // The PEBS counter's reading goes to the PEBS event.
  std::vector<PerfRecord> reads = f.OfType(PERF_RECORD_READ);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].U64(16), 4000u);
  EXPECT_EQ(reads[0].U64(reads[0].bytes.size() - 8), 2u);
}

TEST(PerfData, PebsWithoutATrailerTakesTheSpecsNameAndPeriod) {
  Trace t = RecordTrace({Pebs(10, 0x401000, 0x1000, 1, 3), Pebs(20, 0x401000, 0x1000, 1, 4)});
  t.header["spec"] = {{"bts", "off"}, {"pebs_event", "MEM_INST_RETIRED.ALL_LOADS"},
                      {"pebs_period", 100}};
  PerfDataSummary sum;
  PerfFile f = Export(t, "pebs_spec.data", {}, &sum);
  EXPECT_EQ(sum.events,
            (std::vector<std::string>{"MEM_INST_RETIRED.ALL_LOADS", "pebs-request-4"}))
      << "no branches event when BTS was off and no branch was recorded";
  EXPECT_EQ(Le(f.Attr(0), 16, 8), 100u);
  EXPECT_TRUE(Flag(f.Attr(0), 23)) << "the first event carries the side records";
}

// The sample_id_all trailer: pid+tid, time, cpu+res, and the id last when
// there are several events.
TEST(PerfData, SideRecordsEndWithTheSampleIdTrailer) {
  pfm_record exit = Rec(PFM_REC_EXIT, 3000);
  exit.cpu = 2;
  PerfFile one = Export(RecordTrace({Branch(1000, 0x401000, 0x401100), exit}), "id1.data");
  std::vector<PerfRecord> e1 = one.OfType(PERF_RECORD_EXIT);
  ASSERT_EQ(e1.size(), 1u);
  // header, pid, ppid, tid, ptid, time, then the trailer.
  EXPECT_EQ(e1[0].bytes.size(), 8u + 24 + 24);
  EXPECT_EQ(e1[0].U32(32), 42u);
  EXPECT_EQ(e1[0].U32(36), 42u);
  EXPECT_EQ(e1[0].U64(40), 3000u);
  EXPECT_EQ(e1[0].U32(48), 2u);

  PerfFile two = Export(RecordTrace({Branch(1000, 0x401000, 0x401100), exit,
                                     Pebs(1100, 0x401000, 0, 0, 1)}),
                        "id2.data");
  std::vector<PerfRecord> e2 = two.OfType(PERF_RECORD_EXIT);
  ASSERT_EQ(e2.size(), 1u);
  EXPECT_EQ(e2[0].bytes.size(), 8u + 24 + 32);
  EXPECT_EQ(e2[0].U64(56), 1u) << "IDENTIFIER last: the first event";
}

TEST(PerfData, EveryRecordTypeMapsToItsPerfRecordOrIsCountedAsSkipped) {
  std::vector<pfm_record> recs;
  recs.push_back(Branch(10, 0x401000, 0x401100));
  recs.push_back(Pebs(20, 0x401000, 0x1000, 5, 1));
  pfm_record out = Rec(PFM_REC_SWITCH_OUT, 30);
  out.misc = PFM_MISC_SWITCH_PREEMPT;
  recs.push_back(out);
  recs.push_back(Rec(PFM_REC_SWITCH_IN, 40));
  pfm_record lost = Rec(PFM_REC_LOST, 50);
  lost.u.lost.count = 77;
  recs.push_back(lost);
  pfm_record counter = Rec(PFM_REC_COUNTER, 60);
  counter.u.counter.value = 123;
  counter.u.counter.time_enabled = 20;
  counter.u.counter.time_running = 10;
  counter.u.counter.request = 9;
  recs.push_back(counter);
  recs.push_back(Rec(PFM_REC_THROTTLE, 70));
  recs.push_back(Rec(PFM_REC_RESIZED, 80));
  recs.push_back(Rec(PFM_REC_SCHEDULE, 85));
  recs.push_back(Rec(PFM_REC_EXIT, 90));
  recs.push_back(Rec(PFM_REC_GAP, 92));
  recs.push_back(Rec(PFM_REC_EXEC, 94));
  recs.push_back(Rec(77, 95));  // a type from a newer pfm
  PerfDataSummary sum;
  ProcessMaps maps;
  maps.pid = 42;
  maps.mappings.push_back({0x401000, 0x402000, 0x1000, "/bin/prog", false, false});
  PerfDataOptions options;
  options.maps = &maps;
  PerfFile f = Export(RecordTrace(recs), "every.data", options, &sum);
  EXPECT_EQ(f.Types(),
            (std::vector<uint32_t>{PERF_RECORD_COMM, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE,
                                   PERF_RECORD_SAMPLE, PERF_RECORD_SWITCH, PERF_RECORD_SWITCH,
                                   PERF_RECORD_LOST, PERF_RECORD_READ, PERF_RECORD_THROTTLE,
                                   PERF_RECORD_EXIT, kPerfRecordFinishedRound}));
  EXPECT_EQ(sum.skipped,
            (std::map<std::string, uint64_t>{{"resized", 1}, {"schedule", 1}, {"gap", 1},
                                             {"exec", 1}, {"type_77", 1}}));
  EXPECT_EQ(sum.samples, 2u);
  EXPECT_EQ(sum.reads, 1u);
  EXPECT_EQ(sum.side_records, 7u);  // comm, mmap2, 2 switches, lost, throttle, exit
  EXPECT_EQ(sum.events, (std::vector<std::string>{"branches:u", "pebs-request-1",
                                                  "counter-request-9"}));
  std::vector<PerfRecord> sw = f.OfType(PERF_RECORD_SWITCH);
  EXPECT_EQ(sw[0].misc, PERF_RECORD_MISC_SWITCH_OUT | PERF_RECORD_MISC_SWITCH_OUT_PREEMPT);
  EXPECT_EQ(sw[1].misc, 0);
  EXPECT_EQ(sw[0].bytes.size(), 8u + 32) << "a task's switch: the trailer alone";
  const PerfRecord l = f.OfType(PERF_RECORD_LOST)[0];
  EXPECT_EQ(l.U64(8), 1u) << "id";
  EXPECT_EQ(l.U64(16), 77u) << "lost";
  const PerfRecord r = f.OfType(PERF_RECORD_READ)[0];
  EXPECT_EQ(r.U32(8), 42u);
  EXPECT_EQ(r.U64(16), 123u);
  EXPECT_EQ(r.U64(24), 20u) << "time_enabled";
  EXPECT_EQ(r.U64(32), 10u) << "time_running";
  EXPECT_EQ(r.U64(r.bytes.size() - 8), 3u) << "the counter's own event";
  const PerfRecord th = f.OfType(PERF_RECORD_THROTTLE)[0];
  EXPECT_EQ(th.U64(8), 70u);
  EXPECT_EQ(th.U64(16), 1u);
}

TEST(PerfData, CommAndMmapComeFirstAtTheFirstRecordsTime) {
  Trace t = RecordTrace({Branch(5000, 0x401000, 0x401100), Rec(PFM_REC_SWITCH_IN, 6000, 42, 43)});
  ProcessMaps maps;
  maps.pid = 42;
  maps.time_ns = 9000;  // pfmd learnt them after the first records
  maps.mappings.push_back({0x401000, 0x479000, 0x1000, "/tmp/prog", false, false});
  maps.mappings.push_back({0x7f0000000000, 0x7f0000002000, 0, "", true, true});
  PerfDataOptions options;
  options.maps = &maps;
  PerfFile f = Export(t, "side.data", options);
  std::vector<PerfRecord> comm = f.OfType(PERF_RECORD_COMM);
  ASSERT_EQ(comm.size(), 2u) << "the process and its other thread";
  EXPECT_EQ(comm[0].misc, PERF_RECORD_MISC_COMM_EXEC);
  EXPECT_EQ(comm[0].U32(8), 42u);
  EXPECT_EQ(comm[0].U32(12), 42u);
  EXPECT_STREQ(comm[0].bytes.c_str() + 16, "a-very-long-pro") << "the kernel's 15 bytes";
  EXPECT_EQ(comm[0].bytes.size(), 8u + 8 + 16 + 24);
  EXPECT_EQ(comm[0].U64(40), 5000u) << "the first record's time";
  EXPECT_EQ(comm[1].misc, 0) << "a thread is no exec";
  EXPECT_EQ(comm[1].U32(12), 43u);
  std::vector<PerfRecord> mm = f.OfType(PERF_RECORD_MMAP2);
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(mm[0].misc, PERF_RECORD_MISC_USER) << "else perf finds no symbol";
  EXPECT_EQ(mm[0].U32(8), 42u);
  EXPECT_EQ(mm[0].U64(16), 0x401000u) << "addr";
  EXPECT_EQ(mm[0].U64(24), 0x78000u) << "len";
  EXPECT_EQ(mm[0].U64(32), 0x1000u) << "pgoff";
  EXPECT_EQ(mm[0].U32(64), static_cast<uint32_t>(PROT_READ | PROT_EXEC));
  EXPECT_EQ(mm[0].U32(68), static_cast<uint32_t>(MAP_PRIVATE));
  EXPECT_STREQ(mm[0].bytes.c_str() + 72, "/tmp/prog");
  EXPECT_EQ(mm[0].bytes.size(), 72u + 16 + 24);
  EXPECT_EQ(mm[0].U64(mm[0].bytes.size() - 16), 5000u) << "time in the trailer";
  EXPECT_EQ(mm[1].U32(64), static_cast<uint32_t>(PROT_READ | PROT_EXEC | PROT_WRITE));
  EXPECT_EQ(mm[1].U32(68), static_cast<uint32_t>(MAP_SHARED));
  EXPECT_STREQ(mm[1].bytes.c_str() + 72, "//anon");
  EXPECT_EQ(f.Types().at(4), static_cast<uint32_t>(PERF_RECORD_SAMPLE));
}

TEST(PerfData, EmptyTraceHasSideRecordsAndARoundSoTheDataIsNeverEmpty) {
  ProcessMaps maps;
  maps.pid = 42;
  maps.time_ns = 777;
  maps.mappings.push_back({0x401000, 0x479000, 0x1000, "/tmp/prog", false, false});
  PerfDataOptions options;
  options.maps = &maps;
  PerfFile f = Export(RecordTrace({}), "empty.data", options);
  EXPECT_EQ(f.Types(), (std::vector<uint32_t>{PERF_RECORD_COMM, PERF_RECORD_MMAP2,
                                              kPerfRecordFinishedRound}));
  EXPECT_EQ(f.OfType(PERF_RECORD_MMAP2)[0].U64(f.OfType(PERF_RECORD_MMAP2)[0].bytes.size() - 16),
            777u)
      << "no records: the mappings' own time";
  EXPECT_EQ(f.features.count(21), 0u) << "no SAMPLE_TIME without records";

  Trace bare;  // not even a header that says anything
  PerfDataSummary sum;
  PerfFile g = Export(bare, "bare.data", {}, &sum);
  EXPECT_EQ(g.Types(), (std::vector<uint32_t>{kPerfRecordFinishedRound}));
  EXPECT_EQ(g.data_size, 8u);
  EXPECT_EQ(sum.events, (std::vector<std::string>{"branches"}));
}

TEST(PerfData, RecordsAreWrittenInTimeOrderKeepingTheOrderOfEqualTimes) {
  PerfFile f = Export(RecordTrace({Branch(300, 0x3, 0), Branch(100, 0x1, 0),
                                   Branch(200, 0x21, 0), Branch(200, 0x22, 0),
                                   Branch(200, 0x23, 0)}),
                      "order.data");
  std::vector<uint64_t> ips;
  for (const PerfRecord& r : f.OfType(PERF_RECORD_SAMPLE)) ips.push_back(r.U64(8));
  EXPECT_EQ(ips, (std::vector<uint64_t>{0x1, 0x21, 0x22, 0x23, 0x3}));
}

// Records out of time order as a trace has them (per-thread buffers drained
// in turn: local disorder) plus some far out of place (a late drain), with
// many equal times; `from` numbers each record in file order.
std::vector<pfm_record> DisorderedRecords(size_t n) {
  std::vector<pfm_record> recs;
  uint64_t seed = 12345;
  auto rnd = [&]() {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed >> 33;
  };
  for (size_t i = 0; i < n; ++i) {
    uint64_t time = 1000 + i / 4 * 10 + rnd() % 200;  // local disorder, ties
    if (rnd() % 500 == 0) time = 1000 + rnd() % (n * 3);  // far out of place
    pfm_record r = Branch(time, 0x400000 + i, 0x500000);
    r.tid = 42 + static_cast<uint32_t>(rnd() % 3);
    r.cpu = static_cast<uint32_t>(rnd() % 2);
    recs.push_back(r);
  }
  return recs;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PerfData, TimeOrderInBoundedMemoryIsTheStableSortWhetherHeldOrSpilled) {
  const std::vector<pfm_record> recs = DisorderedRecords(20000);
  std::vector<pfm_record> sorted = recs;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const pfm_record& a, const pfm_record& b) { return a.time < b.time; });
  std::vector<uint64_t> want;
  for (const pfm_record& r : sorted) want.push_back(r.u.branch.from);
  const Trace t = RecordTrace(recs);

  PerfDataSummary whole, held, spilled;
  Export(t, "order_whole.data", {}, &whole);  // one chunk: all held at once
  EXPECT_EQ(whole.sort_runs, 0u);
  PerfDataOptions small;
  small.reorder_chunk = 256;
  small.reorder_held = 1 << 20;
  PerfFile h = Export(t, "order_held.data", small, &held);
  EXPECT_EQ(held.sort_runs, 0u);
  EXPECT_GT(held.peak_held, 0u) << "some records waited for later chunks";
  EXPECT_LT(held.peak_held, 20000u);
  small.reorder_held = 100;  // the far-out-of-place records make it spill
  small.temp_dir = TempPath("");
  PerfFile sp = Export(t, "order_spilled.data", small, &spilled);
  EXPECT_GT(spilled.sort_runs, 10u);

  std::vector<uint64_t> got;
  for (const PerfRecord& r : sp.OfType(PERF_RECORD_SAMPLE)) got.push_back(r.U64(8));
  EXPECT_EQ(got, want);
  const std::string bytes = FileBytes(TempPath("order_whole.data"));
  EXPECT_EQ(h.bytes, bytes);
  EXPECT_EQ(sp.bytes, bytes);
  EXPECT_EQ(h.OfType(kPerfRecordFinishedRound).size(), 1u);
}

TEST(PerfData, TwoPassesThatDisagreeAreDataLossAndAnUnwritableTempDirUnavailable) {
  const std::vector<pfm_record> recs = DisorderedRecords(1000);
  const json::object header = RecordTrace({}).header;
  int pass = 0;
  auto shrinking = [&](const PerfRecordVisitor& visit) -> absl::Status {
    const size_t n = ++pass == 1 ? recs.size() : recs.size() - 1;
    for (size_t i = 0; i < n; ++i)
      if (absl::Status s = visit(recs[i]); !s.ok()) return s;
    return absl::OkStatus();
  };
  absl::StatusOr<PerfDataSummary> s =
      WritePerfData(header, {}, shrinking, {}, TempPath("shrunk.data"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_NE(s.status().message().find("1000 records in the first pass, 999"),
            std::string::npos)
      << s.status();

  auto whole = [&](const PerfRecordVisitor& visit) -> absl::Status {
    for (const pfm_record& r : recs)
      if (absl::Status st = visit(r); !st.ok()) return st;
    return absl::OkStatus();
  };
  PerfDataOptions o;
  o.reorder_chunk = 16;
  o.reorder_held = 16;
  o.temp_dir = TempPath("no/such/dir");
  s = WritePerfData(header, {}, whole, o, TempPath("spill.data"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_NE(s.status().message().find("no/such/dir"), std::string::npos) << s.status();
  o.temp_dir.clear();
  s = WritePerfData(header, {}, whole, o, TempPath("spill.data"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->sort_runs, 0u);
  EXPECT_EQ(s->samples, 1000u);
}

TEST(PerfData, RoundsEndEvery64KRecords) {
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < kPerfRoundRecords + 10; ++i) recs.push_back(Branch(i, 0x401000, 0));
  PerfFile f = Export(RecordTrace(recs), "rounds.data");
  std::vector<size_t> at;
  for (size_t i = 0; i < f.records.size(); ++i)
    if (f.records[i].type == kPerfRecordFinishedRound) at.push_back(i);
  // COMM first; then 65535 samples fill the first round.
  EXPECT_EQ(at, (std::vector<size_t>{kPerfRoundRecords, f.records.size() - 1}));
  EXPECT_EQ(f.OfType(kPerfRecordFinishedRound)[0].bytes.size(), 8u) << "a header alone";
}

// An exec (or dlopen) late in the trace: its COMM and MMAP2 go where its
// time falls among the records, not at the start (where perf's ordered
// delivery, past its first two rounds, would apply them to the samples
// before the exec and count "out of order events").
TEST(PerfData, LaterMapsBlocksAreWrittenAmongTheRecordsAtTheirTime) {
  std::vector<pfm_record> recs;
  for (uint64_t i = 0; i < 200000; ++i) recs.push_back(Branch(1000 + i, 0x401000 + i % 64, 0));
  ProcessMaps a, b;
  a.pid = b.pid = 42;
  a.time_ns = 0;
  a.mappings.push_back({0x401000, 0x402000, 0, "/bin/a", false, false});
  b.time_ns = 181000;
  b.mappings.push_back({0x401000, 0x403000, 0, "/bin/b", false, false});
  PerfDataOptions options;
  options.all_maps = {&a, &b};
  PerfFile f = Export(RecordTrace(recs), "late_exec.data", options);
  ASSERT_EQ(f.OfType(PERF_RECORD_SAMPLE).size(), 200000u);
  uint64_t last = 0;
  size_t disorder = 0, exec_comm = 0, exec_mmap = 0;
  for (size_t i = 0; i < f.records.size(); ++i) {
    const std::optional<uint64_t> t = RecordTime(f, f.records[i]);
    if (!t) continue;
    if (*t < last && disorder++ < 3)
      ADD_FAILURE() << "record " << i << " (type " << f.records[i].type << ") at " << *t
                    << " after one at " << last;
    last = std::max(last, *t);
    if (f.records[i].type == PERF_RECORD_COMM &&
        std::string(f.records[i].bytes.c_str() + 16) == "b")
      exec_comm = i;
    if (f.records[i].type == PERF_RECORD_MMAP2 &&
        std::string(f.records[i].bytes.c_str() + 72) == "/bin/b")
      exec_mmap = i;
  }
  EXPECT_EQ(disorder, 0u);
  // The exec's COMM and MMAP2 right before the first sample of its time.
  ASSERT_GT(exec_comm, 0u);
  EXPECT_EQ(exec_mmap, exec_comm + 1);
  EXPECT_EQ(RecordTime(f, f.records[exec_comm]), 181000u);
  ASSERT_LT(exec_mmap + 1, f.records.size());
  EXPECT_EQ(f.records[exec_mmap + 1].type, static_cast<uint32_t>(PERF_RECORD_SAMPLE));
  EXPECT_EQ(RecordTime(f, f.records[exec_mmap + 1]), 181000u);
  EXPECT_EQ(RecordTime(f, f.records[exec_comm - 1]), 180999u);
}

// A child process (not the traced command) gets a COMM with its mappings;
// its other threads get the same name (else perf shows ":TID").
TEST(PerfData, AChildsOtherThreadsAreNamedWithIt) {
  Trace t = RecordTrace({Branch(1000, 0x401000, 0), Rec(PFM_REC_SWITCH_IN, 1100, 50, 50),
                         Rec(PFM_REC_SWITCH_IN, 1200, 50, 52),
                         Rec(PFM_REC_SWITCH_IN, 1150, 50, 51)});
  ProcessMaps child;
  child.pid = 50;
  child.time_ns = 1050;
  child.mappings.push_back({0x401000, 0x402000, 0, "/usr/bin/child", false, false});
  PerfDataOptions options;
  options.all_maps = {&child};
  PerfFile f = Export(t, "child_threads.data", options);
  std::vector<std::pair<uint32_t, std::string>> comms;  // tid, comm
  for (const PerfRecord& c : f.OfType(PERF_RECORD_COMM))
    if (c.U32(8) == 50) comms.emplace_back(c.U32(12), c.bytes.c_str() + 16);
  EXPECT_EQ(comms, (std::vector<std::pair<uint32_t, std::string>>{
                       {50, "child"}, {51, "child"}, {52, "child"}}))
      << "the process, then its threads in the order of their first records";
  EXPECT_EQ(f.OfType(PERF_RECORD_COMM)[1].misc, PERF_RECORD_MISC_COMM_EXEC);
  EXPECT_EQ(f.OfType(PERF_RECORD_COMM)[2].misc, 0) << "a thread is no exec";
}

// A CPU's trace: the trailer's counters are the cpu's, not some process's.
TEST(PerfData, CpuTraceCountersAreTheCpusOfNoTask) {
  Trace t;
  t.header = {{"kind", "snapshot"}, {"ring", {{"target", "cpu 3"}}}};
  pfm_record a = Rec(PFM_REC_SWITCH_IN, 100, 1000, 1000);
  pfm_record b = Rec(PFM_REC_SWITCH_IN, 200, 2000, 2001);
  a.cpu = b.cpu = 3;
  t.records = {a, b};
  t.trailer = {{"counters", json::array{{{"event", "cycles"},
                                         {"value", 5},
                                         {"time_enabled", 7},
                                         {"time_running", 7}}}}};
  PerfFile f = Export(t, "cpu_reads.data");
  std::vector<PerfRecord> reads = f.OfType(PERF_RECORD_READ);
  ASSERT_EQ(reads.size(), 1u);
  const PerfRecord& r = reads[0];
  EXPECT_EQ(r.U32(8), 0xffffffffu) << "pid";
  EXPECT_EQ(r.U32(12), 0xffffffffu) << "tid";
  EXPECT_EQ(r.U64(16), 5u);
  // The trailer: pid/tid, time, cpu (one event, cycles: no IDENTIFIER).
  const size_t n = r.bytes.size();
  ASSERT_EQ(n, 8u + 32 + 24);
  EXPECT_EQ(r.U32(n - 24), 0xffffffffu);
  EXPECT_EQ(r.U32(n - 20), 0xffffffffu);
  EXPECT_EQ(r.U64(n - 16), 200u) << "the last record's time";
  EXPECT_EQ(r.U32(n - 8), 3u) << "the traced cpu";
  EXPECT_EQ(f.features[kPerfFeatNrCpus], std::string("\x04\0\0\0\x04\0\0\0", 8));

  // spec.cpu says it too; a task's trace keeps the process.
  t.header = {{"kind", "record"}, {"spec", {{"cpu", 2}}}};
  PerfFile g = Export(t, "cpu_reads_spec.data");
  ASSERT_EQ(g.OfType(PERF_RECORD_READ).size(), 1u);
  EXPECT_EQ(g.OfType(PERF_RECORD_READ)[0].U32(8), 0xffffffffu);
  EXPECT_EQ(g.OfType(PERF_RECORD_READ)[0].U32(n - 8), 2u);
  t.header = {{"kind", "record"}, {"pid", 1000}};
  PerfFile h = Export(t, "task_reads.data");
  ASSERT_EQ(h.OfType(PERF_RECORD_READ).size(), 1u);
  EXPECT_EQ(h.OfType(PERF_RECORD_READ)[0].U32(8), 1000u);
  EXPECT_EQ(h.OfType(PERF_RECORD_READ)[0].U32(12), 1000u);
  EXPECT_EQ(h.OfType(PERF_RECORD_READ)[0].U32(n - 8), 0u);
}

// Records perf gets nothing of (RESIZED, SCHEDULE, GAP, EXEC, unknown
// types) say nothing of the times, cpus or threads.
TEST(PerfData, SkippedRecordsSayNothingOfTimesCpusOrThreads) {
  pfm_record resized = Rec(PFM_REC_RESIZED, 10, 42, 99);
  resized.cpu = 7;
  pfm_record unknown = Rec(77, 9000, 42, 98);
  unknown.cpu = 9;
  PerfFile f = Export(RecordTrace({resized, Branch(1000, 0x401000, 0),
                                   Branch(2000, 0x401000, 0), unknown}),
                      "skipped_times.data");
  const std::string& t = f.features[kPerfFeatSampleTime];
  ASSERT_EQ(t.size(), 16u);
  EXPECT_EQ(Le(t, 0, 8), 1000u);
  EXPECT_EQ(Le(t, 8, 8), 2000u);
  EXPECT_EQ(f.features[kPerfFeatNrCpus], std::string("\x02\0\0\0\x02\0\0\0", 8))
      << "cpus 0..1: the branches' cpu 1";
  std::vector<PerfRecord> comm = f.OfType(PERF_RECORD_COMM);
  ASSERT_EQ(comm.size(), 1u) << "no COMM for a thread only skipped records name";
  EXPECT_EQ(RecordTime(f, comm[0]), 1000u) << "the first exported record's time";
}

// The second pass is what is written: a branch where the first pass had
// none (the file rewritten in between) has no event to go to.
TEST(PerfData, ABranchTheFirstPassDidNotSeeIsDataLoss) {
  int pass = 0;
  auto changing = [&](const PerfRecordVisitor& visit) -> absl::Status {
    return visit(++pass == 1 ? Pebs(10, 0x401000, 0x1000, 1, 3) : Branch(10, 0x401000, 0));
  };
  json::object header = RecordTrace({}).header;
  header["spec"] = json::object{{"bts", "off"}};
  absl::StatusOr<PerfDataSummary> s =
      WritePerfData(header, {}, changing, {}, TempPath("changed.data"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_NE(s.status().message().find("changed while it was exported"), std::string::npos)
      << s.status();
}

TEST(PerfData, CountersInTheTrailerBecomeNamedEventsWithReads) {
  Trace t = RecordTrace({Branch(1000, 0x401000, 0x401100), Branch(2000, 0x401000, 0x401100)});
  t.trailer = {{"counters", json::array{{{"event", "task-clock"},
                                         {"request", 1},
                                         {"value", 5000000},
                                         {"time_enabled", 6000000},
                                         {"time_running", 3000000}},
                                        {{"event", "L2_RQSTS.MISS"},
                                         {"value", 12},
                                         {"time_enabled", 1},
                                         {"time_running", 1}},
                                        {{"event", "cycles"}}}}};  // not readable
  PerfDataSummary sum;
  PerfFile f = Export(t, "counters.data", {}, &sum);
  EXPECT_EQ(sum.events,
            (std::vector<std::string>{"branches:u", "task-clock", "L2_RQSTS.MISS", "cycles"}));
  EXPECT_EQ(Le(f.Attr(1), 0, 4), static_cast<uint64_t>(PERF_TYPE_SOFTWARE));
  EXPECT_EQ(Le(f.Attr(1), 8, 8), static_cast<uint64_t>(PERF_COUNT_SW_TASK_CLOCK));
  EXPECT_EQ(Le(f.Attr(1), 16, 8), 0u) << "counting, not sampling";
  EXPECT_EQ(Le(f.Attr(2), 0, 4), static_cast<uint64_t>(PERF_TYPE_RAW));
  EXPECT_EQ(Le(f.Attr(3), 0, 4), static_cast<uint64_t>(PERF_TYPE_HARDWARE));
  EXPECT_EQ(Le(f.Attr(3), 8, 8), static_cast<uint64_t>(PERF_COUNT_HW_CPU_CYCLES));
  std::vector<PerfRecord> reads = f.OfType(PERF_RECORD_READ);
  ASSERT_EQ(reads.size(), 2u) << "no reading for the counter without a value";
  // header, pid, tid, value, enabled, running, pid+tid, time, cpu+res, id.
  EXPECT_EQ(reads[0].bytes.size(), 8u + 32 + 32);
  EXPECT_EQ(reads[0].U32(8), 42u);
  EXPECT_EQ(reads[0].U64(16), 5000000u);
  EXPECT_EQ(reads[0].U64(24), 6000000u);
  EXPECT_EQ(reads[0].U64(32), 3000000u);
  EXPECT_EQ(reads[0].U64(48), 2000u) << "at the last record's time";
  EXPECT_EQ(reads[0].U64(64), 2u);
  EXPECT_EQ(reads[1].U64(16), 12u);
  EXPECT_EQ(reads[1].U64(64), 3u);
  EXPECT_EQ(f.Types().back(), kPerfRecordFinishedRound);

  // EVENT_DESC: n, attr size, then per event attr, ids, name, the ids.
  const std::string& d = f.features[kPerfFeatEventDesc];
  ASSERT_GE(d.size(), 8u);
  EXPECT_EQ(Le(d, 0, 4), 4u);
  EXPECT_EQ(Le(d, 4, 4), 128u);
  size_t off = 8;
  std::vector<std::string> names;
  for (uint64_t id = 1; id <= 4; ++id) {
    EXPECT_EQ(d.substr(off, 128), f.Attr(id - 1));
    off += 128;
    EXPECT_EQ(Le(d, off, 4), 1u);
    EXPECT_EQ(Le(d, off + 4, 4) % 64, 0u) << "strings padded to 64";
    size_t next;
    names.push_back(HeaderString(d, off + 4, &next));
    EXPECT_EQ(Le(d, next, 8), id);
    off = next + 8;
  }
  EXPECT_EQ(off, d.size());
  EXPECT_EQ(names, sum.events);
}

TEST(PerfData, HeaderFeaturesHoldCpusCmdlineAndSampleTimes) {
  pfm_record b = Branch(1000, 0x401000, 0x401100);
  b.cpu = 5;
  PerfDataOptions options;
  options.cmdline = {"pfmctl", "export", std::string(63, 'x')};
  PerfFile f = Export(RecordTrace({b, Branch(4000, 0x401000, 0x401100)}), "features.data",
                      options);
  EXPECT_EQ(f.features[kPerfFeatNrCpus], std::string("\x06\0\0\0\x06\0\0\0", 8))
      << "available, online: cpus 0..5";
  const std::string& c = f.features[kPerfFeatCmdline];
  EXPECT_EQ(Le(c, 0, 4), 3u);
  size_t off = 4;
  EXPECT_EQ(Le(c, off, 4), 64u);
  EXPECT_EQ(HeaderString(c, off, &off), "pfmctl");
  EXPECT_EQ(HeaderString(c, off, &off), "export");
  EXPECT_EQ(Le(c, off, 4), 64u) << "63 bytes and the NUL";
  EXPECT_EQ(HeaderString(c, off, &off), std::string(63, 'x'));
  EXPECT_EQ(off, c.size());
  const std::string& t = f.features[kPerfFeatSampleTime];
  EXPECT_EQ(Le(t, 0, 8), 1000u);
  EXPECT_EQ(Le(t, 8, 8), 4000u);
}

TEST(PerfData, CpuTraceSwitchesNameTheOtherTask) {
  Trace t;
  t.header = {{"kind", "snapshot"}, {"ring", {{"target", "cpu 0"}}}};
  pfm_record out = Rec(PFM_REC_SWITCH_OUT, 10, 1000, 1000);
  out.u.sw.other_pid = 1002;
  out.u.sw.other_tid = 1003;
  t.records = {out};
  PerfFile f = Export(t, "cpu.data");
  std::vector<PerfRecord> sw = f.OfType(PERF_RECORD_SWITCH_CPU_WIDE);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].misc, PERF_RECORD_MISC_SWITCH_OUT);
  EXPECT_EQ(sw[0].U32(8), 1002u);
  EXPECT_EQ(sw[0].U32(12), 1003u);
  EXPECT_EQ(sw[0].U32(16), 1000u) << "the trailer's pid: the task switched out";
}

TEST(PerfData, MalformedHeaderAndTrailerFieldsAreIgnored) {
  Trace t;
  t.header = {{"pid", "forty-two"}, {"command", 7}, {"spec", "user"}, {"ring", 3}};
  t.trailer = {{"counters", json::array{7, {{"event", 3}}, {{"event", "x"}, {"value", "12"}},
                                        {{"event", "y"}, {"value", -1}, {"time_enabled", 1},
                                         {"time_running", 1}}}}};
  t.records = {Branch(1, 0x401000, 0x401100)};
  PerfDataSummary sum;
  PerfFile f = Export(t, "malformed.data", {}, &sum);
  EXPECT_EQ(sum.events, (std::vector<std::string>{"branches", "x", "y"}));
  EXPECT_EQ(sum.reads, 0u) << "no counter had a whole reading";
  EXPECT_TRUE(f.OfType(PERF_RECORD_COMM).empty()) << "no command, no comm";
  t.trailer = {{"counters", "none"}};
  Export(t, "malformed2.data");
}

TEST(PerfData, ADamagedTraceNamingThousandsOfRequestsGetsBoundedEvents) {
  std::vector<pfm_record> recs;
  for (uint32_t i = 0; i < 1000; ++i) {
    recs.push_back(Pebs(i, 0x401000, 0, 0, i));
    pfm_record c = Rec(PFM_REC_COUNTER, i);
    c.u.counter.request = 100000 + i;
    recs.push_back(c);
  }
  PerfDataSummary sum;
  PerfFile f = Export(RecordTrace(recs), "many.data", {}, &sum);
  EXPECT_EQ(f.Attrs(), 256u);
  EXPECT_EQ(sum.samples + sum.skipped["pebs"], 1000u);
  EXPECT_EQ(sum.reads + sum.skipped["counter"], 1000u);
  EXPECT_EQ(sum.samples, 255u) << "the branches event (bts on in the spec) and 255 PEBS";
  EXPECT_EQ(sum.reads, 0u);
}

TEST(PerfData, FileIsCreatedForTheCallerAndItsErrorsNameIt) {
  const std::string path = TempPath("mode.data");
  ASSERT_TRUE(WritePerfData(RecordTrace({}), {}, path).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0600, 0600u);
  EXPECT_EQ(st.st_mode & 0133, 0u) << "0644 at most (the umask may take more)";
  EXPECT_EQ(st.st_uid, ::geteuid());
  absl::StatusOr<PerfDataSummary> s =
      WritePerfData(RecordTrace({}), {}, TempPath("no/such/dir/x.data"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("no/such/dir/x.data"), std::string::npos);
  s = WritePerfData(RecordTrace({}), {}, TempPath(""));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << "a directory";
}

}  // namespace
}  // namespace pfm
