#include "userspace/pfmd/service.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "pfm/session_spec.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Sessions per session_list reply (about 300 bytes each): a reply stays far
// below the 1 MiB frame limit however many sessions exist; clients page on.
constexpr uint64_t kSessionListPage = 1000;
// session_maps pages: the JSON of a page's mappings passes this by at most
// one mapping's (a path of kMaxMappingPath bytes escaped: 24.7 KiB), so a
// page stays well inside a frame (kMaxFrameBytes, 1 MiB); and at most this
// many lists are copied from the tracer per call.
constexpr size_t kMapsPageBytes = 512 * 1024;
constexpr size_t kMapsPageLists = 64;

ServiceReply Ok(json::value result) {
  ServiceReply r;
  r.result = std::move(result);
  return r;
}

ServiceReply Error(absl::Status s) {
  ServiceReply r;
  r.status = std::move(s);
  return r;
}

// The request's session "id".
absl::StatusOr<SessionId> IdOf(const json::object& req) {
  const json::value* v = req.if_contains("id");
  if (v == nullptr || !(v->is_uint64() || v->is_int64()))
    return absl::InvalidArgumentError("the request needs a session \"id\"");
  return v->is_uint64() ? v->as_uint64() : static_cast<uint64_t>(v->as_int64());
}

void ReadingToJson(const RequestInfo& r, json::object* out) {
  if (r.request != 0) (*out)["request"] = r.request;
  if (!r.readable) return;
  const PmuArbiter::Reading& g = r.reading;
  (*out)["value"] = g.value;
  (*out)["time_enabled"] = g.time_enabled;
  (*out)["time_running"] = g.time_running;
  (*out)["counted"] = g.counted;
  (*out)["scaled"] = g.counted ? json::value(static_cast<uint64_t>(g.scaled + 0.5))
                               : json::value(nullptr);
  (*out)["ratio"] = g.counted ? json::value(g.ratio) : json::value(nullptr);
}

json::value HolderToJson(const HolderInfo& h) {
  return json::object{{"slot", h.slot},
                      {"what", h.what},
                      {"kind", h.kind},
                      {"session", h.session},
                      {"mode", h.mode},
                      {"state", h.state},
                      {"ratio", h.ratio ? json::value(*h.ratio) : json::value(nullptr)}};
}

}  // namespace

