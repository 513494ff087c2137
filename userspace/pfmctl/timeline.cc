#include "userspace/pfmctl/timeline.h"

#include <algorithm>
#include <map>
#include <utility>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Tracks of a session's requests sit in a process of their own in the
// Trace Event Format; its "pid" is above any Linux pid (at most 2^22). The
// session id comes from the file, so it is taken modulo 2^30: the pid stays
// below 2^31 for any id (no overflow, and a 32-bit pid holds it).
constexpr int64_t kSessionTrackPid = int64_t{1} << 30;

const json::array* ArrayAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? &v->get_array() : nullptr;
}
std::optional<uint64_t> UintAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  return std::nullopt;
}
std::string StringAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : "";
}

// The trailer's counters and breakpoints (pfmd's session_show), by request.
void NameRequests(const json::object& trailer, std::map<uint32_t, RequestTrack>* out) {
  auto take = [&](const char* list, const char* name_key, bool breakpoint) {
    const json::array* a = ArrayAt(trailer, list);
    if (a == nullptr) return;
    for (const json::value& v : *a) {
      if (!v.is_object()) continue;
      const json::object& c = v.get_object();
      const std::optional<uint64_t> id = UintAt(c, "request");
      if (!id || *id == 0 || *id > UINT32_MAX) continue;
      RequestTrack& r = (*out)[static_cast<uint32_t>(*id)];
      r.request = static_cast<uint32_t>(*id);
      r.name = StringAt(c, name_key);
      r.breakpoint = breakpoint;
      r.time_running = UintAt(c, "time_running");
      r.time_enabled = UintAt(c, "time_enabled");
    }
  };
  take("counters", "event", false);
  take("breakpoints", "spec", true);
}

double Us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control bytes are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}



// The timeline in two passes over the records, in any order: Scan sees
// every record (the time span; the records slices are made of are kept,
// losses summed), Count every branch and PEBS sample again (per-bucket
// counts need the span first), Finish orders the kept records and builds
// the slices. Memory: the kept records and the buckets (at most
// kMaxBucketedThreads threads' worth), never the branches.
class TimelineBuilder {
 public:
  void Scan(const pfm_record& r) {
    if (seen_ == 0 || r.time < start_) start_ = r.time;
    if (seen_ == 0 || r.time > end_) end_ = r.time;
    ++seen_;
    switch (r.type) {
      case PFM_REC_SWITCH_IN:
      case PFM_REC_SWITCH_OUT:
      case PFM_REC_EXIT:
      case PFM_REC_SCHEDULE:
        events_.push_back(r);
        break;
      case PFM_REC_LOST:
        // Saturating: the counts come from the file.
        t_.lost = r.u.lost.count > UINT64_MAX - t_.lost ? UINT64_MAX
                                                        : t_.lost + r.u.lost.count;
        break;
      default:
        // Branches and samples are counted by Count; nothing else (gaps,
        // counters, execs, ...) has a place in the timeline, and gaps can
        // be as many as the branches.
        break;
    }
  }
  uint64_t scanned() const { return seen_; }

  // After the last Scan: the bucket width from the span.
  void Begin() {
    t_.start = seen_ ? start_ : 0;
    t_.end = seen_ ? end_ : 0;
    const uint64_t span = t_.end - t_.start;
    // [start, end] holds span + 1 ns: the width is (span + 1) / N rounded
    // up, so the last record's bucket is below N. span / N + 1 is that
    // without a sum that wraps near 2^64 (the times come from the file).
    t_.bucket_ns = std::max<uint64_t>(1000, span / kMaxTimelineBuckets + 1);
    buckets_ = static_cast<size_t>(span / t_.bucket_ns) + 1;
  }

  // A record seen by Scan (others, outside the span, are not counted).
  void Count(const pfm_record& r) {
    if (r.type != PFM_REC_BRANCH && r.type != PFM_REC_PEBS) return;
    if (r.time < t_.start || r.time > t_.end) return;
    ThreadTrack& th = Thread(r.pid, r.tid);
    const size_t bucket = static_cast<size_t>((r.time - t_.start) / t_.bucket_ns);
    if (r.type == PFM_REC_BRANCH) {
      ++th.branches;
      if (PerBucket(th, &th.branches_per_bucket)) ++th.branches_per_bucket[bucket];
    } else {
      ++th.samples;
      if (PerBucket(th, &th.samples_per_bucket)) ++th.samples_per_bucket[bucket];
    }
  }

  Timeline Finish(const json::object& header, const json::object& trailer);

