// perf_ring on synthetic ring memory laid out as the kernel lays it out
// (include/uapi/linux/perf_event.h): this is how BTS-via-perf and PEBS
// samples are tested on machines without that hardware.
#include "kernel/drivers/perf/perf_ring.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

// A fake kernel: owns 1 + data_pages pages and appends records at data_head.
class FakeRing {
 public:
  explicit FakeRing(size_t data_pages) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    len_ = page_ * (1 + data_pages);
    mem_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    meta()->data_offset = page_;
    meta()->data_size = page_ * data_pages;
  }
  ~FakeRing() { munmap(mem_, len_); }
  perf_event_mmap_page* meta() { return static_cast<perf_event_mmap_page*>(mem_); }
  void* base() { return mem_; }
  size_t len() const { return len_; }
  uint8_t* data() { return static_cast<uint8_t*>(mem_) + page_; }

  // Appends a record made of a header and u64 payload words.
  void Append(uint32_t type, uint16_t misc, const std::vector<uint64_t>& words) {
    perf_event_header h{type, misc, static_cast<uint16_t>(8 + 8 * words.size())};
    std::vector<uint8_t> bytes(h.size);
    std::memcpy(bytes.data(), &h, 8);
    if (!words.empty()) std::memcpy(bytes.data() + 8, words.data(), 8 * words.size());
    AppendBytes(bytes);
  }
  void AppendBytes(const std::vector<uint8_t>& bytes) {
    const uint64_t size = meta()->data_size;
    for (size_t i = 0; i < bytes.size(); ++i)
      data()[(head_ + i) & (size - 1)] = bytes[i];
    head_ += bytes.size();
    __atomic_store_n(&meta()->data_head, head_, __ATOMIC_RELEASE);
  }
  // Moves head and tail to `pos` (as if that much had been written and read).
  void Seek(uint64_t pos) {
    head_ = pos;
    meta()->data_head = pos;
    meta()->data_tail = pos;
  }

 private:
  size_t page_ = 0;
  size_t len_ = 0;
  void* mem_ = nullptr;
  uint64_t head_ = 0;
};

uint64_t PidTid(uint32_t pid, uint32_t tid) { return uint64_t(tid) << 32 | pid; }

TEST(PerfRing, ParsesSamplesInKernelFieldOrder) {
  FakeRing ring(1);
  const uint64_t type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                        PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU |
                        PERF_SAMPLE_PERIOD | PERF_SAMPLE_WEIGHT |
                        PERF_SAMPLE_DATA_SRC;
  ring.Append(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER,
              {0x401000, PidTid(100, 101), 5555, 0xdead0, 3, 1000, 42, 0x1234});
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), type, false, &d), 0) << d.message;
  std::vector<PerfRecord> got;
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { got.push_back(rec); }, &d), 1);
  ASSERT_EQ(got.size(), 1u);
  const PerfSample& s = got[0].sample;
  EXPECT_EQ(got[0].type, uint32_t{PERF_RECORD_SAMPLE});
  EXPECT_EQ(s.ip, 0x401000u);
  EXPECT_EQ(s.pid, 100u);
  EXPECT_EQ(s.tid, 101u);
  EXPECT_EQ(s.time, 5555u);
  EXPECT_EQ(s.addr, 0xdead0u);
  EXPECT_EQ(s.cpu, 3u);
  EXPECT_EQ(s.period, 1000u);
  EXPECT_EQ(s.weight, 42u);
  EXPECT_EQ(s.data_src, 0x1234u);
  EXPECT_EQ(ring.meta()->data_tail, ring.meta()->data_head);
  EXPECT_EQ(r.pending(), 0u);
}

TEST(PerfRing, SkipsCallchainAndRawToReachLaterFields) {
  FakeRing ring(1);
  const uint64_t type = PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN |
                        PERF_SAMPLE_RAW | PERF_SAMPLE_WEIGHT_STRUCT |
                        PERF_SAMPLE_DATA_SRC;
  // callchain nr=2; raw size=12 (u32 size + 12 bytes = 16, u64-aligned);
  // weight struct {var1_dw=77, var2_w=5, var3_w=6}.
  const uint64_t raw_first = uint64_t{0xAAAAAAAA} << 32 | 12;
  const uint64_t weight = uint64_t{6} << 48 | uint64_t{5} << 32 | 77;
  ring.Append(PERF_RECORD_SAMPLE, 0,
              {0x1000, 2, 0x11, 0x22, raw_first, 0xBBBBBBBBBBBBBBBBull, weight,
               0x99});
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), type, false, &d), 0) << d.message;
  PerfSample s;
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { s = rec.sample; }, &d), 1)
      << d.message;
  EXPECT_EQ(s.ip, 0x1000u);
  EXPECT_EQ(s.weight, 77u);
  EXPECT_EQ(s.data_src, 0x99u);
}

