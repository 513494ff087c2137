#include "userspace/pfmctl/capture.h"

#include <poll.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pfm/symbolizer.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Records taken from the ring per Consume: large enough that a busy ring is
// emptied in few passes, each written to the file with one write().
constexpr size_t kBatchRecords = 1 << 16;
constexpr int kIdleWaitMs = 2;
// After a hang-up: 100 polls of 100 ms on the daemon's pidfd.
constexpr int kDaemonExitPolls = 100;
constexpr int kDaemonExitPollMs = 100;

bool Stopped(const StreamOptions& o) { return o.stop != nullptr && *o.stop != 0; }

// ReadMapsLists with `current`: versions of the list followed at most.
constexpr size_t kMaxCurrentRestarts = 8;

}  // namespace

absl::StatusOr<RingReader> MapRing(Client& c, uint64_t id, bool drain,
                                   json::object* info) {
  absl::StatusOr<Client::Reply> r =
      c.Call("session_ring", {{"id", id}, {"drain", drain}});
  if (!r.ok()) return r.status();
  ReplyReader reader("session_ring", r->result);
  const json::object* result = reader.result().Object();
  if (!reader.ok()) return reader.status();
  if (r->fds.size() != 1)
    return ReplyError("session_ring",
                      absl::StrCat("it passed ", r->fds.size(),
                                   " file descriptors, expected 1 (the ring)"));
  absl::StatusOr<RingReader> ring = RingReader::Map(std::move(r->fds[0]));
  // The fd is the daemon's data, not the user's argument: not a usage error.
  if (!ring.ok())
    return ReplyError("session_ring",
                      absl::StrCat("the ring it passed: ", ring.status().message()));
  if (info != nullptr) *info = *result;
  return ring;
}

ProcessMaps ReadMaps(const ReplyNode& maps) {
  ProcessMaps out;
  const ReplyNode pid = maps.Member("pid");
  const int64_t p = pid.Int();
  if (p < INT32_MIN || p > INT32_MAX) pid.Invalid("is not a pid");
  out.pid = static_cast<int32_t>(p);
  out.time_ns = maps.Member("time_ns").Uint();
  // Optional: a pfmd from before it (every list whole up to 16 MiB).
  if (const ReplyNode cut = maps.Member("cut"); cut.present()) out.cut = cut.Bool();
  const ReplyNode list = maps.Member("mappings");
  const std::vector<ReplyNode> elements = list.Elements();
  if (elements.size() > kMaxMappings)
    list.Invalid(absl::StrCat("has ", elements.size(), " mappings, over ", kMaxMappings));
  for (size_t i = 0; i < elements.size() && i < kMaxMappings; ++i) {
    const ReplyNode& e = elements[i];
    Mapping m;
    m.start = e.Member("start").Uint();
    m.end = e.Member("end").Uint();
    m.offset = e.Member("offset").Uint();
    m.path = e.Member("path").String();
    m.writable = e.Member("writable").Bool();
    m.shared = e.Member("shared").Bool();
    if (m.start > m.end) e.Invalid("ends before it starts");
    if (m.path.size() > kMaxMappingPath)
      e.Member("path").Invalid(absl::StrCat("is over ", kMaxMappingPath, " bytes"));
    out.mappings.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::vector<ProcessMaps>> ReadMapsLists(Client& c, uint64_t id,
                                                       bool current) {
  std::vector<ProcessMaps> out;
  std::vector<uint64_t> seqs, totals;  // per list of `out`
  uint64_t seq = 0, mapping = 0;
  std::optional<uint64_t> end;  // the newest list when the first page came
  bool gave_up = false;
  while (!gave_up) {
    json::object args{{"id", id}, {"seq", seq}, {"mapping", mapping}};
    if (current) args["current"] = true;
    absl::StatusOr<Client::Reply> r = c.Call("session_maps", std::move(args));
    if (!r.ok()) return r.status();
    ReplyReader reader("session_maps", r->result);
    const ReplyNode res = reader.result();
    const uint64_t newest = res.Member("newest").Uint();
    if (!end) end = newest;
    for (const ReplyNode& l : res.Member("lists").Elements()) {
      const uint64_t s = l.Member("seq").Uint();
      const uint64_t total = l.Member("total").Uint();
      const ReplyNode first = l.Member("first");
      const uint64_t from = first.Uint();
      ProcessMaps page = ReadMaps(l);
      if (!reader.ok()) break;
      if (s == 0 || s < seq || s > newest) {
        l.Member("seq").Invalid(absl::StrCat("is ", s, ", not a list from ", seq, " to ", newest));
        break;
      }
      if (total > kMaxMappings) {
        l.Member("total").Invalid(absl::StrCat("is ", total, ", over ", kMaxMappings));
        break;
      }
      if (from == 0) {
        // The current list changed under the pages more often than a
        // reader can follow (a list over a page, remade without end): what
        // came whole is kept.
        if (current && out.size() >= kMaxCurrentRestarts) {
          gave_up = true;
          break;
        }
        out.push_back(ProcessMaps{page.time_ns, page.pid, {}, page.cut});
        seqs.push_back(s);
        totals.push_back(total);
      } else if (seqs.empty() || seqs.back() != s || totals.back() != total ||
                 out.back().mappings.size() != from || out.back().pid != page.pid ||
                 out.back().time_ns != page.time_ns || out.back().cut != page.cut) {
        first.Invalid(absl::StrCat("is ", from, ": it continues no list the pages before had"));
        break;
      }
      if (from + page.mappings.size() > total) {
        l.Member("mappings").Invalid(absl::StrCat("has ", page.mappings.size(),
                                                  " mappings from ", from, ", past the total ",
                                                  total));
        break;
      }
      for (Mapping& m : page.mappings) out.back().mappings.push_back(std::move(m));
    }
    const ReplyNode next = res.Member("next");
    uint64_t next_seq = 0, next_mapping = 0;
    if (next.present()) {
      next_seq = next.Member("seq").Uint();
      next_mapping = next.Member("mapping").Uint();
      // Pages only go forward: a reply that does not would loop forever.
      if (reader.ok() && !(next_seq > seq || (next_seq == seq && next_mapping > mapping)))
        next.Invalid(absl::StrCat("is list ", next_seq, " mapping ", next_mapping,
                                  ", not past the page asked for (list ", seq, " mapping ",
                                  mapping, ")"));
    }
    if (!reader.ok()) return reader.status();
    if (gave_up) break;
    // Lists that came after the first page are not waited for (a process
    // that forks without end would keep the pages coming); the current list
    // is followed to its newest version.
    if (!next.present() || (!current && next_seq > *end)) break;
    seq = next_seq;
    mapping = next_mapping;
  }
  // A list the tracer dropped while it was being paged (its oldest lists
  // make room for new ones) is incomplete: left out; and of the current
  // list's versions, only the newest whole one is wanted.
  if (current)
    while (out.size() > 1 && (out.back().mappings.size() != totals.back())) {
      out.pop_back();
      totals.pop_back();
    }
  if (current && out.size() > 1) {
    out.erase(out.begin(), out.end() - 1);
    totals.erase(totals.begin(), totals.end() - 1);
  }
  std::vector<ProcessMaps> complete;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].mappings.size() != totals[i]) continue;
    // The files' build-ids as they are now, at record time: a later report
    // can tell a binary replaced since (pfm/symbolizer.h).
    AddBuildIds(&out[i].mappings);
    complete.push_back(std::move(out[i]));
  }
  return complete;
}