json::object SessionToJson(const SessionInfo& s, bool detail) {
  json::object o{{"id", s.id},
                 {"uid", s.uid},
                 {"role", Name(s.role)},
                 {"target", s.target},
                 {"comm", s.comm},
                 {"bts", Name(s.bts)},
                 {"filter", Name(s.filter)},
                 {"format", Name(s.format)},
                 {"detached", s.detached},
                 {"buffer_bytes", s.buffer_bytes},
                 {"charged_bytes", s.charged_bytes},
                 {"records", s.records},
                 {"lost", s.lost}};
  if (s.has_stream) o["overwritten"] = s.overwritten;
  if (s.state != TaskState::kNotATask) {
    o["state"] = s.state == TaskState::kExited ? "exited" : "running";
    if (s.exit_status) o["exit_status"] = *s.exit_status;
    if (s.fatal_signal != 0) o["fatal_signal"] = s.fatal_signal;
  }
  if (!detail) return o;
  json::array counters, bps;
  for (const RequestInfo& r : s.counters) {
    json::object c{{"event", r.label}};
    if (r.pebs) {
      c["pebs"] = true;
      c["period"] = r.pebs_period;
    } else {
      c["pinned"] = r.pinned;
    }
    ReadingToJson(r, &c);
    counters.push_back(std::move(c));
  }
  for (const RequestInfo& r : s.breakpoints) {
    json::object c{{"pinned", r.pinned}};
    ReadingToJson(r, &c);
    c["spec"] = r.label;
    // "armed": it has been on a debug register (its value is the hits, 0
    // for one that never fired); "waiting": never on hardware yet.
    c["state"] = r.readable && r.reading.counted ? "armed" : "waiting";
    bps.push_back(std::move(c));
  }
  o["counters"] = std::move(counters);
  o["breakpoints"] = std::move(bps);
  if (s.soft_bts) {
    const SoftBtsTracer::Stats& t = *s.soft_bts;
    o["soft_bts"] = json::object{
        {"steps", t.steps},
        {"branches", t.branches},
        {"singleblock", t.singleblock_honoured},
        // Branch stepping (docs/host_drivers.md): stops at the tracer's
        // int3s, branches emulated, int3s written; "stepping" says which
        // way the tracer went (branch stepping with int3 stops, else
        // single steps only).
        {"stepping", t.branch_stops != 0 ? "branch" : "single"},
        {"int3_stops", t.branch_stops},
        {"emulated", t.emulated},
        {"int3s", t.planted},
        // Address filters: gap records written (runs outside the filter).
        {"gaps", t.gaps},
        {"resyncs", t.resyncs},
        {"tasks", t.tasks},
        {"tasks_seen", t.tasks_seen},
        {"processes_seen", t.processes_seen},
        // Tasks whose first stop came before their creator's event.
        {"children_first", t.children_first},
        // Stops that were no more when their turn in a round came.
        {"stale_stops", t.stale_stops},
        // The CPU its tasks are bound to (docs/host_drivers.md, "One
        // CPU"), null when they are not.
        {"bound_cpu", t.bound_cpu >= 0 ? json::value(t.bound_cpu) : json::value(nullptr)},
        {"switches", t.switches},
        {"switch_artifacts_dropped", t.switch_artifacts},
        // Where switch records come from: the kernel's own, or inferred
        // from CPU changes because perf_event_open was refused (why).
        {"switch_source", t.switch_errno == 0 ? "kernel" : "inferred"},
        {"switch_source_why",
         t.switch_errno == 0 ? std::string("perf context_switch records of each traced task")
                             : absl::StrCat("perf_event_open refused: ",
                                            std::strerror(static_cast<int>(-t.switch_errno)),
                                            "; switches inferred from CPU changes")}};
  }
  return o;
}

Service::Service(PfmdConfig config, MachineInfo machine, AuthPolicy auth,
                 SessionManagerDeps deps)
    : auth_policy_(std::move(auth)),
      sessions_(std::move(config), std::move(machine), deps) {
  handlers_["status"] = &Service::Status;
  handlers_["ping"] = &Service::Ping;
  handlers_["shutdown"] = &Service::Shutdown;
  handlers_["session_create"] = &Service::SessionCreate;
  handlers_["session_list"] = &Service::SessionList;
  handlers_["session_show"] = &Service::SessionShow;
  handlers_["session_maps"] = &Service::SessionMaps;
  handlers_["session_kill"] = &Service::SessionKill;
  handlers_["session_ring"] = &Service::SessionRing;
  handlers_["session_debug"] = &Service::SessionDebug;
  handlers_["session_breakpoint"] = &Service::SessionBreakpoint;
  handlers_["resources"] = &Service::Resources;
  handlers_["sim"] = &Service::Sim;
}

ServiceReply Service::Handle(ConnectionId conn, const Peer& peer,
                             const json::object& request) {
  const json::value* op = request.if_contains("op");
  if (op == nullptr || !op->is_string())
    return Error(absl::InvalidArgumentError("request has no \"op\" string naming the command"));
  auto it = handlers_.find(std::string(op->as_string()));
  if (it == handlers_.end())
    return Error(absl::InvalidArgumentError(
        absl::StrCat("unknown command '", std::string(op->as_string()), "'")));
  ServiceReply reply = (this->*(it->second))(conn, peer, request);
  sessions_.ReapTracers();
  return reply;
}