TEST(PerfRing, ParsesSwitchRecordsWithSampleIdTrailer) {
  FakeRing ring(1);
  const uint64_t type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  ring.Append(PERF_RECORD_SWITCH,
              PERF_RECORD_MISC_SWITCH_OUT | PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
              {PidTid(7, 8), 100, 1});
  ring.Append(PERF_RECORD_SWITCH, 0, {PidTid(7, 8), 200, 1});
  ring.Append(PERF_RECORD_SWITCH_CPU_WIDE, PERF_RECORD_MISC_SWITCH_OUT,
              {PidTid(9, 10), PidTid(7, 8), 300, 0});
  ring.Append(PERF_RECORD_LOST, 0, {5, 17, PidTid(7, 8), 400, 1});
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), type, true, &d), 0) << d.message;
  std::vector<PerfRecord> got;
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { got.push_back(rec); }, &d), 4);
  EXPECT_TRUE(got[0].switch_out);
  EXPECT_TRUE(got[0].switch_preempt);
  EXPECT_EQ(got[0].sample_id.pid, 7u);
  EXPECT_EQ(got[0].sample_id.tid, 8u);
  EXPECT_EQ(got[0].sample_id.time, 100u);
  EXPECT_EQ(got[0].sample_id.cpu, 1u);
  EXPECT_FALSE(got[1].switch_out);
  EXPECT_FALSE(got[1].switch_preempt);
  EXPECT_EQ(got[1].sample_id.time, 200u);
  EXPECT_EQ(got[2].type, uint32_t{PERF_RECORD_SWITCH_CPU_WIDE});
  EXPECT_TRUE(got[2].switch_out);
  EXPECT_FALSE(got[2].switch_preempt);
  EXPECT_EQ(got[2].next_prev_pid, 9u);
  EXPECT_EQ(got[2].next_prev_tid, 10u);
  EXPECT_EQ(got[2].sample_id.cpu, 0u);
  EXPECT_EQ(got[3].type, uint32_t{PERF_RECORD_LOST});
  EXPECT_EQ(got[3].lost_id, 5u);
  EXPECT_EQ(got[3].lost, 17u);
}

TEST(PerfRing, CopiesOutARecordThatWrapsTheDataAreaEnd) {
  FakeRing ring(1);
  const uint64_t size = ring.meta()->data_size;
  // Start 16 bytes before the end: a 40-byte sample wraps after 16.
  ring.Seek(3 * size - 16);
  const uint64_t type = PERF_SAMPLE_IP | PERF_SAMPLE_ADDR |
                        PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  ring.Append(PERF_RECORD_SAMPLE, 0, {0xAAAA, 0xBBBB, 0xCCCC, 7});
  ring.Append(PERF_RECORD_SAMPLE, 0, {0x1111, 0x2222, 0x3333, 1});
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), type, false, &d), 0);
  std::vector<PerfSample> got;
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { got.push_back(rec.sample); }, &d), 2);
  EXPECT_EQ(got[0].ip, 0xAAAAu);
  EXPECT_EQ(got[0].time, 0xBBBBu);
  EXPECT_EQ(got[0].addr, 0xCCCCu);
  EXPECT_EQ(got[0].cpu, 7u);
  EXPECT_EQ(got[1].ip, 0x1111u);
  EXPECT_EQ(got[1].cpu, 1u);
}

TEST(PerfRing, SkipsUnknownTypesBySize) {
  FakeRing ring(1);
  ring.Append(PERF_RECORD_MMAP2, 0, {1, 2, 3, 4, 5, 6, 7});
  ring.Append(0x7777, 0, {});
  ring.Append(PERF_RECORD_SAMPLE, 0, {0x42});
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), PERF_SAMPLE_IP, false, &d), 0);
  std::vector<PerfRecord> got;
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { got.push_back(rec); }, &d), 3);
  EXPECT_EQ(got[0].type, uint32_t{PERF_RECORD_MMAP2});
  EXPECT_EQ(got[2].sample.ip, 0x42u);
}

TEST(PerfRing, StopsSafelyOnACorruptSize) {
  const uint16_t bad_sizes[] = {0, 4, 12, 4096};
  for (uint16_t bad : bad_sizes) {
    FakeRing ring(1);
    ring.Append(PERF_RECORD_SAMPLE, 0, {0x1});
    perf_event_header h{PERF_RECORD_SAMPLE, 0, bad};
    std::vector<uint8_t> bytes(16, 0);
    std::memcpy(bytes.data(), &h, 8);
    ring.AppendBytes(bytes);
    ring.Append(PERF_RECORD_SAMPLE, 0, {0x3});
    PerfRingReader r;
    ErrorDetail d;
    ASSERT_EQ(r.Init(ring.base(), ring.len(), PERF_SAMPLE_IP, false, &d), 0);
    std::vector<uint64_t> ips;
    EXPECT_EQ(r.Read([&](const PerfRecord& rec) { ips.push_back(rec.sample.ip); }, &d),
              -EIO)
        << bad;
    EXPECT_NE(std::strstr(d.message, "corrupt"), nullptr) << d.message;
    ASSERT_EQ(ips.size(), 1u) << bad;
    EXPECT_EQ(ips[0], 0x1u);
    // The rest was dropped and counted; the ring is usable again.
    EXPECT_EQ(r.discarded_bytes(), 32u) << bad;
    EXPECT_EQ(r.pending(), 0u);
    ring.Append(PERF_RECORD_SAMPLE, 0, {0x4});
    ips.clear();
    EXPECT_EQ(r.Read([&](const PerfRecord& rec) { ips.push_back(rec.sample.ip); }, &d), 1);
    ASSERT_EQ(ips.size(), 1u);
    EXPECT_EQ(ips[0], 0x4u);
  }
}