namespace {

// The session (NOT_FOUND) or pfmd (UNAVAILABLE: the connection is gone) is
// gone: a summary is best effort, so nothing is added and it is no error.
bool Gone(const absl::Status& s) {
  return absl::IsNotFound(s) || absl::IsUnavailable(s);
}

// A pfmd older than session_maps (before 2026-11-27) refuses it as an
// unknown command: the trace goes without mapping lists, not without its
// summary.
bool NoSessionMaps(const absl::Status& s) {
  return absl::IsInvalidArgument(s) &&
         absl::StrContains(s.message(), "unknown command 'session_maps'");
}

}  // namespace

absl::Status AddSessionSummary(Client& c, uint64_t id, TraceWriter& w,
                               json::object* trailer) {
  absl::StatusOr<Client::Reply> show = c.Call("session_show", {{"id", id}});
  if (!show.ok()) return absl::OkStatus();  // the session is gone: no summary
  ReplyReader reader("session_show", show->result);
  const ReplyNode s = reader.result();
  const json::object* so = s.Object();
  const ReplyNode soft_bts = s.Member("soft_bts");
  if (soft_bts.present()) soft_bts.Member("steps").Uint();
  if (!reader.ok()) return reader.status();
  // Every list of every traced process (children, programs before an
  // exec): one MAPS block each, in order; then the target's current list.
  absl::StatusOr<std::vector<ProcessMaps>> all = ReadMapsLists(c, id, false);
  absl::StatusOr<std::vector<ProcessMaps>> now = std::vector<ProcessMaps>();
  if (all.ok()) {
    now = ReadMapsLists(c, id, true);
  } else if (NoSessionMaps(all.status())) {
    // Such a pfmd sent the lists in session_show itself: every list
    // ("process_maps", later versions) and the target's current one
    // ("maps"). A soft-BTS session without either goes without, with a
    // warning; other sessions never have lists.
    all = std::vector<ProcessMaps>();
    if (const ReplyNode pm = s.Member("process_maps"); pm.present())
      for (const ReplyNode& e : pm.Elements()) all->push_back(ReadMaps(e));
    const ReplyNode cur = s.Member("maps");
    if (cur.present()) now->push_back(ReadMaps(cur));
    if (!reader.ok()) return reader.status();
    for (ProcessMaps& m : *all) AddBuildIds(&m.mappings);
    for (ProcessMaps& m : *now) AddBuildIds(&m.mappings);
    if (soft_bts.present() && all->empty() && now->empty())
      (*trailer)["maps_missing"] = std::string(kNoSessionMapsWarning);
  }
  if (!all.ok()) return Gone(all.status()) ? absl::OkStatus() : all.status();
  if (!now.ok()) return Gone(now.status()) ? absl::OkStatus() : now.status();
  for (const char* k : {"counters", "breakpoints", "state", "exit_status", "fatal_signal"})
    if (const json::value* v = so->if_contains(k)) (*trailer)[k] = *v;
  if (soft_bts.present()) {
    (*trailer)["steps"] = *soft_bts.Member("steps").json();
    (*trailer)["soft_bts"] = *soft_bts.json();
  }
  // Checked above to be what a MAPS block carries: only a write can fail.
  for (const ProcessMaps& m : *all)
    if (absl::Status st = w.AppendMaps(m); !st.ok()) return st;
  // The target's current list last: a reader that takes the last MAPS
  // block with mappings gets the target's.
  for (const ProcessMaps& m : *now)
    if (absl::Status st = w.AppendMaps(m); !st.ok()) return st;
  return absl::OkStatus();
}

