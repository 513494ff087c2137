#include "userspace/pfmctl/timeline.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "libpfm-bts/testing/peak_rss.h"

namespace pfm {
namespace {

namespace json = boost::json;

pfm_record Rec(uint16_t type, uint64_t time, uint32_t pid, uint32_t tid, uint16_t cpu = 0) {
  pfm_record r{};
  r.type = type;
  r.time = time;
  r.pid = pid;
  r.tid = tid;
  r.cpu = cpu;
  return r;
}
pfm_record Sched(uint64_t time, uint32_t request, bool on, uint16_t cpu, uint32_t slot) {
  pfm_record r = Rec(PFM_REC_SCHEDULE, time, 100, 100, cpu);
  r.misc = on ? PFM_MISC_SCHED_ON : 0;
  r.u.sched.request = request;
  r.u.sched.slot = slot;
  return r;
}
pfm_record Branch(uint64_t time, uint32_t tid) {
  pfm_record r = Rec(PFM_REC_BRANCH, time, 100, tid);
  r.u.branch.from = 0x401000;
  r.u.branch.to = 0x401020;
  return r;
}

// Thread 100 runs [1000, 5000) (preempted), [8000, 9000) (exit); thread 101
// runs from before the trace to 3000; request 7 is on [1000, 4000) and
// [6000, end); request 9 was on when the trace began, off at 2000. Records
// come out of time order, as a drain after a switch writes them.
Trace Synthetic() {
  Trace t;
  t.header = json::object{{"session", 3}, {"kind", "record"}, {"command", "a.out"}, {"pid", 100}};
  t.trailer = json::object{
      {"counters", json::array{json::object{{"event", "cycles"}, {"request", 7},
                                            {"time_running", 6000}, {"time_enabled", 9000}}}},
      {"breakpoints", json::array{json::object{{"spec", "0x401000:1:x"}, {"request", 9}}}}};
  pfm_record out = Rec(PFM_REC_SWITCH_OUT, 5000, 100, 100);
  out.misc = PFM_MISC_SWITCH_PREEMPT;
  t.records = {Rec(PFM_REC_SWITCH_IN, 1000, 100, 100), Sched(1000, 7, true, 0, 2),
               Branch(1500, 100), Branch(1200, 100), Sched(2000, 9, false, 1, 0),
               Rec(PFM_REC_SWITCH_OUT, 3000, 100, 101, 1), Sched(4000, 7, false, 0, 2),
               out, Sched(6000, 7, true, 0, 3), Rec(PFM_REC_SWITCH_IN, 8000, 100, 100),
               Branch(8500, 100), Rec(PFM_REC_PEBS, 8600, 100, 100),
               Rec(PFM_REC_EXIT, 9000, 100, 100)};
  return t;
}

TEST(Timeline, SlicesFromSwitchAndScheduleRecords) {
  const Timeline t = BuildTimeline(Synthetic());
  EXPECT_EQ(t.start, 1000u);
  EXPECT_EQ(t.end, 9000u);
  EXPECT_EQ(t.session, 3u);
  EXPECT_EQ(t.title, "pid 100 (a.out)");
  ASSERT_EQ(t.threads.size(), 2u);
  const ThreadTrack& main = t.threads[0];
  EXPECT_EQ(main.tid, 100u);
  ASSERT_EQ(main.runs.size(), 2u);
  EXPECT_EQ(main.runs[0].start, 1000u);
  EXPECT_EQ(main.runs[0].end, 5000u);
  EXPECT_EQ(main.runs[0].ended_by, "preempted");
  EXPECT_EQ(main.runs[1].start, 8000u);
  EXPECT_EQ(main.runs[1].end, 9000u);
  EXPECT_EQ(main.runs[1].ended_by, "exit");
  EXPECT_EQ(main.branches, 3u);
  EXPECT_EQ(main.samples, 1u);
  uint64_t in_buckets = 0;
  for (uint64_t n : main.samples_per_bucket) in_buckets += n;
  EXPECT_EQ(in_buckets, 1u);
  const ThreadTrack& other = t.threads[1];
  ASSERT_EQ(other.runs.size(), 1u);
  EXPECT_EQ(other.runs[0].start, 1000u);  // running when the trace began
  EXPECT_EQ(other.runs[0].end, 3000u);
  EXPECT_EQ(other.runs[0].ended_by, "voluntary");

  ASSERT_EQ(t.requests.size(), 2u);
  const RequestTrack& cycles = t.requests[0];
  EXPECT_EQ(cycles.request, 7u);
  EXPECT_EQ(cycles.name, "cycles");
  ASSERT_EQ(cycles.on.size(), 2u);
  EXPECT_EQ(cycles.on[1].start, 6000u);
  EXPECT_EQ(cycles.on[1].end, 9000u);  // still on at the end
  EXPECT_EQ(cycles.on[1].slot, 3u);
  EXPECT_EQ(cycles.on_ns, 3000u + 3000u);
  EXPECT_EQ(cycles.on_ns, *cycles.time_running);
  const RequestTrack& bp = t.requests[1];
  EXPECT_TRUE(bp.breakpoint);
  EXPECT_EQ(bp.name, "0x401000:1:x");
  ASSERT_EQ(bp.on.size(), 1u);
  EXPECT_EQ(bp.on[0].start, 1000u);
  EXPECT_EQ(bp.on_ns, 1000u);
}

TEST(Timeline, ChromeJsonObeysTheTraceEventFormat) {
  const Timeline t = BuildTimeline(Synthetic());
  const json::value v = json::parse(ChromeTraceJson(t));
  const json::array& ev = v.at("traceEvents").as_array();
  std::map<std::string, int> by_ph;
  int by_name_prefix_samples = 0;
  double on_us_request7 = 0;
  for (const json::value& e : ev) {
    const json::object& o = e.as_object();
    const std::string ph(o.at("ph").as_string());
    ++by_ph[ph];
    if (o.at("name").as_string().starts_with("samples tid")) ++by_name_prefix_samples;
    EXPECT_TRUE(o.at("name").is_string());
    EXPECT_TRUE(o.at("pid").is_number());
    EXPECT_TRUE(o.at("tid").is_number());
    if (ph != "M") {
      EXPECT_TRUE(o.at("ts").is_number());
    }
    if (ph == "X") {
      EXPECT_GE(o.at("dur").to_number<double>(), 0.0);
      if (o.at("name").as_string() == "cycles") {
        on_us_request7 += o.at("dur").to_number<double>();
      }
    }
  }
  EXPECT_EQ(by_ph["X"], 3 + 3);  // 3 running slices, 3 on-hardware slices
  EXPECT_GT(by_ph["C"], 0);
  EXPECT_GT(by_name_prefix_samples, 0);
  EXPECT_EQ(by_ph["M"], 1 + 2 + 1 + 2);  // pid, 2 threads, session, 2 requests
  EXPECT_DOUBLE_EQ(on_us_request7, 6.0);  // 6000 ns
  EXPECT_EQ(v.at("displayTimeUnit").as_string(), "ns");
}

TEST(Timeline, SvgHasOneRowPerThreadAndRequestAndEscapesNames) {
  Trace tr = Synthetic();
  tr.trailer.at("breakpoints").as_array()[0].as_object()["spec"] = "a<b&\"c\"";
  const std::string svg = TimelineSvg(BuildTimeline(tr));
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t p = svg.find(what); p != std::string::npos; p = svg.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<g class=\"thread\">"), 2u);
  EXPECT_EQ(count("<g class=\"request\">"), 2u);
  EXPECT_EQ(count("<rect "), 6u);
  EXPECT_NE(svg.find("a&lt;b&amp;&quot;c&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

TEST(Timeline, EmptyTraceGivesAnEmptyButValidTimeline) {
  Trace tr;
  const Timeline t = BuildTimeline(tr);
  EXPECT_TRUE(t.threads.empty());
  EXPECT_TRUE(t.requests.empty());
  const json::value v = json::parse(ChromeTraceJson(t));
  EXPECT_TRUE(v.at("traceEvents").as_array().empty());
  EXPECT_NE(TimelineSvg(t).find("</svg>"), std::string::npos);
}

// The synthetic trace's records with 30,000 more branches of three threads
// spread over its span, written to a file in pieces of 1,000 records (the
// reader hands out 4,096 at a time): BuildTimelineFromFile, which streams
// the file twice and keeps no branch, gives what BuildTimeline of the whole
// trace in memory gives, to the last bucket; and so does a copy of the file
// cut in the middle of a block (the timeline of what is readable, marked
// cut).
TEST(Timeline, FromTheFileIsTheTimelineOfTheWholeTraceInMemory) {
  Trace tr = Synthetic();
  std::vector<pfm_record> recs = tr.records;
  for (uint32_t i = 0; i < 30000; ++i) {
    // Out of time order on purpose, within the synthetic span.
    const uint64_t time = 1000 + (uint64_t{i} * 7919) % 8000;
    recs.insert(recs.begin() + (i % recs.size()), Branch(time, 100 + i % 3));
  }
  tr.records = recs;
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(d ? d : "/tmp") + "/timeline_stream.pfmtrace";
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(path, tr.header);
    ASSERT_TRUE(w.ok()) << w.status();
    for (size_t i = 0; i < recs.size(); i += 1000)
      ASSERT_TRUE(w->Append(recs.data() + i, std::min<size_t>(1000, recs.size() - i)).ok());
    ASSERT_TRUE(w->Finish(tr.trailer).ok());
  }
  absl::StatusOr<Timeline> streamed = BuildTimelineFromFile(path);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  const Timeline in_memory = BuildTimeline(tr);
  EXPECT_EQ(streamed->records, recs.size());
  EXPECT_TRUE(streamed->complete);
  ASSERT_EQ(streamed->threads.size(), 3u);
  uint64_t branches = 0;
  for (const ThreadTrack& th : streamed->threads) branches += th.branches;
  EXPECT_EQ(branches, 30000u + 3u);
  // Every slice, bucket and name: the Trace Event Format output of both.
  EXPECT_EQ(ChromeTraceJson(*streamed), ChromeTraceJson(in_memory));
  EXPECT_EQ(TimelineSvg(*streamed), TimelineSvg(in_memory));

  // Cut: the first half of the file's bytes.
  const std::string cut_path = path + ".cut";
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(cut_path, std::ios::binary | std::ios::trunc);
    out << bytes.substr(0, bytes.size() / 2);
  }
  absl::StatusOr<Trace> cut_whole = ReadTrace(cut_path);
  ASSERT_TRUE(cut_whole.ok()) << cut_whole.status();
  absl::StatusOr<Timeline> cut = BuildTimelineFromFile(cut_path);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_FALSE(cut->complete);
  EXPECT_EQ(cut->cut_reason, cut_whole->cut_reason);
  EXPECT_GT(cut->records, 10000u);
  EXPECT_LT(cut->records, recs.size());
  EXPECT_EQ(ChromeTraceJson(*cut), ChromeTraceJson(BuildTimeline(*cut_whole)));

  // Not a trace: the reader's error, nothing built.
  EXPECT_EQ(BuildTimelineFromFile(std::string(d ? d : "/tmp")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Times are the file's: a span of the whole 2^64 ns still gives at most
// kMaxTimelineBuckets buckets (the width must not wrap to 1 us and ask for
// 1.8e16), and so does a span that is a whole number of buckets (the last
// record's bucket is one past span / width). A session id near 2^64 still
// gives the session's tracks a pid above any Linux pid.
TEST(Timeline, ExtremeTimesAndSessionsStayInBounds) {
  for (const uint64_t end : {UINT64_MAX, uint64_t{1000} * kMaxTimelineBuckets,
                             uint64_t{1000} * kMaxTimelineBuckets * 1000}) {
    SCOPED_TRACE(end);
    Trace tr;
    tr.header = json::object{{"session", UINT64_MAX}};
    tr.records = {Branch(0, 100), Branch(end, 100), Sched(end, 5, true, 0, 1)};
    Timeline t;
    ASSERT_NO_THROW(t = BuildTimeline(tr));
    ASSERT_EQ(t.threads.size(), 1u);
    const ThreadTrack& th = t.threads[0];
    EXPECT_LE(th.branches_per_bucket.size(), kMaxTimelineBuckets);
    EXPECT_GE(th.branches_per_bucket.size(), kMaxTimelineBuckets - 1);
    EXPECT_EQ(th.branches_per_bucket.front(), 1u);
    EXPECT_EQ(th.branches_per_bucket.back(), 1u);
    EXPECT_EQ(th.branches, 2u);
    EXPECT_GE(t.bucket_ns * (th.branches_per_bucket.size() - 1), end / 2);
    const json::value v = json::parse(ChromeTraceJson(t));
    bool session_track = false;
    for (const json::value& e : v.at("traceEvents").as_array()) {
      const json::object& o = e.as_object();
      if (o.at("ph").as_string() != "M" || o.at("name").as_string() != "process_name") continue;
      const std::string name(o.at("args").at("name").as_string());
      if (name.rfind("pfm session ", 0) != 0) continue;
      session_track = true;
      const int64_t pid = o.at("pid").to_number<int64_t>();
      EXPECT_GE(pid, int64_t{1} << 30);
      EXPECT_LT(pid, int64_t{1} << 31);
    }
    EXPECT_TRUE(session_track);
  }
}

// The ended_by values timeline.h lists, "trace gap" among them.
TEST(Timeline, SecondSwitchInWithoutAnOutEndsTheRunAsATraceGap) {
  Trace tr;
  tr.records = {Rec(PFM_REC_SWITCH_IN, 1000, 100, 100), Rec(PFM_REC_SWITCH_IN, 3000, 100, 100),
                Rec(PFM_REC_SWITCH_OUT, 4000, 100, 100)};
  const Timeline t = BuildTimeline(tr);
  ASSERT_EQ(t.threads.size(), 1u);
  ASSERT_EQ(t.threads[0].runs.size(), 2u);
  EXPECT_EQ(t.threads[0].runs[0].ended_by, "trace gap");
  EXPECT_EQ(t.threads[0].runs[0].end, 3000u);
  EXPECT_EQ(t.threads[0].runs[1].ended_by, "voluntary");
}

// docs/timeline.md: the JSON's decimal ts is the exact ns up to 2^43 us
// (about 101 days of uptime), and no further.
TEST(Timeline, JsonTimesAreExactNanosecondsUpTo2To43Microseconds) {
  auto ts_text = [](uint64_t ns) {
    Trace tr;
    tr.records = {Rec(PFM_REC_SWITCH_IN, ns, 100, 100)};
    const std::string j = ChromeTraceJson(BuildTimeline(tr));
    const size_t at = j.find("\"ts\":");
    EXPECT_NE(at, std::string::npos) << j;
    return at == std::string::npos ? std::string()
                                   : j.substr(at + 5, j.find_first_of(",}", at) - at - 5);
  };
  // ns whose every digit matters, below and at the bound.
  const uint64_t below = (uint64_t{1} << 43) * 1000 - 1;  // 8796093022207.999 us
  EXPECT_EQ(std::stold(ts_text(below)), 8796093022207.999L) << ts_text(below);
  EXPECT_NE(std::stold(ts_text(below + 2)), 8796093022208.001L) << ts_text(below + 2);
}

using testing::PeakRssGrowthKib;

// GAP records can be as many as the branches; they, and every other record
// slices are not made of, are not held. 500,000 of them (32 MB) in a file:
// the timeline holds its two switches, and the build's peak memory stays
// far below the records'.
TEST(Timeline, HoldsOnlyTheRecordsSlicesAreMadeOf) {
  std::vector<pfm_record> recs;
  recs.push_back(Rec(PFM_REC_SWITCH_IN, 1000, 100, 100));
  for (uint32_t i = 0; i < 500000; ++i) {
    const uint16_t types[] = {PFM_REC_GAP, PFM_REC_COUNTER, PFM_REC_EXEC, PFM_REC_THROTTLE,
                              PFM_REC_RESIZED, 0x7777};
    recs.push_back(Rec(types[i % 6], 1000 + i, 100, 100));
  }
  pfm_record lost = Rec(PFM_REC_LOST, 2000, 100, 100);
  lost.u.lost.count = 42;
  recs.push_back(lost);
  recs.push_back(Rec(PFM_REC_SWITCH_OUT, 600000, 100, 100));
  const char* d = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(d ? d : "/tmp") + "/timeline_gaps.pfmtrace";
  {
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(path, json::object{{"session", 1}});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append(recs.data(), recs.size()).ok());
    ASSERT_TRUE(w->Finish(json::object{}).ok());
  }
  recs.clear();
  recs.shrink_to_fit();
  absl::StatusOr<Timeline> t = absl::InternalError("not built");
  const long growth = PeakRssGrowthKib([&] { t = BuildTimelineFromFile(path); });
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->records, 500003u);
  EXPECT_EQ(t->slice_records, 2u);
  EXPECT_EQ(t->lost, 42u);
  ASSERT_EQ(t->threads.size(), 1u);
  ASSERT_EQ(t->threads[0].runs.size(), 1u);
  EXPECT_EQ(t->threads[0].runs[0].end, 600000u);
  if (growth < 0) {
    ADD_FAILURE() << "cannot reset the peak RSS to measure the build";
  } else {
    EXPECT_LT(growth, 8 * 1024) << "KiB to build from 32 MB of records";
  }
}

// Every distinct (pid, tid) with a branch could cost 8 KB of buckets per
// 64-byte record; past kMaxBucketedThreads threads keep their totals only,
// and the JSON says how many.
TEST(Timeline, PerBucketCountsForAtMostTheMaxBucketedThreads) {
  constexpr uint32_t kThreads = 3000;
  Trace tr;
  for (uint32_t i = 0; i < kThreads; ++i) {
    tr.records.push_back(Branch(1000 + i, 1000 + i));
    tr.records.push_back(Rec(PFM_REC_PEBS, 4000 - i, 100, 1000 + i));
  }
  const Timeline t = BuildTimeline(tr);
  ASSERT_EQ(t.threads.size(), kThreads);
  size_t bucketed = 0, cells = 0;
  for (const ThreadTrack& th : t.threads) {
    EXPECT_EQ(th.branches, 1u);
    EXPECT_EQ(th.samples, 1u);
    // Both arrays or neither.
    EXPECT_EQ(th.branches_per_bucket.empty(), th.samples_per_bucket.empty()) << th.tid;
    if (!th.branches_per_bucket.empty()) ++bucketed;
    cells += th.branches_per_bucket.size() + th.samples_per_bucket.size();
  }
  EXPECT_EQ(bucketed, kMaxBucketedThreads);
  EXPECT_LE(cells, 2 * kMaxBucketedThreads * kMaxTimelineBuckets);
  EXPECT_EQ(t.unbucketed_threads, kThreads - kMaxBucketedThreads);
  // The first in the trace's order have them.
  EXPECT_FALSE(t.threads[0].branches_per_bucket.empty());
  EXPECT_TRUE(t.threads.back().branches_per_bucket.empty());
  const json::value v = json::parse(ChromeTraceJson(t));
  EXPECT_EQ(v.at("otherData").at("threads_without_buckets").to_number<uint64_t>(),
            kThreads - kMaxBucketedThreads);
}

}  // namespace
}  // namespace pfm