TEST(PerfRing, RefusesASampleTooShortForItsFields) {
  FakeRing ring(1);
  ring.Append(PERF_RECORD_SAMPLE, 0, {0x1});  // IP only, TIME missing
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), PERF_SAMPLE_IP | PERF_SAMPLE_TIME,
                   false, &d),
            0);
  int calls = 0;
  EXPECT_EQ(r.Read([&](const PerfRecord&) { ++calls; }, &d), -EIO);
  EXPECT_EQ(calls, 0);
}

TEST(PerfRing, InitRefusesBadGeometryAndUnparseableSampleTypes) {
  FakeRing ring(2);
  PerfRingReader r;
  ErrorDetail d;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(r.Init(ring.base(), page, PERF_SAMPLE_IP, false, &d), -EINVAL);
  EXPECT_EQ(r.Init(ring.base(), 4 * page, PERF_SAMPLE_IP, false, &d), -EINVAL);
  EXPECT_EQ(r.Init(ring.base(), ring.len(),
                   PERF_SAMPLE_IP | PERF_SAMPLE_BRANCH_STACK, false, &d),
            -EINVAL);
  EXPECT_NE(std::strstr(d.message, "sample_type"), nullptr);
  EXPECT_EQ(r.Read([](const PerfRecord&) {}, &d), -EINVAL);
}

TEST(PerfRing, TranslatesBtsAndPebsSamplesToRawHardwareRecords) {
  // BTS via perf: branch-instructions, period 1, IP|ADDR.
  FakeRing ring(1);
  const uint64_t bts_type = PERF_SAMPLE_IP | PERF_SAMPLE_ADDR;
  PerfRingReader r;
  ErrorDetail d;
  ASSERT_EQ(r.Init(ring.base(), ring.len(), bts_type, false, &d), 0);
  // 300 records of 24 bytes are more than one page: written and read in two
  // halves, the second half wraps the data area end.
  std::vector<pfm_bts_raw> bts;
  for (uint64_t i = 0; i < 150; ++i)
    ring.Append(PERF_RECORD_SAMPLE, 0, {0x400000 + i, 0x500000 + i});
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { bts.push_back(BtsFromSample(rec.sample)); }, &d), 150);
  for (uint64_t i = 150; i < 300; ++i)
    ring.Append(PERF_RECORD_SAMPLE, 0, {0x400000 + i, 0x500000 + i});
  ASSERT_EQ(r.Read([&](const PerfRecord& rec) { bts.push_back(BtsFromSample(rec.sample)); }, &d), 150);
  ASSERT_EQ(bts.size(), 300u);
  for (uint64_t i = 0; i < 300; ++i) {
    EXPECT_EQ(bts[i].from, 0x400000 + i);
    EXPECT_EQ(bts[i].to, 0x500000 + i);
  }

  // PEBS via perf: precise_ip with IP|ADDR|WEIGHT|DATA_SRC.
  FakeRing pring(1);
  const uint64_t pebs_type = PERF_SAMPLE_IP | PERF_SAMPLE_TIME |
                             PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT |
                             PERF_SAMPLE_DATA_SRC;
  pring.Append(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_EXACT_IP,
               {0x401234, 999, 0x7fff0000, 250, 0x68100142});
  PerfRingReader pr;
  ASSERT_EQ(pr.Init(pring.base(), pring.len(), pebs_type, false, &d), 0);
  pfm_pebs_raw p{};
  uint16_t misc = 0;
  ASSERT_EQ(pr.Read([&](const PerfRecord& rec) {
              p = PebsFromSample(rec.sample, 2);
              misc = rec.misc;
            }, &d), 1);
  EXPECT_TRUE(misc & PERF_RECORD_MISC_EXACT_IP);
  EXPECT_EQ(p.ip, 0x401234u);
  EXPECT_EQ(p.eventing_ip, 0x401234u);
  EXPECT_EQ(p.data_linear_address, 0x7fff0000u);
  EXPECT_EQ(p.latency, 250u);
  EXPECT_EQ(p.data_source, 0x68100142u);
  EXPECT_EQ(p.applicable_counters, 1u << 2);
}

}  // namespace
}  // namespace pfm
