#include "userspace/pfmctl/capture.h"

#include <poll.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "userspace/pfmctl/reply.h"

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

absl::Status AddSessionSummary(Client& c, uint64_t id, json::object* trailer) {
  absl::StatusOr<Client::Reply> show = c.Call("session_show", {{"id", id}});
  if (!show.ok()) return absl::OkStatus();  // the session is gone: no summary
  ReplyReader reader("session_show", show->result);
  const ReplyNode s = reader.result();
  const json::object* so = s.Object();
  const ReplyNode soft_bts = s.Member("soft_bts");
  if (soft_bts.present()) soft_bts.Member("steps").Uint();
  if (!reader.ok()) return reader.status();
  for (const char* k : {"counters", "breakpoints", "maps", "state", "exit_status",
                        "fatal_signal"})
    if (const json::value* v = so->if_contains(k)) (*trailer)[k] = *v;
  if (soft_bts.present()) {
    (*trailer)["steps"] = *soft_bts.Member("steps").json();
    (*trailer)["soft_bts"] = *soft_bts.json();
  }
  return absl::OkStatus();
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
    for (const pfm_record& r : batch)
      if (r.type == PFM_REC_LOST) res.lost_records += r.u.lost.count;
    if (!batch.empty()) {
      if (absl::Status s = w.Append(batch.data(), batch.size()); !s.ok()) return s;
      continue;
    }
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