ServiceReply Service::Ping(ConnectionId, const Peer& peer, const json::object&) {
  return Ok(json::object{{"pid", ::getpid()}, {"peer_uid", peer.uid}, {"peer_pid", peer.pid}});
}

ServiceReply Service::Shutdown(ConnectionId, const Peer& peer, const json::object&) {
  if (peer.uid != ::geteuid() && !peer.privileged())
    return Error(absl::PermissionDeniedError(absl::StrCat(
        "uid ", peer.uid, " may not stop a pfmd run by uid ", ::geteuid())));
  if (shutdown_hook_) shutdown_hook_();
  return Ok(json::object{{"stopping", true}});
}

ServiceReply Service::Status(ConnectionId, const Peer&, const json::object&) {
  const StatusInfo st = sessions_.Status();
  const MachineInfo& m = st.machine;
  json::object machine{
      {"cpus", m.cpus},
      {"pmu", m.pmu},
      {"pmu_desc", m.pmu_desc},
      {"gp_counters", m.gp_counters},
      {"fixed_counters", m.fixed_counters},
      {"debug_registers", m.debug_registers},
      {"bts", m.bts},
      {"pebs", m.pebs},
      {"lbr", m.lbr},
      {"pt", m.pt},
      {"software_events", m.software_events},
      {"soft_bts", m.soft_bts},
      {"soft_bts_scope", m.soft_bts_scope},
      {"source", m.source},
  };
  json::array charged;
  for (const auto& [uid, bytes] : st.charged)
    charged.push_back(json::object{{"uid", uid}, {"bytes", bytes}});
  json::object memory{
      {"limit_per_uid", st.limit_per_uid},
      {"limit_total", st.limit_total},
      {"allocated", st.allocated},
      {"held", st.held},
      {"charged", std::move(charged)},
  };
  return Ok(json::object{{"driver", st.driver},
                         {"machine", std::move(machine)},
                         {"sessions", st.sessions},
                         {"memory", std::move(memory)},
                         {"metrics_address", metrics_address_.empty()
                                                 ? json::value(nullptr)
                                                 : json::value(metrics_address_)}});
}

ServiceReply Service::SessionCreate(ConnectionId conn, const Peer& peer,
                                    const json::object& req) {
  const json::value* sv = req.if_contains("spec");
  if (sv == nullptr || !sv->is_object())
    return Error(absl::InvalidArgumentError("session_create needs a \"spec\" object"));
  absl::StatusOr<SessionSpec> spec = SessionSpec::FromJson(sv->as_object());
  if (!spec.ok()) return Error(spec.status());
  absl::StatusOr<TypedSpec> typed = TypedSpec::From(*spec);
  if (!typed.ok()) return Error(typed.status());
  absl::StatusOr<SessionId> id = sessions_.Create(peer, conn, *typed);
  if (!id.ok()) return Error(id.status());
  return Ok(json::object{{"id", *id}});
}

// One page of sessions, in id order: those after "after" (default 0), at
// most "limit" (1..kSessionListPage, the default).
ServiceReply Service::SessionList(ConnectionId, const Peer& peer,
                                  const json::object& req) {
  uint64_t after = 0, limit = kSessionListPage;
  if (const json::value* a = req.if_contains("after")) {
    if (!a->is_uint64() && !(a->is_int64() && a->as_int64() >= 0))
      return Error(absl::InvalidArgumentError("\"after\" must be a session id"));
    after = a->to_number<uint64_t>();
  }
  if (const json::value* n = req.if_contains("limit")) {
    if (!n->is_uint64() && !(n->is_int64() && n->as_int64() > 0))
      return Error(absl::InvalidArgumentError(
          absl::StrCat("\"limit\" must be 1..", kSessionListPage)));
    limit = std::clamp<uint64_t>(n->to_number<uint64_t>(), 1, kSessionListPage);
  }
  json::array out;
  for (const SessionInfo& s : sessions_.List(peer, after, limit))
    out.push_back(SessionToJson(s, false));
  return Ok(std::move(out));
}

