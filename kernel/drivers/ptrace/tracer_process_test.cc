// TracerProcess's side of the helper protocol for mapping lists, against a
// fake helper: this binary run again by TracerProcess::Start (its `exe`),
// which sends the kMaps messages of a scenario named in the environment
// instead of tracing anything. What pfmd keeps, and what it refuses by
// closing the channel, without a real tracer's timing in the way
// (tests/host_tasks_e2e_test.cc runs the real helper).
#include "kernel/drivers/ptrace/tracer_process.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernel/drivers/driver.h"
#include "kernel/drivers/ptrace/tracer_protocol.h"
#include "kernel/kernel_lock.h"
#include "kernel/uapi/proc_maps.h"

namespace pfm {
namespace {

using tracer_protocol::Frame;
using tracer_protocol::kMaps;
using tracer_protocol::kMapsCut;
using tracer_protocol::kMapsMore;
using tracer_protocol::MapsPayloads;
using tracer_protocol::kMaxMapsListBytes;
using tracer_protocol::kMaxMsgBytes;
using tracer_protocol::kStarted;
using tracer_protocol::MsgHeader;
using tracer_protocol::ReadMsg;
using tracer_protocol::WriteAll;

constexpr char kScenarioEnv[] = "PFM_FAKE_HELPER_SCENARIO";

// `n` mappings from `first` on, each with a `path_bytes`-byte path.
std::vector<Mapping> Mappings(size_t first, size_t n, size_t path_bytes) {
  std::vector<Mapping> out;
  for (size_t i = first; i < first + n; ++i) {
    Mapping m;
    m.start = 0x400000 + 0x2000 * i;
    m.end = m.start + 0x1000;
    m.path = "/" + std::string(path_bytes - 1, static_cast<char>('a' + i % 26));
    out.push_back(std::move(m));
  }
  return out;
}

// One kMaps message: pid, flags, and the mappings encoded.
std::string MapsFrame(int32_t pid, uint32_t flags, const std::vector<Mapping>& maps) {
  std::string p(8, '\0');
  std::memcpy(p.data(), &pid, 4);
  std::memcpy(p.data() + 4, &flags, 4);
  std::string enc;
  EncodeMappings(maps, SIZE_MAX, &enc);
  p += enc;
  return Frame(kMaps, p.data(), static_cast<uint32_t>(p.size()));
}

// The fake helper: kStarted, the scenario's messages, then it waits for
// pfmd to tell it to stop or to close the channel, and exits 0.
int RunFakeHelper(pid_t pid, const std::string& scenario) {
  constexpr int fd = 3;
  char started[4 + 256] = {};
  if (!WriteAll(fd, Frame(kStarted, started, sizeof(started)).data(),
                Frame(kStarted, started, sizeof(started)).size(), true))
    return 1;
  std::vector<std::string> frames;
  if (scenario == "parts") {
    // One list in three parts, then a newer list whole.
    frames.push_back(MapsFrame(pid, kMapsMore, Mappings(0, 3, 20)));
    frames.push_back(MapsFrame(pid, kMapsMore, Mappings(3, 3, 20)));
    frames.push_back(MapsFrame(pid, 0, Mappings(6, 2, 20)));
    frames.push_back(MapsFrame(pid, 0, Mappings(0, 1, 20)));
  } else if (scenario == "interleaved") {
    // A part of another process's list before this one's last part.
    frames.push_back(MapsFrame(pid, kMapsMore, Mappings(0, 3, 20)));
    frames.push_back(MapsFrame(pid + 1, 0, Mappings(0, 1, 20)));
  } else if (scenario == "bad_flags") {
    frames.push_back(MapsFrame(pid, 4, Mappings(0, 1, 20)));
  } else if (scenario == "cut") {
    // What the real helper sends for a list over kMaxMapsListBytes (about
    // 17 MiB: 4200 mappings with 4000-byte paths), then for one the tracer
    // read cut (ParseProcMaps over kMaxMappings), then a whole one.
    auto add = [&](const std::string& p) {
      frames.push_back(Frame(kMaps, p.data(), static_cast<uint32_t>(p.size())));
    };
    MapsPayloads(pid, Mappings(0, 4200, 4000), false, add);
    MapsPayloads(pid, Mappings(0, 2, 20), true, add);
    MapsPayloads(pid, Mappings(0, 3, 20), false, add);
  } else if (scenario == "over_list_budget") {
    // Parts of about 128 KiB each, never the last, past 16 MiB.
    const std::string part = MapsFrame(pid, kMapsMore, Mappings(0, 32, 4000));
    for (size_t sent = 0; sent <= kMaxMapsListBytes; sent += part.size() - 16)
      frames.push_back(part);
  } else if (scenario == "history_bytes") {
    // 12 whole lists of about 4 MiB each (in parts), 48 MiB in all.
    const std::vector<Mapping> chunk = Mappings(0, 32, 4000);
    for (int list = 0; list < 12; ++list) {
      for (int part = 0; part < 31; ++part) frames.push_back(MapsFrame(pid, kMapsMore, chunk));
      frames.push_back(MapsFrame(pid, 0, Mappings(static_cast<size_t>(list), 1, 20)));
    }
  } else {
    return 2;
  }
  for (const std::string& f : frames)
    if (!WriteAll(fd, f.data(), f.size(), true)) break;  // pfmd closed it
  MsgHeader h;
  std::string payload;
  while (ReadMsg(fd, &h, &payload)) {
    if (h.type == tracer_protocol::kStop) break;
  }
  return 0;
}

// The core, for what the reader reports besides maps (nothing here).
class NullCore : public CoreHooks {
 public:
  DsArea* Area(int) override { return nullptr; }
  void DsInterrupt(int, uint64_t) override {}
  void ContextSwitch(int, uint64_t, TaskId, TaskId, bool) override {}
  void TaskExit(TaskId, uint64_t, int64_t) override {}
  TraceConfig TaskConfig(int, TaskId) override { return TraceConfig{}; }
  bool TaskHeld(TaskId) override { return false; }
  int ScheduledCounters(int, ScheduledCounter*, int) override { return 0; }
  void AddCount(uint32_t, uint64_t) override {}
  void Tick(int, uint64_t) override {}
};

class TracerProcessMaps : public ::testing::Test {
 protected:
  // Starts a TracerProcess whose helper plays
  // `scenario`.
  std::unique_ptr<TracerProcess> Start(const std::string& scenario) {
    ::setenv(kScenarioEnv, scenario.c_str(), 1);
    TracerProcess::Host host;
    host.core = &core_;
    host.lock = &lock_;
    std::unique_ptr<TracerProcess> t;
    ErrorDetail d;
    // Any other process's pid: the fake helper attaches to nothing.
    const int rc = TracerProcess::Start(::getppid(), std::nullopt, host, &t, &d);
    ::unsetenv(kScenarioEnv);
    EXPECT_EQ(rc, 0) << d.message;
    return t;
  }
  // Waits until the reader has taken `n` lists in (or the channel ended).
  static void WaitForLists(TracerProcess& t, uint64_t n) {
    for (int i = 0; i < 2000; ++i) {
      uint64_t newest = 0;
      t.maps_since(0, 1, &newest);
      if (newest >= n || t.done()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  static bool EndsSoon(TracerProcess& t) {
    for (int i = 0; i < 1000 && !t.done(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return t.done();
  }
  NullCore core_;
  KernelLock lock_;
};

TEST_F(TracerProcessMaps, AListInPartsIsKeptOnceWholeInAddressOrder) {
  std::unique_ptr<TracerProcess> t = Start("parts");
  ASSERT_NE(t, nullptr);
  WaitForLists(*t, 2);
  uint64_t newest = 0;
  const std::vector<TracerProcess::NumberedMaps> lists = t->maps_since(0, 10, &newest);
  EXPECT_EQ(newest, 2u);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(lists[0].seq, 1u);
  ASSERT_EQ(lists[0].maps->mappings.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(lists[0].maps->mappings[i].start, 0x400000 + 0x2000 * i) << i;
  EXPECT_EQ(lists[1].maps->mappings.size(), 1u);
  EXPECT_EQ(t->maps().mappings.size(), 1u);  // the newest
  EXPECT_FALSE(t->done());
  t->Stop();
}

// A part of another process's list before this one's last part, unknown
// flags, and a list past kMaxMapsListBytes: each closes the channel, and
// no list is kept.
TEST_F(TracerProcessMaps, AMalformedListClosesTheChannel) {
  for (const char* scenario : {"interleaved", "bad_flags", "over_list_budget"}) {
    SCOPED_TRACE(scenario);
    std::unique_ptr<TracerProcess> t = Start(scenario);
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(EndsSoon(*t));
    uint64_t newest = 0;
    EXPECT_TRUE(t->maps_since(0, 10, &newest).empty());
    EXPECT_EQ(newest, 0u);
    t->Stop();
  }
}

// A cut list is kept, marked cut (ProcessMaps::cut), with the mappings
// that fit: the helper's own cut of a list over kMaxMapsListBytes is never
// one pfmd refuses; a list the tracer read cut stays marked; a whole list
// is not.
TEST_F(TracerProcessMaps, ACutListIsKeptMarkedCut) {
  std::unique_ptr<TracerProcess> t = Start("cut");
  ASSERT_NE(t, nullptr);
  WaitForLists(*t, 3);
  uint64_t newest = 0;
  const std::vector<TracerProcess::NumberedMaps> lists = t->maps_since(0, 10, &newest);
  EXPECT_FALSE(t->done()) << "pfmd refused the helper's cut list";
  EXPECT_EQ(newest, 3u);
  ASSERT_EQ(lists.size(), 3u);
  const std::vector<Mapping>& big = lists[0].maps->mappings;
  EXPECT_TRUE(lists[0].maps->cut);
  EXPECT_LT(big.size(), 4200u);
  EXPECT_GT(big.size(), 4000u);  // 16 MiB of 4032-byte entries, less a part
  const std::vector<Mapping> want = Mappings(0, big.size(), 4000);
  EXPECT_TRUE(big == want) << "not the lowest mappings, in address order";
  EXPECT_TRUE(lists[1].maps->cut);
  EXPECT_EQ(lists[1].maps->mappings.size(), 2u);
  EXPECT_FALSE(lists[2].maps->cut);
  EXPECT_EQ(lists[2].maps->mappings.size(), 3u);
  t->Stop();
}

// The helper's parts of one list (MapsPayloads): each at most a part's
// bytes, kMapsMore on all but the last, the mappings in order; kMapsCut on
// the last exactly when mappings were left out (over the list's bytes) or
// the list came cut.
TEST(MapsPayloads, SplitsAndCutsAList) {
  const std::vector<Mapping> maps = Mappings(0, 40, 20);  // 52 bytes encoded each
  struct Part {
    int32_t pid;
    uint32_t flags;
    std::vector<Mapping> m;
  };
  auto split = [](const std::vector<Mapping>& m, bool cut, size_t part, size_t list) {
    std::vector<Part> out;
    MapsPayloads(7, m, cut, [&](const std::string& p) {
      Part x{};
      std::memcpy(&x.pid, p.data(), 4);
      std::memcpy(&x.flags, p.data() + 4, 4);
      EXPECT_LE(p.size() - 8, part);
      EXPECT_EQ(DecodeMappings(std::string_view(p).substr(8), &x.m, nullptr), 0);
      out.push_back(std::move(x));
    }, part, list);
    return out;
  };
  auto joined = [](const std::vector<Part>& parts) {
    std::vector<Mapping> all;
    for (const Part& p : parts) all.insert(all.end(), p.m.begin(), p.m.end());
    return all;
  };
  // Whole, in one part and in parts of 10 mappings (4 + 10 * 52 bytes).
  std::vector<Part> one = split(maps, false, 1 << 20, 1 << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].pid, 7);
  EXPECT_EQ(one[0].flags, 0u);
  EXPECT_TRUE(joined(one) == maps);
  std::vector<Part> parts = split(maps, false, 4 + 10 * 52, 1 << 20);
  ASSERT_EQ(parts.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(parts[i].flags, kMapsMore) << i;
  EXPECT_EQ(parts[3].flags, 0u);
  EXPECT_TRUE(joined(parts) == maps);
  // Over 2 parts' worth of list: two parts, the last cut.
  std::vector<Part> cut = split(maps, false, 4 + 10 * 52, 2 * (4 + 10 * 52));
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(cut[0].flags, kMapsMore);
  EXPECT_EQ(cut[1].flags, kMapsCut);
  const std::vector<Mapping> first20(maps.begin(), maps.begin() + 20);
  EXPECT_TRUE(joined(cut) == first20);
  // Came cut: said on the last part, whole or not.
  std::vector<Part> came = split(maps, true, 4 + 10 * 52, 1 << 20);
  ASSERT_EQ(came.size(), 4u);
  EXPECT_EQ(came[2].flags, kMapsMore);
  EXPECT_EQ(came[3].flags, kMapsCut);
  EXPECT_TRUE(joined(came) == maps);
  // An empty list: one part, no mappings.
  std::vector<Part> none = split({}, false, 4 + 10 * 52, 1 << 20);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].flags, 0u);
  EXPECT_TRUE(none[0].m.empty());
}

// Twelve lists of about 4 MiB: the history keeps at most 32 MiB of them,
// the newest always.
TEST_F(TracerProcessMaps, TheHistoryKeepsItsByteBound) {
  std::unique_ptr<TracerProcess> t = Start("history_bytes");
  ASSERT_NE(t, nullptr);
  WaitForLists(*t, 12);
  uint64_t newest = 0;
  const std::vector<TracerProcess::NumberedMaps> lists = t->maps_since(0, 100, &newest);
  EXPECT_EQ(newest, 12u);
  ASSERT_FALSE(lists.empty());
  EXPECT_EQ(lists.back().seq, 12u);
  size_t bytes = 0;
  for (const TracerProcess::NumberedMaps& l : lists) bytes += l.bytes;
  EXPECT_LE(bytes, TracerProcess::kMaxMapsHistoryBytes);
  EXPECT_GT(bytes, TracerProcess::kMaxMapsHistoryBytes / 2);
  EXPECT_LT(lists.size(), 12u);
  // The newest list is whole: 31 parts of 32 mappings and its last.
  EXPECT_EQ(lists.back().maps->mappings.size(), 31u * 32 + 1);
  EXPECT_FALSE(t->done());
  t->Stop();
}

}  // namespace
}  // namespace pfm

// TracerProcess::Start runs /proc/self/exe with kTracerHelperFlag: here, a
// fake helper.
int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], pfm::kTracerHelperFlag) == 0) {
    const char* scenario = std::getenv(pfm::kScenarioEnv);
    return pfm::RunFakeHelper(static_cast<pid_t>(std::atoi(argv[3])),
                              scenario ? scenario : "");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