 private:
  ThreadTrack& Thread(uint32_t pid, uint32_t tid) {
    ThreadTrack& th = threads_[{pid, tid}];
    th.pid = pid;
    th.tid = tid;
    return th;
  }

  // Whether *v, one of th's per-bucket arrays, is there to count in, made
  // now if th is among the first kMaxBucketedThreads threads with a count:
  // a 64-byte record must not cost a thread 8 KB of buckets without bound.
  bool PerBucket(const ThreadTrack& th, std::vector<uint64_t>* v) {
    if (!v->empty()) return true;
    if (th.branches_per_bucket.empty() && th.samples_per_bucket.empty()) {
      if (bucketed_threads_ == kMaxBucketedThreads) return false;
      ++bucketed_threads_;
    }
    v->assign(buckets_, 0);
    return true;
  }

  Timeline t_;
  uint64_t seen_ = 0, start_ = 0, end_ = 0;
  size_t buckets_ = 1;
  size_t bucketed_threads_ = 0;
  std::vector<pfm_record> events_;  // switches, exits, schedules
  std::map<std::pair<uint32_t, uint32_t>, ThreadTrack> threads_;
};

Timeline TimelineBuilder::Finish(const json::object& header, const json::object& trailer) {
  Timeline t = std::move(t_);
  t.records = seen_;
  t.slice_records = events_.size();
  t.session = UintAt(header, "session").value_or(0);
  const std::string command = StringAt(header, "command");
  const std::optional<uint64_t> target_pid = UintAt(header, "pid");
  if (!command.empty() && target_pid) {
    t.title = absl::StrCat("pid ", *target_pid, " (", command, ")");
  } else {
    t.title = absl::StrCat("session ", t.session);
  }
  // Records need not be in time order (a drain stamps branches after the
  // switch that ended them); slices are built in time order, equal times
  // in the trace's order.
  std::stable_sort(events_.begin(), events_.end(),
                   [](const pfm_record& a, const pfm_record& b) { return a.time < b.time; });

  struct Open { uint64_t start; uint16_t cpu; uint32_t slot; };
  std::map<std::pair<uint32_t, uint32_t>, Open> running;
  std::map<uint32_t, RequestTrack> requests;
  NameRequests(trailer, &requests);
  std::map<uint32_t, Open> on_hw;

  auto close_run = [&](uint32_t pid, uint32_t tid, uint64_t end, const char* why) {
    auto it = running.find({pid, tid});
    if (it == running.end()) return false;
    Thread(pid, tid).runs.push_back(RunSlice{it->second.start, end, it->second.cpu, why});
    running.erase(it);
    return true;
  };
  auto close_on = [&](uint32_t request, uint64_t end) {
    auto it = on_hw.find(request);
    if (it == on_hw.end()) return false;
    RequestTrack& r = requests[request];
    r.request = request;
    r.on.push_back(OnSlice{it->second.start, end, it->second.cpu, it->second.slot});
    r.on_ns += end - it->second.start;
    on_hw.erase(it);
    return true;
  };

  for (const pfm_record& rec : events_) {
    const pfm_record* r = &rec;
    switch (r->type) {
      case PFM_REC_SWITCH_IN:
        close_run(r->pid, r->tid, r->time, "trace gap");
        Thread(r->pid, r->tid);
        running[{r->pid, r->tid}] = Open{r->time, r->cpu, 0};
        break;
      case PFM_REC_SWITCH_OUT: {
        const char* why = (r->misc & PFM_MISC_SWITCH_PREEMPT) ? "preempted" : "voluntary";
        if (!close_run(r->pid, r->tid, r->time, why)) {
          // Running when the trace began.
          ThreadTrack& th = Thread(r->pid, r->tid);
          if (th.runs.empty()) th.runs.push_back(RunSlice{t.start, r->time, r->cpu, why});
        }
        break;
      }
      case PFM_REC_EXIT:
        close_run(r->pid, r->tid, r->time, "exit");
        break;
      case PFM_REC_SCHEDULE: {
        ++t.schedule_records;
        const uint32_t id = r->u.sched.request;
        RequestTrack& rq = requests[id];
        rq.request = id;
        if (r->misc & PFM_MISC_SCHED_ON) {
          close_on(id, r->time);  // on twice: the first ends here
          on_hw[id] = Open{r->time, r->cpu, r->u.sched.slot};
        } else if (!close_on(id, r->time) && rq.on.empty()) {
          // On when the trace began.
          rq.on.push_back(OnSlice{t.start, r->time, r->cpu, r->u.sched.slot});
          rq.on_ns += r->time - t.start;
        }
        break;
      }
      default:
        break;
    }
  }
  while (!running.empty()) {
    const auto key = running.begin()->first;
    close_run(key.first, key.second, t.end, "trace end");
  }
  while (!on_hw.empty()) close_on(on_hw.begin()->first, t.end);

  for (auto& [key, th] : threads_) {
    if (th.branches + th.samples > 0 && th.branches_per_bucket.empty() &&
        th.samples_per_bucket.empty())
      ++t.unbucketed_threads;
    t.threads.push_back(std::move(th));
  }
  for (auto& [id, r] : requests) {
    if (r.name.empty()) r.name = absl::StrCat("request ", id);
    t.requests.push_back(std::move(r));
  }
  return t;
}

}  // namespace