void WarnMissingMaps(const json::object& trailer, std::ostream& err) {
  const json::value* v = trailer.if_contains("maps_missing");
  if (v != nullptr && v->is_string())
    err << "pfmctl: warning: " << std::string_view(v->get_string()) << "\n";
}

absl::StatusOr<SessionStart> ReadSessionStart(Client& c, uint64_t id) {
  SessionStart out;
  absl::StatusOr<Client::Reply> show = c.Call("session_show", {{"id", id}});
  if (!show.ok()) return out;  // the session is gone: nothing to add
  ReplyReader reader("session_show", show->result);
  const ReplyNode s = reader.result();
  const std::string target = s.Member("target").String();
  int32_t pid = 0;
  if (absl::StartsWith(target, "pid ") && absl::SimpleAtoi(target.substr(4), &pid) && pid > 0)
    out.pid = pid;
  if (const ReplyNode comm = s.Member("comm"); comm.present()) out.comm = comm.String();
  if (!reader.ok()) return reader.status();
  absl::StatusOr<std::vector<ProcessMaps>> now = ReadMapsLists(c, id, true);
  if (!now.ok() && NoSessionMaps(now.status())) {
    // An older pfmd: the current list in session_show, if any.
    now = std::vector<ProcessMaps>();
    if (const ReplyNode cur = s.Member("maps"); cur.present()) {
      now->push_back(ReadMaps(cur));
      if (!reader.ok()) return reader.status();
      AddBuildIds(&now->back().mappings);
    }
  }
  if (!now.ok()) {
    if (Gone(now.status())) return out;
    return now.status();
  }
  if (!now->empty() && !now->back().mappings.empty()) out.maps = std::move(now->back());
  return out;
}

absl::StatusOr<StreamResult> StreamToFile(RingReader& ring, TraceWriter& w,
                                          const std::string& path,
                                          const StreamOptions& options) {
  StreamResult res;
  std::vector<pfm_record> batch;
  for (;;) {
    // Read ended before consuming: records written before the end flag are
    // then all visible to this Consume.
    const bool ended = ring.ended();
    batch.clear();
    ring.Consume(&batch, kBatchRecords);
    for (const pfm_record& r : batch) {
      if (r.type == PFM_REC_LOST) res.lost_records += r.u.lost.count;
      if (r.type == PFM_REC_BRANCH) ++res.branches;
    }
    if (!batch.empty()) {
      if (absl::Status s = w.Append(batch.data(), batch.size()); !s.ok()) return s;
      if (options.progress) options.progress(res);
      continue;
    }
    if (options.progress) options.progress(res);
    if (!ring.status().ok())
      return absl::DataLossError(absl::StrCat(
          ring.status().message(), "; ", w.records(), " records written to ", path,
          " without a trailer (trace cut short)"));
    if (ended) {
      res.ended = true;
      break;
    }
    if (Stopped(options)) {
      res.stopped = true;
      break;
    }
    if (res.hung_up) break;  // after the pass that drained what it left
    if (options.give_up && options.give_up()) {
      res.gave_up = true;
      break;
    }
    pollfd pc{options.daemon_conn, POLLIN | POLLRDHUP, 0};
    // A negative fd makes poll ignore it: a plain idle wait.
    if (::poll(&pc, 1, kIdleWaitMs) > 0 && pc.revents != 0) {
      res.hung_up = true;
      if (options.daemon_pidfd >= 0) {
        // Bounded: a pfmd that hung up but lives on is treated as gone.
        pollfd pd{options.daemon_pidfd, POLLIN, 0};
        for (int i = 0; i < kDaemonExitPolls && !Stopped(options); ++i)
          if (::poll(&pd, 1, kDaemonExitPollMs) != 0) break;
      }
    }
  }
  return res;
}

}  // namespace pfm
