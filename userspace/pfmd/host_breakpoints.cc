// Host debug registers: what the arbiter decides for breakpoints, carried
// out with the kernel's perf breakpoint events (docs/arbiter.md, "Host
// breakpoints").
//
// Linux reserves a debug register for every perf breakpoint event from the
// moment it is opened (kernel/events/hw_breakpoint.c), enabled or not, and
// never rotates them: a fifth one on a task gets ENOSPC. So pfmd multiplexes
// the flexible breakpoints of a task itself, by opening and closing their
// events: the pinned ones (a pinned session's, a debugger's, GDB's hardware
// points held by the tracer) keep their registers; the flexible ones share
// the rest, a window of them rotating every mux interval when they do not
// all fit. Each one's time enabled and running is pfmd's wall clock (the
// time since it was added, and the time its event was open); its value is
// the hits its events counted. A register held by someone outside pfm
// shows as an open that fails: that breakpoint waits for its next turn.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernel/drivers/credentials.h"
#include "kernel/uapi/counter_scale.h"
#include "userspace/pfmd/errno_status.h"
#include "userspace/pfmd/session_manager.h"
#include "userspace/pfmd/session_manager_internal.h"

namespace pfm {

void SessionManager::MuxOffLocked(Session& s, size_t i, uint64_t now) {
  Session::Req& q = s.reqs[i];
  if (!q.on) return;
  PerfEvent& e = *s.perf[static_cast<size_t>(q.perf)];
  PerfCount pc;
  ErrorDetail d;
  if (e.Read(&pc, &d) == 0) q.value += pc.value;
  e.Close();
  q.run_ns += now - std::min(now, q.on_since);
  q.on = false;
}

bool SessionManager::MuxOnLocked(Session& s, size_t i, uint64_t now) {
  Session::Req& q = s.reqs[i];
  if (q.on) return true;
  PerfEvent& e = *s.perf[static_cast<size_t>(q.perf)];
  ErrorDetail d;
  const int err = RunWithCredentials(
      s.creds,
      [&] {
        return OpenBreakpoint(perf_caps_, PerfTarget::Task(s.spec.pid), q.bp_addr, q.bp_len,
                              q.bp_type, &e, &d);
      },
      &d);
  if (err < 0) return false;  // a register taken outside pfm: next turn
  q.on = true;
  q.on_since = now;
  return true;
}

void SessionManager::MuxReadingLocked(const Session& s, size_t i, uint64_t now,
                                      PmuArbiter::Reading* r) const {
  const Session::Req& q = s.reqs[i];
  uint64_t value = q.value, running = q.run_ns;
  if (q.on) {
    PerfCount pc;
    ErrorDetail d;
    if (s.perf[static_cast<size_t>(q.perf)]->Read(&pc, &d) == 0) value += pc.value;
    running += now - std::min(now, q.on_since);
  }
  const uint64_t enabled = now - std::min(now, q.added_at);
  r->value = value;
  r->time_enabled = enabled;
  r->time_running = std::min(running, enabled);
  const CounterScale sc = ScaleCounter(value, enabled, r->time_running);
  r->counted = sc.counted;
  r->ratio = sc.ratio;
  r->scaled = sc.scaled;
}

bool SessionManager::HostRequestLocked(SessionId session, RequestId id, uint64_t now,
                                       bool* on, std::optional<double>* ratio,
                                       std::string* label) const {
  if (sim_) return false;
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return false;
  const Session& s = *it->second;
  for (size_t i = 0; i < s.reqs.size(); ++i) {
    const Session::Req& q = s.reqs[i];
    if (q.id != id) continue;
    // A counter is the kernel's when pfmd opened a perf event for it.
    if (!q.breakpoint && q.perf < 0) return false;
    *on = !q.muxed || q.on;
    ratio->reset();
    if (label != nullptr) *label = q.label;
    if (q.muxed) {
      PmuArbiter::Reading r;
      MuxReadingLocked(s, i, now, &r);
      if (r.counted) *ratio = r.ratio;
    } else if (q.perf >= 0) {
      PerfCount pc;
      ErrorDetail d;
      if (s.perf[static_cast<size_t>(q.perf)]->Read(&pc, &d) == 0) {
        const CounterScale sc = ScaleCounter(pc.value, pc.time_enabled, pc.time_running);
        if (sc.counted) *ratio = sc.ratio;
      }
    }
    return true;
  }
  return false;
}

size_t SessionManager::BreakpointRoomLocked(int32_t pid, int extra_pinned,
                                            std::vector<std::pair<Session*, size_t>>* flex) {
  int pinned = extra_pinned;
  for (auto& [id, s] : sessions_) {
    if (!s->spec.task() || s->spec.pid != pid) continue;
    for (size_t i = 0; i < s->reqs.size(); ++i) {
      const Session::Req& q = s->reqs[i];
      if (!q.breakpoint) continue;
      if (q.muxed) {
        flex->push_back({s.get(), i});
      } else {
        ++pinned;
      }
    }
  }
  return static_cast<size_t>(std::max(0, machine_.debug_registers - pinned));
}

void SessionManager::RebalanceBreakpointsLocked(int32_t pid, uint64_t now, int extra_pinned) {
  if (sim_) return;
  std::vector<std::pair<Session*, size_t>> flex;  // in session, then request order
  const size_t room = BreakpointRoomLocked(pid, extra_pinned, &flex);
  if (flex.empty()) {
    bp_rotation_.erase(pid);
    return;
  }
  const size_t n = flex.size();
  size_t& start = bp_rotation_[pid];
  start %= n;
  std::vector<bool> want(n, false);
  for (size_t k = 0; k < std::min(room, n); ++k) want[(start + k) % n] = true;
  // Off first: the ones going on find the registers free.
  for (size_t k = 0; k < n; ++k)
    if (!want[k]) MuxOffLocked(*flex[k].first, flex[k].second, now);
  for (size_t k = 0; k < n; ++k)
    if (want[k]) MuxOnLocked(*flex[k].first, flex[k].second, now);
}

bool SessionManager::RotateBreakpoints() {
  KernelLockGuard l(&kernel_->lock());
  if (sim_) return false;
  const uint64_t now = NowLocked();
  bool oversubscribed = false;
  std::vector<int32_t> pids;
  for (const auto& [pid, start] : bp_rotation_) pids.push_back(pid);
  for (int32_t pid : pids) {
    std::vector<std::pair<Session*, size_t>> flex;
    const size_t room = BreakpointRoomLocked(pid, 0, &flex);
    if (flex.size() > room) {
      oversubscribed = true;
      // The next window starts where this one ended: each gets its turn.
      if (room > 0) bp_rotation_[pid] += room;
    }
    // Also retries the opens that failed: a register the tracer gives back
    // after its debugger left, or one held outside pfm for a while.
    RebalanceBreakpointsLocked(pid, now, 0);
  }
  return oversubscribed;
}

absl::StatusOr<RequestId> SessionManager::DebugBreakpoint(const Peer& peer, SessionId id,
                                                          bool insert,
                                                          const BreakpointSpec& bp) {
  KernelLockGuard l(&kernel_->lock());
  ExpireDebugChannelsLocked();
  absl::StatusOr<Session*> found = FindLocked(peer, id);
  if (!found.ok()) return found.status();
  Session& s = **found;
  if (!s.debug_channel)
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", s.id, " has no debug channel: hardware points belong to a debugger's "
        "run control (session_debug)"));
  // Says who serves its hits (docs/gdb.md): a watchpoint's come from the
  // debug register; an execute breakpoint's from the stepping tracer, at
  // the step that reaches it, before it runs.
  const std::string label =
      absl::StrCat(bp.ToString(), bp.access == "x" ? " (gdb, step compare)"
                                                   : " (gdb, debug register)");
  const uint64_t now = NowLocked();
  if (!insert) {
    for (size_t i = 0; i < s.reqs.size(); ++i) {
      if (!s.reqs[i].tracer_held || s.reqs[i].label != label) continue;
      const RequestId rid = s.reqs[i].id;
      kernel_->RemoveRequest(rid, now);
      s.reqs.erase(s.reqs.begin() + static_cast<ptrdiff_t>(i));
      RebalanceBreakpointsLocked(s.spec.pid, now, 0);
      return rid;
    }
    return absl::NotFoundError(absl::StrCat("session ", s.id, " has no hardware point ", label));
  }
  pfm_pmu_req r{};
  r.ctx_kind = PFM_CTX_TASK;
  r.pid = s.spec.pid;
  r.kind = PFM_REQ_BREAKPOINT;
  r.flags = PFM_REQ_PINNED;  // a debugger's breakpoints are never multiplexed
  r.bp_addr = bp.addr;
  r.bp_len = bp.len;
  r.bp_kind = bp.access == "w" ? PFM_BP_W : bp.access == "rw" ? PFM_BP_RW : PFM_BP_X;
  if (bp.access != "x" && bp.access != "w" && bp.access != "rw")
    return absl::InvalidArgumentError(
        absl::StrCat("hardware point access '", bp.access, "': x, w or rw"));
  ErrorDetail d;
  const int rid = kernel_->AddRequest(r, s.id, label.c_str(), now, &d);
  if (rid < 0) return ErrnoToStatus(rid, d);
  Session::Req q;
  q.id = static_cast<RequestId>(rid);
  q.label = label;
  q.breakpoint = true;
  q.pinned = true;
  q.tracer_held = true;
  s.reqs.push_back(std::move(q));
  // The flexible breakpoints give up a register before the tracer asks the
  // kernel for one.
  RebalanceBreakpointsLocked(s.spec.pid, now, 0);
  return static_cast<RequestId>(rid);
}

void SessionManager::ExpireDebugChannelsLocked() {
  uint64_t now = 0;
  for (auto& [id, s] : sessions_) {
    if (!s->debug_channel || (s->tracer && s->tracer->debug_channel_open())) continue;
    // Its debugger is gone (the helper ended the channel: the client
    // closed it or died, the connection pfmd never saw for a detached
    // session) or the tracer is: the one-debugger slot and the debugger's
    // hardware points are free again, as at session_breakpoint removes.
    s->debug_channel = false;
    if (now == 0) now = NowLocked();
    bool removed = false;
    for (auto it = s->reqs.begin(); it != s->reqs.end();) {
      if (!it->tracer_held) {
        ++it;
        continue;
      }
      if (it->id) kernel_->RemoveRequest(it->id, now);
      it = s->reqs.erase(it);
      removed = true;
    }
    if (removed && s->spec.task()) RebalanceBreakpointsLocked(s->spec.pid, now, 0);
  }
}

}  // namespace pfm