Timeline BuildTimeline(const Trace& trace) {
  TimelineBuilder b;
  for (const pfm_record& r : trace.records) b.Scan(r);
  b.Begin();
  for (const pfm_record& r : trace.records) b.Count(r);
  Timeline t = b.Finish(trace.header, trace.trailer);
  t.complete = trace.complete;
  t.cut_reason = trace.cut_reason;
  return t;
}

absl::StatusOr<Timeline> BuildTimelineFromFile(const std::string& path) {
  TimelineBuilder b;
  json::object header, trailer;
  bool complete = false;
  std::string cut_reason;
  {
    absl::StatusOr<TraceReader> reader = TraceReader::Open(path);
    if (!reader.ok()) return reader.status();
    for (;;) {
      absl::StatusOr<TraceReader::Event> e = reader->Next();
      if (!e.ok()) return e.status();
      if (*e == TraceReader::Event::kEnd) break;
      if (*e == TraceReader::Event::kRecords)
        for (const pfm_record& r : reader->records()) b.Scan(r);
      if (*e == TraceReader::Event::kTrailer) trailer = reader->trailer();
    }
    header = reader->header();
    complete = reader->complete();
    cut_reason = reader->cut_reason();
  }
  b.Begin();
  // The second pass counts the records the first saw (a file still being
  // written may have more by now).
  if (absl::Status s = ForFirstRecords(path, b.scanned(),
                                       [&](const pfm_record& r) {
                                         b.Count(r);
                                         return absl::OkStatus();
                                       });
      !s.ok())
    return s;
  Timeline t = b.Finish(header, trailer);
  t.complete = complete;
  t.cut_reason = cut_reason;
  return t;
}

std::string ChromeTraceJson(const Timeline& t) {
  json::array ev;
  auto meta = [&](const char* what, int64_t pid, int64_t tid, const std::string& name) {
    ev.push_back(json::object{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid},
                              {"args", json::object{{"name", name}}}});
  };
  std::map<uint32_t, bool> named_pids;
  for (const ThreadTrack& th : t.threads) {
    if (!named_pids[th.pid]) {
      named_pids[th.pid] = true;
      meta("process_name", th.pid, th.pid, absl::StrCat("pid ", th.pid));
    }
    meta("thread_name", th.pid, th.tid, absl::StrCat("tid ", th.tid));
    for (const RunSlice& s : th.runs) {
      ev.push_back(json::object{{"ph", "X"}, {"cat", "sched"}, {"name", "running"},
                                {"pid", th.pid}, {"tid", th.tid}, {"ts", Us(s.start)},
                                {"dur", Us(s.end - s.start)},
                                {"args", json::object{{"cpu", s.cpu}, {"ended_by", s.ended_by}}}});
    }
    // One sample per bucket, zeros included: a counter track holds its
    // value until the next sample.
    auto counts = [&](const std::vector<uint64_t>& per_bucket, const char* what) {
      for (size_t b = 0; b < per_bucket.size(); ++b) {
        ev.push_back(json::object{
            {"ph", "C"}, {"name", absl::StrCat(what, " tid ", th.tid)}, {"pid", th.pid},
            {"tid", th.tid}, {"ts", Us(t.start + b * t.bucket_ns)},
            {"args", json::object{{what, per_bucket[b]}}}});
      }
    };
    counts(th.branches_per_bucket, "branches");
    counts(th.samples_per_bucket, "samples");
  }
  if (!t.requests.empty()) {
    const int64_t pid =
        kSessionTrackPid +
        static_cast<int64_t>(t.session % static_cast<uint64_t>(kSessionTrackPid));
    meta("process_name", pid, 0,
         absl::StrCat("pfm session ", t.session, ": counters and breakpoints on hardware"));
    for (const RequestTrack& r : t.requests) {
      meta("thread_name", pid, r.request, absl::StrCat(r.name, " (request ", r.request, ")"));
      for (const OnSlice& s : r.on) {
        ev.push_back(json::object{{"ph", "X"}, {"cat", "pmu"}, {"name", r.name},
                                  {"pid", pid}, {"tid", r.request}, {"ts", Us(s.start)},
                                  {"dur", Us(s.end - s.start)},
                                  {"args", json::object{{"cpu", s.cpu}, {"slot", s.slot}}}});
      }
    }
  }
  json::object other{{"title", t.title},
                     {"session", t.session},
                     {"lost_records", t.lost},
                     {"bucket_ns", t.bucket_ns}};
  if (t.unbucketed_threads > 0) other["threads_without_buckets"] = t.unbucketed_threads;
  json::object root{{"traceEvents", std::move(ev)},
                    {"displayTimeUnit", "ns"},
                    {"otherData", std::move(other)}};
  return json::serialize(root);
}