ServiceReply Service::SessionShow(ConnectionId, const Peer& peer, const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  absl::StatusOr<SessionInfo> s = sessions_.Show(peer, *id);
  if (!s.ok()) return Error(s.status());
  return Ok(SessionToJson(*s, true));
}

// session_maps {id, seq, mapping, current}: one page of the mapping lists
// of a soft-BTS session's tracer (docs/pfmd.md, "Mapping lists"), from the
// list numbered "seq" (default 0: the first kept) at its mapping "mapping"
// (default 0), or with "current" only the tracee's own newest list; a page
// ends once its mappings' JSON passes kMapsPageBytes, with "next" {seq,
// mapping} where the next page starts. Addresses are JSON integers, not the
// hex strings of other replies: pfmctl copies them into a trace file's
// binary MAPS block, and user addresses (below 2^47) stay exact even for
// readers holding doubles.
ServiceReply Service::SessionMaps(ConnectionId, const Peer& peer, const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  uint64_t seq = 0, first = 0;
  bool current = false;
  for (auto [key, out] : {std::pair<const char*, uint64_t*>{"seq", &seq}, {"mapping", &first}}) {
    const json::value* v = req.if_contains(key);
    if (v == nullptr) continue;
    if (!v->is_uint64() && !(v->is_int64() && v->as_int64() >= 0))
      return Error(absl::InvalidArgumentError(
          absl::StrCat("\"", key, "\" must be a non-negative integer")));
    *out = v->to_number<uint64_t>();
  }
  if (const json::value* v = req.if_contains("current")) {
    if (!v->is_bool()) return Error(absl::InvalidArgumentError("\"current\" must be true or false"));
    current = v->as_bool();
  }
  absl::StatusOr<MapsLists> got = sessions_.Maps(peer, *id, seq, current, kMapsPageLists);
  if (!got.ok()) return Error(got.status());
  json::array lists;
  size_t bytes = 0;
  json::object next;
  for (MapsLists::List& l : got->lists) {
    // A mapping index past the end (a client's guess) starts nowhere: the
    // list is sent with no mappings and its total, so the client moves on.
    const size_t total = l.maps->mappings.size();
    size_t i = l.seq == seq ? std::min<uint64_t>(first, total) : 0;
    json::array mappings;
    const size_t start = i;
    for (; i < total; ++i) {
      if (bytes >= kMapsPageBytes) break;
      const Mapping& m = l.maps->mappings[i];
      // Its JSON's size, an upper bound: 3 uint64s, 2 bools, the keys, and
      // the path escaped at worst (\u00XX per byte).
      bytes += 160 + 6 * m.path.size();
      mappings.push_back(json::object{{"start", m.start},
                                      {"end", m.end},
                                      {"offset", m.offset},
                                      {"path", m.path},
                                      {"writable", m.writable},
                                      {"shared", m.shared}});
    }
    bytes += 100;
    lists.push_back(json::object{{"seq", l.seq},
                                 {"pid", l.maps->pid},
                                 {"time_ns", l.maps->time_ns},
                                 {"total", total},
                                 {"first", start},
                                 {"cut", l.maps->cut},
                                 {"mappings", std::move(mappings)}});
    if (i < total) {
      next = json::object{{"seq", l.seq}, {"mapping", i}};
      break;
    }
    if (bytes >= kMapsPageBytes) {
      next = json::object{{"seq", l.seq + 1}, {"mapping", 0}};
      break;
    }
  }
  // More lists than one call copies: the next page starts after the last.
  if (next.empty() && !current && got->lists.size() == kMapsPageLists)
    next = json::object{{"seq", got->lists.back().seq + 1}, {"mapping", 0}};
  json::object o{{"lists", std::move(lists)}, {"newest", got->newest}};
  if (!next.empty()) o["next"] = std::move(next);
  return Ok(std::move(o));
}