std::string TimelineSvg(const Timeline& t) {
  constexpr int kLabelW = 300, kPlotW = 900, kRowH = 22, kTop = 40, kPad = 3;
  const int rows = static_cast<int>(t.threads.size() + t.requests.size());
  const int height = kTop + std::max(rows, 1) * kRowH + 30;
  const double span = static_cast<double>(std::max<uint64_t>(t.end - t.start, 1));
  auto x = [&](uint64_t ns) {
    return kLabelW + kPlotW * static_cast<double>(ns - t.start) / span;
  };
  auto w = [&](uint64_t a, uint64_t b) {
    return std::max(0.5, kPlotW * static_cast<double>(b - a) / span);
  };
  std::string s = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"monospace\" font-size=\"12\">\n"
      "<title>%s</title>\n"
      "<text x=\"4\" y=\"16\">%s: %.3f ms, %u threads, %u requests</text>\n",
      kLabelW + kPlotW + 20, height, XmlEscape(t.title), XmlEscape(t.title),
      span / 1e6, static_cast<unsigned>(t.threads.size()),
      static_cast<unsigned>(t.requests.size()));
  int row = 0;
  auto row_y = [&](int r) { return kTop + r * kRowH; };
  for (const ThreadTrack& th : t.threads) {
    const int y = row_y(row++);
    s += absl::StrFormat(
        "<g class=\"thread\"><text x=\"4\" y=\"%d\">pid %u tid %u: %u branches</text>\n", y + 15,
        th.pid, th.tid, static_cast<unsigned>(th.branches));
    for (const RunSlice& r : th.runs) {
      s += absl::StrFormat(
          "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#4a90d9\">"
          "<title>running on cpu %u, %.3f ms, ended: %s</title></rect>\n",
          x(r.start), y + kPad, w(r.start, r.end), kRowH - 2 * kPad, r.cpu,
          static_cast<double>(r.end - r.start) / 1e6, XmlEscape(r.ended_by));
    }
    s += "</g>\n";
  }
  for (const RequestTrack& r : t.requests) {
    const int y = row_y(row++);
    const std::string reported =
        r.time_running ? absl::StrFormat(", reported %.3f ms", *r.time_running / 1e6) : "";
    s += absl::StrFormat(
        "<g class=\"request\"><text x=\"4\" y=\"%d\">%s: on %.3f ms%s</text>\n", y + 15,
        XmlEscape(r.name), r.on_ns / 1e6, reported);
    for (const OnSlice& o : r.on) {
      s += absl::StrFormat(
          "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">"
          "<title>%s on cpu %u slot %u, %.3f ms</title></rect>\n",
          x(o.start), y + kPad, w(o.start, o.end), kRowH - 2 * kPad,
          r.breakpoint ? "#d98c4a" : "#5cb85c", XmlEscape(r.name), o.cpu, o.slot,
          static_cast<double>(o.end - o.start) / 1e6);
    }
    s += "</g>\n";
  }
  const int axis_y = row_y(std::max(rows, 1)) + 12;
  s += absl::StrFormat(
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
      "<text x=\"%d\" y=\"%d\">%.3f ms</text>\n<text x=\"%d\" y=\"%d\" "
      "text-anchor=\"end\">%.3f ms</text>\n</svg>\n",
      kLabelW, axis_y - 10, kLabelW + kPlotW, axis_y - 10, kLabelW, axis_y + 4,
      t.start / 1e6, kLabelW + kPlotW, axis_y + 4, t.end / 1e6);
  return s;
}

}  // namespace pfm