ServiceReply Service::SessionKill(ConnectionId, const Peer& peer, const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  if (absl::Status st = sessions_.Kill(peer, *id); !st.ok()) return Error(st);
  return Ok(json::object{{"id", *id}, {"killed", true}});
}

ServiceReply Service::SessionRing(ConnectionId, const Peer& peer, const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  const json::value* drain = req.if_contains("drain");
  absl::StatusOr<RingHandle> h =
      sessions_.Ring(peer, *id, drain && drain->is_bool() && drain->as_bool());
  if (!h.ok()) return Error(h.status());
  ServiceReply r;
  r.result = json::object{{"id", h->id},
                          {"mode", Name(h->mode)},
                          {"format", Name(h->format)},
                          {"target", h->target},
                          {"mapped_bytes", h->mapped_bytes}};
  r.fds.push_back(std::move(h->fd));
  return r;
}

ServiceReply Service::SessionDebug(ConnectionId, const Peer& peer, const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  absl::StatusOr<UniqueFd> fd = sessions_.Debug(peer, *id);
  if (!fd.ok()) return Error(fd.status());
  ServiceReply r;
  r.result = json::object{{"id", *id}};
  r.fds.push_back(std::move(*fd));
  return r;
}

// {id, insert, access: "x"|"w"|"rw", addr, len}: a debugger's hardware
// point (SessionManager::DebugBreakpoint).
ServiceReply Service::SessionBreakpoint(ConnectionId, const Peer& peer,
                                        const json::object& req) {
  absl::StatusOr<SessionId> id = IdOf(req);
  if (!id.ok()) return Error(id.status());
  const json::value* insert = req.if_contains("insert");
  const json::value* access = req.if_contains("access");
  const json::value* addr = req.if_contains("addr");
  const json::value* len = req.if_contains("len");
  // JSON numbers parse as int64 when they fit.
  auto unsigned_number = [](const json::value* v) {
    return v != nullptr && (v->is_uint64() || (v->is_int64() && v->as_int64() >= 0));
  };
  auto as_u64 = [](const json::value* v) {
    return v->is_uint64() ? v->as_uint64() : static_cast<uint64_t>(v->as_int64());
  };
  if (insert == nullptr || !insert->is_bool() || access == nullptr || !access->is_string() ||
      !unsigned_number(addr) || !unsigned_number(len))
    return Error(absl::InvalidArgumentError(
        "session_breakpoint needs \"insert\" (bool), \"access\" (x, w or rw), \"addr\" and "
        "\"len\" (unsigned)"));
  BreakpointSpec bp;
  bp.addr = as_u64(addr);
  bp.len = static_cast<uint32_t>(std::min<uint64_t>(as_u64(len), 1u << 30));
  bp.access = std::string(access->as_string());
  absl::StatusOr<RequestId> rid = sessions_.DebugBreakpoint(peer, *id, insert->as_bool(), bp);
  if (!rid.ok()) return Error(rid.status());
  return Ok(json::object{{"id", *id}, {"request", *rid}});
}

// The host's flexible breakpoints rotate (SessionManager::RotateBreakpoints).
bool Service::Tick() { return sessions_.RotateBreakpoints(); }

ServiceReply Service::Resources(ConnectionId, const Peer& peer, const json::object&) {
  const ResourcesInfo r = sessions_.Resources(peer);
  json::array cpus, tasks;
  for (const ResourcesInfo::Cpu& c : r.cpus) {
    json::array holders;
    for (const HolderInfo& h : c.holders) holders.push_back(HolderToJson(h));
    cpus.push_back(json::object{
        {"cpu", c.cpu}, {"running_pid", c.running_pid}, {"holders", std::move(holders)}});
  }
  for (const ResourcesInfo::Task& t : r.tasks) {
    json::array holders;
    for (const HolderInfo& h : t.holders) holders.push_back(HolderToJson(h));
    tasks.push_back(json::object{{"pid", t.pid}, {"holders", std::move(holders)}});
  }
  return Ok(json::object{{"cpus", std::move(cpus)},
                         {"tasks", std::move(tasks)},
                         {"debug_registers", r.debug_registers},
                         {"gp_counters", r.gp_counters},
                         {"fixed_counters", r.fixed_counters}});
}

ServiceReply Service::Sim(ConnectionId, const Peer& peer, const json::object& req) {
  const json::value* a = req.if_contains("action");
  const std::string action = a && a->is_string() ? std::string(a->as_string()) : "";
  SimRequest sr{SimRequest::Action::kStats};
  auto pid_arg = [&]() -> absl::Status {
    const json::value* p = req.if_contains("pid");
    if (p == nullptr || !p->is_int64())
      return absl::InvalidArgumentError("this sim action needs a \"pid\"");
    // A pid as the session spec takes it: not cut to 32 bits (2^32 + 100
    // would name task 100), not negative (all tasks).
    if (p->as_int64() < 1 || p->as_int64() > 0x3fffffff)
      return absl::InvalidArgumentError(absl::StrCat(
          "sim pid ", p->as_int64(), ": expected 1..1073741823"));
    sr.pid = static_cast<int32_t>(p->as_int64());
    return absl::OkStatus();
  };
  if (action == "pause" || action == "resume") {
    sr.action = action == "pause" ? SimRequest::Action::kPause : SimRequest::Action::kResume;
  } else if (action == "run") {
    sr.action = SimRequest::Action::kRun;
    const json::value* ns = req.if_contains("ns");
    if (ns != nullptr && (ns->is_uint64() || (ns->is_int64() && ns->as_int64() > 0)))
      sr.ns = ns->to_number<uint64_t>();
  } else if (action == "exit") {
    sr.action = SimRequest::Action::kExit;
    if (absl::Status st = pid_arg(); !st.ok()) return Error(st);
  } else if (action == "stats") {
    sr.action = SimRequest::Action::kStats;
    if (req.contains("pid"))
      if (absl::Status st = pid_arg(); !st.ok()) return Error(st);
  } else {
    return Error(absl::InvalidArgumentError(absl::StrCat(
        "sim action '", action, "': expected pause, resume, run, stats or exit")));
  }
  absl::StatusOr<SimReport> r = sessions_.Sim(peer, sr);
  if (!r.ok()) return Error(r.status());
  switch (sr.action) {
    case SimRequest::Action::kPause:
    case SimRequest::Action::kResume:
      return Ok(json::object{{"paused", r->paused}, {"now", r->now}});
    case SimRequest::Action::kRun:
      return Ok(json::object{{"now", r->now}});
    case SimRequest::Action::kExit:
      return Ok(json::object{{"pid", sr.pid}, {"exited", true}});
    case SimRequest::Action::kStats:
      break;
  }
  json::array tasks;
  for (const SimTaskStats& t : r->tasks) {
    const SimMachine::TaskStats& st = t.stats;
    json::object truth;
    for (const auto& [label, count] : t.true_counts) truth[label] = count;
    tasks.push_back(json::object{{"pid", t.pid},
                                 {"runtime_ns", st.runtime_ns},
                                 {"switches_in", st.switches_in},
                                 {"voluntary", st.voluntary},
                                 {"involuntary", st.involuntary},
                                 {"branches", st.branches},
                                 {"bts_user", st.bts_user},
                                 {"bts_kernel", st.bts_kernel},
                                 {"bts_dropped", st.bts_dropped},
                                 {"pebs", st.pebs},
                                 {"held_ns", st.held_ns},
                                 {"true_counts", std::move(truth)}});
  }
  return Ok(json::object{{"now", r->now}, {"paused", r->paused}, {"tasks", std::move(tasks)}});
}

}  // namespace pfm
