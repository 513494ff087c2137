#include "userspace/pfmctl/commands.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <csignal>
#include <cstdlib>
#include <map>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "libpfm-bts/units.h"
#include "pfm/record_json.h"
#include "pfm/ring_reader.h"
#include "pfm/session_spec.h"
#include "pfm/symbolizer.h"
#include "pfm/trace_file.h"
#include "userspace/pfmctl/render.h"

namespace pfm {
namespace {

namespace json = boost::json;

using Args = std::vector<std::string>;

absl::Status Usage(const std::string& what) {
  return absl::InvalidArgumentError(what);
}

// Prints one JSON document on stdout.
void PrintJson(const CliContext& ctx, const json::value& v) {
  *ctx.out << json::serialize(v) << "\n";
}

std::string Str(const json::value* v) {
  if (v == nullptr) return "-";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

absl::StatusOr<int> Status(const CliContext& ctx, const Args& args) {
  if (args.size() > 1) return Usage("status takes no arguments");
  std::string path;
  absl::StatusOr<Client> c = ConnectOrStart(ctx, &path);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("status");
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  const json::object& o = r->result.as_object();
  const json::object& m = o.at("machine").as_object();
  std::ostream& out = *ctx.out;
  out << "pfmd on " << path << " (driver " << Str(o.if_contains("driver"))
      << ")\n";
  out << "machine: " << Str(m.if_contains("cpus")) << " cpus, pmu "
      << Str(m.if_contains("pmu")) << " (" << Str(m.if_contains("pmu_desc"))
      << ")\n";
  out << "  counters: " << Str(m.if_contains("gp_counters")) << " general, "
      << Str(m.if_contains("fixed_counters")) << " fixed; debug registers: "
      << Str(m.if_contains("debug_registers")) << "\n";
  out << "  bts: " << Str(m.if_contains("bts"))
      << "  pebs: " << Str(m.if_contains("pebs"))
      << "  lbr: " << Str(m.if_contains("lbr"))
      << "  soft-bts (ptrace): " << Str(m.if_contains("soft_bts"))
      << "  software events: " << Str(m.if_contains("software_events"))
      << "\n";
  out << "  from: " << Str(m.if_contains("source")) << "\n";
  out << "sessions: " << Str(o.if_contains("sessions")) << "\n";
  const json::object& mem = o.at("memory").as_object();
  out << "memory: limit per uid "
      << FormatSize(mem.at("limit_per_uid").to_number<uint64_t>()) << "\n";
  for (const json::value& ch : mem.at("charged").as_array()) {
    const json::object& e = ch.as_object();
    out << "  uid " << Str(e.if_contains("uid")) << ": "
        << FormatSize(e.at("bytes").to_number<uint64_t>()) << "\n";
  }
  return 0;
}

absl::StatusOr<int> Shutdown(const CliContext& ctx, const Args& args) {
  // The embedded daemon unless --socket names one; never starts one.
  std::string path = ctx.socket_flag;
  if (path.empty()) {
    absl::StatusOr<std::string> priv = PrivateSocketPath();
    if (!priv.ok()) return priv.status();
    path = *priv;
  }
  absl::StatusOr<Client> c = Client::Connect(path);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("shutdown");
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  return 0;
}


// Flag parsing for one command: "--flag value" / "--flag=value" / "--flag".
class Flags {
 public:
  Flags(const Args& args, size_t first) {
    for (size_t i = first; i < args.size(); ++i) rest_.push_back(args[i]);
  }
  // Takes every occurrence of a valued flag (repeatable ones).
  absl::StatusOr<std::vector<std::string>> TakeAll(const std::string& flag) {
    std::vector<std::string> values;
    std::vector<std::string> keep;
    for (size_t i = 0; i < rest_.size(); ++i) {
      const std::string& a = rest_[i];
      if (a == "--") {
        keep.insert(keep.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (a == flag) {
        if (i + 1 >= rest_.size())
          return Usage(absl::StrCat(flag, " needs a value"));
        values.push_back(rest_[++i]);
      } else if (a.rfind(flag + "=", 0) == 0) {
        values.push_back(a.substr(flag.size() + 1));
      } else {
        keep.push_back(a);
      }
    }
    rest_ = keep;
    return values;
  }
  absl::StatusOr<std::string> Take(const std::string& flag,
                                   const std::string& def = "") {
    absl::StatusOr<std::vector<std::string>> v = TakeAll(flag);
    if (!v.ok()) return v.status();
    if (v->size() > 1) return Usage(absl::StrCat(flag, " given more than once"));
    return v->empty() ? def : v->front();
  }
  bool TakeBool(const std::string& flag) {
    bool found = false;
    std::vector<std::string> keep;
    for (size_t i = 0; i < rest_.size(); ++i) {
      if (rest_[i] == "--") {
        keep.insert(keep.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (rest_[i] == flag) found = true; else keep.push_back(rest_[i]);
    }
    rest_ = keep;
    return found;
  }
  // What is left: positional arguments. Anything starting with "--" before a
  // "--" separator is an unknown flag.
  absl::StatusOr<std::vector<std::string>> Positional(const std::string& cmd) {
    std::vector<std::string> pos;
    for (size_t i = 0; i < rest_.size(); ++i) {
      if (rest_[i] == "--") {
        pos.insert(pos.end(), rest_.begin() + i, rest_.end());
        break;
      }
      if (rest_[i].rfind("--", 0) == 0 && rest_[i].size() > 2)
        return Usage(absl::StrCat(cmd, ": unknown flag '", rest_[i], "'"));
      pos.push_back(rest_[i]);
    }
    return pos;
  }

 private:
  std::vector<std::string> rest_;
};

absl::StatusOr<int> ParseIntArg(const std::string& what, const std::string& v,
                                int lo, int hi) {
  int n;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi)
    return Usage(absl::StrCat(what, " '", v, "': expected an integer in ", lo,
                              "..", hi));
  return n;
}

// Session flags shared by `session create` and `record`. The result is not
// validated yet: the caller sets the target, then calls Validate.
absl::StatusOr<SessionSpec> ParseSessionFlags(Flags& f) {
  SessionSpec s;
  absl::StatusOr<std::string> v;
#define PFM_TAKE(flag, dst)          \
  v = f.Take(flag, dst);             \
  if (!v.ok()) return v.status();    \
  dst = *v;
  PFM_TAKE("--role", s.role);
  PFM_TAKE("--bts", s.bts);
  PFM_TAKE("--filter", s.filter);
  PFM_TAKE("--format", s.format);
#undef PFM_TAKE
  if (v = f.Take("--pid"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> pid = ParseIntArg("--pid", *v, 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    s.pid = *pid;
  }
  if (v = f.Take("--cpu"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<int> cpu = ParseIntArg("--cpu", *v, 0, 65535);
    if (!cpu.ok()) return cpu.status();
    s.cpu = *cpu;
  }
  if (v = f.Take("--buffer"); !v.ok()) return v.status();
  if (!v->empty()) {
    absl::StatusOr<uint64_t> size = ParseSize(*v);
    if (!size.ok()) return Usage(absl::StrCat("--buffer: ", size.status().message()));
    s.buffer_bytes = *size;
  }
  if (v = f.Take("--pebs"); !v.ok()) return v.status();
  if (!v->empty()) {
    if (absl::Status st = ParsePebs(*v, &s.pebs_event, &s.pebs_period); !st.ok())
      return st;
  }
  absl::StatusOr<std::vector<std::string>> all = f.TakeAll("--counter");
  if (!all.ok()) return all.status();
  s.counters = *all;
  all = f.TakeAll("--breakpoint");
  if (!all.ok()) return all.status();
  for (const std::string& b : *all) {
    absl::StatusOr<BreakpointSpec> bp = ParseBreakpoint(b);
    if (!bp.ok()) return bp.status();
    s.breakpoints.push_back(*bp);
  }
  s.pinned = f.TakeBool("--pinned");
  s.block = f.TakeBool("--block");
  f.TakeBool("--detached");  // pfmctl's sessions are always detached
  s.detached = true;
  return s;
}

absl::StatusOr<SessionSpec> Validate(const SessionSpec& s) {
  return SessionSpec::FromJson(s.ToJson());
}

absl::StatusOr<Client> Connect(const CliContext& ctx) {
  std::string path;
  return ConnectOrStart(ctx, &path);
}

absl::StatusOr<uint64_t> ParseSessionId(const std::string& v) {
  uint64_t id;
  if (!absl::SimpleAtoi(v, &id) || id == 0)
    return Usage(absl::StrCat("session id '", v, "': expected a positive integer"));
  return id;
}

std::string Ratio(const json::value* v) {
  if (v == nullptr || v->is_null()) return "not counted";
  return absl::StrFormat("%.1f%%", 100.0 * v->to_number<double>());
}

void PrintSessionLine(std::ostream& out, const json::object& s) {
  out << absl::StrFormat("%-4s %-6s %-9s %-12s %-9s %10s %10s %10s %6s\n",
                         Str(s.if_contains("id")), Str(s.if_contains("uid")),
                         Str(s.if_contains("role")), Str(s.if_contains("target")),
                         Str(s.if_contains("bts")),
                         FormatSize(s.at("buffer_bytes").to_number<uint64_t>()),
                         FormatSize(s.at("charged_bytes").to_number<uint64_t>()),
                         Str(s.if_contains("records")), Str(s.if_contains("lost")));
}

absl::StatusOr<int> SessionCreate(const CliContext& ctx, const Args& args) {
  Flags f(args, 2);
  absl::StatusOr<SessionSpec> spec = ParseSessionFlags(f);
  if (spec.ok()) spec = Validate(*spec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("session create");
  if (!pos.ok()) return pos.status();
  if (!pos->empty()) return Usage(absl::StrCat("session create: unexpected '", pos->front(), "'"));
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_create", {{"spec", spec->ToJson()}});
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  else *ctx.out << "session " << Str(r->result.as_object().if_contains("id")) << "\n";
  return 0;
}

// Sessions per session_list request. One reply must fit in a wire frame
// (1 MiB): thousands of sessions in one array did not.
constexpr uint64_t kSessionListPage = 1000;

// Every session the daemon shows us, in id order, fetched in pages: each
// request asks for the sessions after the last id of the previous page, until
// a page comes back short. Entries not after the requested id are dropped, so
// a daemon that ignores "after" (one that predates paging) ends the loop
// instead of repeating itself.
absl::StatusOr<json::array> ListAllSessions(Client& c) {
  json::array all;
  std::optional<uint64_t> after;
  for (;;) {
    json::object args{{"limit", kSessionListPage}};
    if (after.has_value()) args["after"] = *after;
    absl::StatusOr<Client::Reply> r = c.Call("session_list", std::move(args));
    if (!r.ok()) return r.status();
    if (!r->result.is_array())
      return absl::DataLossError("pfmd's session_list reply is not an array");
    const json::array& page = r->result.as_array();
    size_t taken = 0;
    for (const json::value& s : page) {
      const json::value* idv = s.is_object() ? s.as_object().if_contains("id") : nullptr;
      if (idv == nullptr ||
          !(idv->is_uint64() || (idv->is_int64() && idv->as_int64() > 0)))
        return absl::DataLossError("pfmd listed a session without a positive id");
      const uint64_t id = idv->to_number<uint64_t>();
      if (after.has_value() && id <= *after) continue;
      all.push_back(s);
      ++taken;
    }
    // A page longer than the limit is a daemon that ignores "limit": it sent
    // everything at once.
    if (page.size() != kSessionListPage || taken == 0) break;
    after = all.back().as_object().at("id").to_number<uint64_t>();
  }
  return all;
}

absl::StatusOr<int> SessionList(const CliContext& ctx, const Args& args) {
  if (args.size() > 2) return Usage("session list takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<json::array> sessions = ListAllSessions(*c);
  if (!sessions.ok()) return sessions.status();
  if (ctx.json) {
    PrintJson(ctx, *sessions);
    return 0;
  }
  *ctx.out << absl::StrFormat("%-4s %-6s %-9s %-12s %-9s %10s %10s %10s %6s\n", "ID",
                              "UID", "ROLE", "TARGET", "BTS", "BUFFER", "CHARGED",
                              "RECORDS", "LOST");
  for (const json::value& s : *sessions) PrintSessionLine(*ctx.out, s.as_object());
  return 0;
}

absl::StatusOr<int> SessionShow(const CliContext& ctx, const Args& args) {
  if (args.size() != 3) return Usage("usage: session show ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_show", {{"id", *id}});
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  const json::object& s = r->result.as_object();
  PrintSessionLine(*ctx.out, s);
  if (const json::value* cs = s.if_contains("counters"); cs && !cs->as_array().empty()) {
    *ctx.out << absl::StrFormat("  %-28s %16s %14s %14s %16s %12s\n", "COUNTER", "VALUE",
                                "ENABLED(ns)", "RUNNING(ns)", "SCALED", "RUNNING");
    for (const json::value& cv : cs->as_array()) {
      const json::object& co = cv.as_object();
      *ctx.out << absl::StrFormat("  %-28s %16s %14s %14s %16s %12s\n",
                                  Str(co.if_contains("event")), Str(co.if_contains("value")),
                                  Str(co.if_contains("time_enabled")),
                                  Str(co.if_contains("time_running")),
                                  Str(co.if_contains("scaled")), Ratio(co.if_contains("ratio")));
    }
  }
  if (const json::value* bs = s.if_contains("breakpoints"); bs && !bs->as_array().empty()) {
    for (const json::value& bv : bs->as_array()) {
      const json::object& bo = bv.as_object();
      *ctx.out << "  breakpoint " << Str(bo.if_contains("spec")) << " "
               << Str(bo.if_contains("state")) << ", running " << Ratio(bo.if_contains("ratio"))
               << "\n";
    }
  }
  return 0;
}

absl::StatusOr<int> SessionKill(const CliContext& ctx, const Args& args) {
  if (args.size() != 3) return Usage("usage: session kill ID");
  absl::StatusOr<uint64_t> id = ParseSessionId(args[2]);
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("session_kill", {{"id", *id}});
  if (!r.ok()) return r.status();
  if (ctx.json) PrintJson(ctx, r->result);
  return 0;
}

absl::StatusOr<int> Session(const CliContext& ctx, const Args& args) {
  if (args.size() < 2) return Usage("usage: session create|list|show|kill ...");
  const std::string& sub = args[1];
  if (sub == "create") return SessionCreate(ctx, args);
  if (sub == "list") return SessionList(ctx, args);
  if (sub == "show") return SessionShow(ctx, args);
  if (sub == "kill") return SessionKill(ctx, args);
  return Usage(absl::StrCat("unknown session command '", sub, "'"));
}

absl::StatusOr<int> Resources(const CliContext& ctx, const Args& args) {
  if (args.size() > 1) return Usage("resources takes no arguments");
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("resources");
  if (!r.ok()) return r.status();
  if (ctx.json) {
    PrintJson(ctx, r->result);
    return 0;
  }
  PrintResources(*ctx.out, r->result.as_object());
  return 0;
}

absl::StatusOr<int> Sim(const CliContext& ctx, const Args& args) {
  if (args.size() < 2) return Usage("usage: sim pause|resume|run NS|stats [PID]|exit PID");
  json::object req{{"action", args[1]}};
  if (args[1] == "run") {
    uint64_t ns;
    if (args.size() != 3 || !absl::SimpleAtoi(args[2], &ns))
      return Usage("usage: sim run NS (virtual nanoseconds)");
    req["ns"] = ns;
  } else if ((args[1] == "stats" || args[1] == "exit") && args.size() == 3) {
    absl::StatusOr<int> pid = ParseIntArg("pid", args[2], 1, 0x3fffffff);
    if (!pid.ok()) return pid.status();
    req["pid"] = *pid;
  } else if (args.size() != 2) {
    return Usage("usage: sim pause|resume|run NS|stats [PID]");
  }
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> r = c->Call("sim", req);
  if (!r.ok()) return r.status();
  PrintJson(ctx, r->result);
  return 0;
}


// Maps a session's ring (the daemon passes its memfd).
absl::StatusOr<RingReader> MapRing(Client& c, uint64_t id, bool drain,
                                   json::object* info) {
  absl::StatusOr<Client::Reply> r =
      c.Call("session_ring", {{"id", id}, {"drain", drain}});
  if (!r.ok()) return r.status();
  if (r->fds.size() != 1)
    return absl::DataLossError("pfmd did not pass the ring's file descriptor");
  if (info) *info = r->result.as_object();
  return RingReader::Map(std::move(r->fds[0]));
}

void PrintRecordLine(std::ostream& out, const pfm_record& r) {
  json::object o = RecordToJson(r);
  out << absl::StrFormat("%14u cpu%-3u %6u/%-6u %-10s", r.time, r.cpu, r.pid,
                         r.tid, Str(o.if_contains("type")));
  switch (r.type) {
    case PFM_REC_BRANCH:
      // Prediction is only known from hardware BTS (flags bit 4); soft BTS
      // leaves flags 0, so print the bit only where a mix shows it matters.
      out << Str(o.if_contains("from")) << " -> " << Str(o.if_contains("to"))
          << ((r.misc & PFM_MISC_BRANCH_KERNEL_FROM) ? "  (kernel)" : "");
      break;
    case PFM_REC_PEBS:
      out << "ip " << Str(o.if_contains("ip")) << " addr "
          << Str(o.if_contains("addr")) << " lat " << r.u.pebs.latency
          << " event " << r.u.pebs.event;
      break;
    case PFM_REC_SWITCH_OUT:
      out << "-> pid " << r.u.sw.other_pid
          << ((r.misc & PFM_MISC_SWITCH_PREEMPT) ? " (preempted)" : " (voluntary)");
      break;
    case PFM_REC_SWITCH_IN:
      out << "<- pid " << r.u.sw.other_pid
          << ((r.misc & PFM_MISC_SWITCH_PREEMPT) ? " (preempted)" : " (voluntary)");
      break;
    case PFM_REC_LOST:
      out << r.u.lost.count << " records lost";
      break;
    case PFM_REC_RESIZED:
      out << FormatSize(r.u.resized.old_bytes) << " -> "
          << FormatSize(r.u.resized.new_bytes);
      break;
    case PFM_REC_EXIT:
      out << "status " << r.u.exit.status;
      break;
    default:
      break;
  }
  out << "\n";
}

absl::StatusOr<int> Snapshot(const CliContext& ctx, const Args& args) {
  Flags f(args, 1);
  absl::StatusOr<std::string> file = f.Take("-o");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("snapshot");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1) return Usage("usage: snapshot ID [-o FILE]");
  absl::StatusOr<uint64_t> id = ParseSessionId(pos->front());
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  json::object info;
  absl::StatusOr<RingReader> ring = MapRing(*c, *id, /*drain=*/true, &info);
  if (!ring.ok()) return ring.status();
  std::vector<pfm_record> recs;
  if (absl::Status s = ring->Snapshot(&recs); !s.ok()) return s;
  if (!file->empty()) {
    json::object header{{"session", *id}, {"kind", "snapshot"}, {"ring", info}};
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(*file, header);
    if (!w.ok()) return w.status();
    if (absl::Status s = w->Append(recs.data(), recs.size()); !s.ok()) return s;
    if (absl::Status s = w->Finish({{"records", recs.size()},
                                    {"lost", ring->lost()},
                                    {"overwritten", ring->overwritten()}});
        !s.ok())
      return s;
  }
  if (ctx.json) {
    json::array arr;
    for (const pfm_record& r : recs) arr.push_back(RecordToJson(r));
    PrintJson(ctx, json::object{{"session", *id},
                                {"records", std::move(arr)},
                                {"lost", ring->lost()},
                                {"overwritten", ring->overwritten()},
                                {"ring_records", ring->records()},
                                {"bytes_written", ring->header().head}});
    return 0;
  }
  if (!file->empty()) {
    *ctx.out << recs.size() << " records written to " << *file << "\n";
    return 0;
  }
  for (const pfm_record& r : recs) PrintRecordLine(*ctx.out, r);
  *ctx.out << recs.size() << " records (" << ring->lost() << " lost, "
           << ring->overwritten() << " overwritten)\n";
  return 0;
}

// What `report` needs from the daemon to symbolize and summarise a trace:
// the target's executable mappings (soft BTS on the host), the session's
// counters and breakpoints, its state, and the tracer's step count. Copied
// into a trace file's trailer; nothing if the session is gone.
void AddSessionSummary(Client& c, uint64_t id, json::object* trailer) {
  absl::StatusOr<Client::Reply> show = c.Call("session_show", {{"id", id}});
  if (!show.ok() || !show->result.is_object()) return;
  const json::object& so = show->result.as_object();
  for (const char* k : {"counters", "breakpoints", "maps", "state", "exit_status",
                        "fatal_signal"})
    if (const json::value* v = so.if_contains(k)) (*trailer)[k] = *v;
  if (const json::value* v = so.if_contains("soft_bts")) {
    (*trailer)["steps"] = v->at("steps");
    (*trailer)["soft_bts"] = *v;
  }
}

volatile std::sig_atomic_t g_stop_stream = 0;
void StopStream(int) { g_stop_stream = 1; }

absl::StatusOr<int> Stream(const CliContext& ctx, const Args& args) {
  Flags f(args, 1);
  absl::StatusOr<std::string> file = f.Take("-o");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("stream");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1 || file->empty()) return Usage("usage: stream ID -o FILE");
  absl::StatusOr<uint64_t> id = ParseSessionId(pos->front());
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  json::object info;
  absl::StatusOr<RingReader> ring = MapRing(*c, *id, /*drain=*/false, &info);
  if (!ring.ok()) return ring.status();
  if (ring->header().mode != PFM_RING_LOSSLESS)
    return Usage(absl::StrCat("session ", *id,
                              " is not lossless: use snapshot for a history ring"));
  // The connection stays open only so a dead pfmd is noticed (it hangs up);
  // otherwise a ring whose writer died never ends and this loop would poll it
  // forever. The daemon's pidfd (taken now, while its pid cannot be reused)
  // tells a pfmd that is still exiting from one that is gone: a SIGTERMed
  // pfmd closes connections first and ends the rings afterwards.
  UniqueFd daemon;
  {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(c->fd(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
        cred.pid > 0)
      daemon = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0)));
  }
  json::object header{{"session", *id}, {"kind", "stream"}, {"ring", info}};
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(*file, header);
  if (!w.ok()) return w.status();
  std::signal(SIGINT, StopStream);
  std::signal(SIGTERM, StopStream);
  std::vector<pfm_record> batch;
  uint64_t lost_records = 0;
  bool hung_up = false;
  for (;;) {
    // Read ended before consuming: records written before the end flag are
    // then all visible to this Consume.
    const bool ended = ring->ended();
    batch.clear();
    ring->Consume(&batch, 1 << 16);
    for (const pfm_record& r : batch)
      if (r.type == PFM_REC_LOST) lost_records += r.u.lost.count;
    if (!batch.empty()) {
      if (absl::Status s = w->Append(batch.data(), batch.size()); !s.ok()) return s;
      continue;
    }
    if (ended || g_stop_stream || hung_up || !ring->status().ok()) break;
    // pfmd sends nothing unsolicited: any event on the connection is the
    // hang-up (or garbage, which is as final).
    pollfd pc{c->fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&pc, 1, 2) > 0 && pc.revents != 0) {
      hung_up = true;
      if (daemon.valid()) {
        // Bounded: a pfmd that hung up but lives on is treated as gone.
        pollfd pd{daemon.get(), POLLIN, 0};
        for (int i = 0; i < 100 && !g_stop_stream; ++i)
          if (::poll(&pd, 1, 100) != 0) break;
      }
      // One more pass drains what the writer published before it went.
    }
  }
  if (!ring->status().ok())
    return absl::DataLossError(absl::StrCat(
        ring->status().message(), "; ", w->records(), " records written to ",
        *file, " without a trailer (trace cut short)"));
  if (hung_up && !ring->ended() && !g_stop_stream) {
    // No trailer: the file says it was cut short (pfm/trace_file.h), and the
    // records flushed so far stay readable.
    return absl::UnavailableError(absl::StrCat(
        "pfmd went away before session ", *id, "'s ring ended; ",
        w->records(), " records written to ", *file,
        " without a trailer (trace cut short)"));
  }
  json::object trailer{{"records", w->records()},
                       {"lost", ring->lost()},
                       {"lost_records_in_stream", lost_records},
                       {"ended", ring->ended()},
                       {"interrupted", g_stop_stream != 0},
                       {"daemon_exited", hung_up}};
  // What report needs to symbolize and summarise: the target's executable
  // mappings (soft BTS on the host) and the session's counters, if the
  // session is still there to ask.
  if (!hung_up) {
    AddSessionSummary(*c, *id, &trailer);
  }
  if (absl::Status s = w->Finish(trailer); !s.ok()) return s;
  if (ctx.json) PrintJson(ctx, trailer);
  else *ctx.out << w->records() << " records written to " << *file << " ("
                << ring->lost() << " lost)\n";
  return 0;
}


// The executable mappings a trace header carries (for symbols).
std::vector<MapEntry> MapsFromHeader(const json::object& header) {
  std::vector<MapEntry> maps;
  const json::value* m = header.if_contains("maps");
  if (m == nullptr || !m->is_array()) return maps;
  for (const json::value& e : m->as_array()) {
    if (!e.is_object()) continue;
    const json::object& o = e.as_object();
    MapEntry me;
    auto hex = [&](const char* k) -> uint64_t {
      const json::value* v = o.if_contains(k);
      if (v == nullptr) return 0;
      if (v->is_string()) return std::strtoull(std::string(v->as_string()).c_str(), nullptr, 16);
      return v->to_number<uint64_t>();
    };
    me.start = hex("start");
    me.end = hex("end");
    me.offset = hex("offset");
    if (const json::value* p = o.if_contains("path"); p && p->is_string())
      me.path = std::string(p->as_string());
    if (me.end > me.start && !me.path.empty()) maps.push_back(me);
  }
  return maps;
}

absl::StatusOr<int> Report(const CliContext& ctx, const Args& args) {
  Flags f(args, 1);
  absl::StatusOr<std::string> limit_s = f.Take("--limit", "");
  if (!limit_s.ok()) return limit_s.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("report");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1) return Usage("usage: report FILE [--limit N]");
  size_t limit = ctx.json ? SIZE_MAX : 20;
  if (!limit_s->empty()) {
    absl::StatusOr<int> n = ParseIntArg("--limit", *limit_s, 0, 1 << 30);
    if (!n.ok()) return n.status();
    limit = static_cast<size_t>(*n);
  }
  absl::StatusOr<Trace> t = ReadTrace(pos->front());
  if (!t.ok()) return t.status();
  std::vector<MapEntry> maps = MapsFromHeader(t->trailer);
  if (maps.empty()) maps = MapsFromHeader(t->header);
  Symbolizer sym(std::move(maps));
  std::map<std::string, uint64_t> by_type;
  std::map<std::string, uint64_t> hot;  // branches by source function
  std::vector<const pfm_record*> branches;
  uint64_t lost = 0;
  for (const pfm_record& r : t->records) {
    ++by_type[RecordTypeName(r.type)];
    if (r.type == PFM_REC_LOST) lost += r.u.lost.count;
    if (r.type == PFM_REC_BRANCH) branches.push_back(&r);
  }
  auto fn_of = [&](uint64_t addr) {
    std::string s = sym.Symbolize(addr);
    const size_t plus = s.rfind('+');
    return plus == std::string::npos ? s : s.substr(0, plus);
  };
  for (const pfm_record* b : branches) {
    std::string fn = fn_of(b->u.branch.from);
    ++hot[fn.empty() ? Hex(b->u.branch.from) : fn];
  }
  std::vector<std::pair<uint64_t, std::string>> hot_sorted;
  for (const auto& [fn, n] : hot) hot_sorted.emplace_back(n, fn);
  std::sort(hot_sorted.rbegin(), hot_sorted.rend());
  const json::value* counters = t->trailer.if_contains("counters");
  if (ctx.json) {
    json::array recs;
    size_t first = t->records.size() > limit ? t->records.size() - limit : 0;
    for (size_t i = first; i < t->records.size(); ++i) {
      const pfm_record& r = t->records[i];
      json::object o = RecordToJson(r);
      if (r.type == PFM_REC_BRANCH) {
        o["from_sym"] = sym.Symbolize(r.u.branch.from);
        o["to_sym"] = sym.Symbolize(r.u.branch.to);
      } else if (r.type == PFM_REC_PEBS) {
        o["ip_sym"] = sym.Symbolize(r.u.pebs.ip);
      }
      recs.push_back(std::move(o));
    }
    json::object types;
    for (const auto& [k, v] : by_type) types[k] = v;
    json::array hot_json;
    for (size_t i = 0; i < hot_sorted.size() && i < 20; ++i)
      hot_json.push_back(json::object{{"function", hot_sorted[i].second},
                                      {"branches", hot_sorted[i].first}});
    PrintJson(ctx, json::object{{"complete", t->complete},
                                {"cut_reason", t->cut_reason},
                                {"header", t->header},
                                {"trailer", t->trailer},
                                {"summary", json::object{{"records", t->records.size()},
                                                         {"by_type", std::move(types)},
                                                         {"lost", lost}}},
                                {"hot_functions", std::move(hot_json)},
                                {"counters", counters ? *counters : json::array{}},
                                {"records", std::move(recs)}});
    return 0;
  }
  std::ostream& out = *ctx.out;
  out << pos->front() << ": " << t->records.size() << " records";
  for (const auto& [k, v] : by_type) out << ", " << v << " " << k;
  out << "\n";
  if (!t->complete) out << "warning: trace cut short (" << t->cut_reason << ")\n";
  if (const json::value* c = t->header.if_contains("command"))
    out << "command: " << Str(c) << "\n";
  if (const json::value* s = t->trailer.if_contains("exit"))
    out << "exit: " << Str(s) << "\n";
  if (const json::value* s = t->trailer.if_contains("steps"))
    out << "soft-BTS steps: " << Str(s) << "\n";
  if (lost) out << "lost: " << lost << " records\n";
  if (!hot_sorted.empty()) {
    out << "\nbranches by source function:\n";
    for (size_t i = 0; i < hot_sorted.size() && i < 15; ++i)
      out << absl::StrFormat("  %10u  %s\n", hot_sorted[i].first, hot_sorted[i].second);
  }
  if (counters && counters->is_array() && !counters->as_array().empty()) {
    out << "\ncounters:\n";
    for (const json::value& cv : counters->as_array()) {
      const json::object& co = cv.as_object();
      out << absl::StrFormat("  %-24s %16s  running %s\n", Str(co.if_contains("event")),
                             Str(co.if_contains("value")), Ratio(co.if_contains("ratio")));
    }
  }
  if (!branches.empty() && limit > 0) {
    const size_t n = std::min(limit, branches.size());
    out << "\nlast " << n << " branches:\n";
    for (size_t i = branches.size() - n; i < branches.size(); ++i) {
      const pfm_record& r = *branches[i];
      out << absl::StrFormat("  %-18s %-40s -> %-18s %s\n", Hex(r.u.branch.from),
                             sym.Symbolize(r.u.branch.from), Hex(r.u.branch.to),
                             sym.Symbolize(r.u.branch.to));
    }
  }
  return 0;
}


// record: runs CMD as this process's child, held before exec while the
// daemon attaches (SpawnStopped/Release: kernel/drivers/ptrace/soft_bts.h),
// streams a lossless ring to FILE while it runs (or snapshots a history ring
// when it ends), and exits with CMD's status. The session is tied to this
// connection (not detached): if pfmctl dies, the daemon ends it.
absl::StatusOr<int> Record(const CliContext& ctx, const Args& args) {
  Flags f(args, 1);
  absl::StatusOr<SessionSpec> spec = ParseSessionFlags(f);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::string> file = f.Take("-o");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("record");
  if (!pos.ok()) return pos.status();
  if (file->empty() || pos->empty() || pos->front() != "--" || pos->size() < 2)
    return Usage("usage: record [session flags] -o FILE -- CMD ARGS...");
  const std::vector<std::string> argv(pos->begin() + 1, pos->end());
  spec->detached = false;
  if (spec->pid >= 0 || spec->cpu >= 0)
    return Usage("record traces the command it runs: no --pid or --cpu");
  if (spec->bts == "off" && spec->counters.empty() && spec->pebs_event.empty() &&
      spec->breakpoints.empty())
    spec->bts = "lossless";
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<Client::Reply> st = c->Call("status");
  if (!st.ok()) return st.status();
  if (st->result.at("driver").as_string() != "host")
    return absl::FailedPreconditionError(
        "record runs a real command: it needs a pfmd with --driver host");
  pid_t pid = -1;
  ErrorDetail d;
  if (int err = SpawnStopped(argv, &pid, &d); err < 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message));
  spec->pid = pid;
  absl::StatusOr<SessionSpec> valid = Validate(*spec);
  absl::StatusOr<Client::Reply> cr =
      valid.ok() ? c->Call("session_create", {{"spec", valid->ToJson()}})
                 : absl::StatusOr<Client::Reply>(valid.status());
  auto abandon = [&](absl::Status s) {
    Abandon(pid, nullptr);
    int ws;
    ::waitpid(pid, &ws, 0);
    return s;
  };
  if (!cr.ok()) return abandon(cr.status());
  const uint64_t id = cr->result.at("id").to_number<uint64_t>();
  json::object info;
  std::optional<RingReader> ring;
  if (spec->bts != "off" || !spec->pebs_event.empty()) {
    absl::StatusOr<RingReader> r = MapRing(*c, id, false, &info);
    if (!r.ok()) return abandon(r.status());
    ring.emplace(std::move(*r));
  }
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  json::object header{{"session", id}, {"kind", "record"}, {"command", command},
                      {"pid", pid}, {"spec", valid->ToJson()}, {"ring", info}};
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(*file, header);
  if (!w.ok()) return abandon(w.status());
  if (int err = Release(pid, &d); err < 0)
    return abandon(absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message)));
  int wstatus = 0;
  bool reaped = false;
  std::vector<pfm_record> batch;
  const bool lossless = ring && ring->mode() == PFM_RING_LOSSLESS;
  auto reap = [&] {
    if (!reaped && ::waitpid(pid, &wstatus, WNOHANG) == pid) reaped = true;
  };
  int after_exit_ms = 0;
  for (;;) {
    reap();
    if (!lossless) {
      if (reaped) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const bool ended = ring->ended();
    batch.clear();
    ring->Consume(&batch, 1 << 16);
    if (!batch.empty()) {
      if (absl::Status s = w->Append(batch.data(), batch.size()); !s.ok()) return s;
      continue;
    }
    if (ended) break;
    // The ring ends when the daemon sees the exit; don't wait forever if it
    // never does (e.g. the daemon went away).
    if (reaped && (after_exit_ms += 5) > 5000) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  while (!reaped) {
    if (::waitpid(pid, &wstatus, 0) == pid) reaped = true;
    else if (errno != EINTR) break;
  }
  if (ring && !lossless) {
    // History: the newest records, up to the exit (or the crash).
    for (int i = 0; i < 500 && !ring->ended(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    batch.clear();
    if (absl::Status s = ring->Snapshot(&batch); !s.ok()) return s;
    if (absl::Status s = w->Append(batch.data(), batch.size()); !s.ok()) return s;
  }
  json::object trailer{{"records", w->records()}};
  if (ring) trailer["lost"] = ring->lost();
  if (WIFEXITED(wstatus)) trailer["exit"] = absl::StrCat("exit ", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) trailer["exit"] = absl::StrCat("killed by signal ", WTERMSIG(wstatus));
  trailer["wait_status"] = wstatus;
  AddSessionSummary(*c, id, &trailer);
  (void)c->Call("session_kill", {{"id", id}});
  if (absl::Status s = w->Finish(trailer); !s.ok()) return s;
  if (ctx.json) PrintJson(ctx, trailer);
  else
    *ctx.err << "pfmctl: recorded " << w->records() << " records of '" << command
             << "' to " << *file << " (" << Str(trailer.if_contains("exit")) << ")\n";
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

}  // namespace

std::string PfmctlUsage() {
  return R"(usage: pfmctl [--socket PATH] [--json] COMMAND [ARGS]
commands:
  status                      the machine's PMU, sessions, memory charges
  session create [--role debugger|profiler] (--pid PID | --cpu N)
                 [--bts history|lossless] [--buffer SIZE] [--filter user|kernel|all]
                 [--format fixed|compact] [--block] [--pebs EVENT[:period]]
                 [--counter EVENT]... [--breakpoint ADDR:LEN:r|w|rw|x]... [--pinned]
                              a session (detached: it lives until `session kill`)
  session list | show ID | kill ID
  snapshot ID [-o FILE]       the records in a session's ring, oldest first
  stream ID -o FILE           lossless records to FILE until the session ends
  resources                   who holds which counter, debug register, BTS/PEBS
  record [session flags] -o FILE -- CMD ARGS...
                              run CMD traced; exit with CMD's status
  report FILE [--limit N]     branches (symbolized), samples, switches, counters
  sim pause|resume|run NS|stats [PID]|exit PID
                              control the simulated machine (--driver sim)
  shutdown                    stop the daemon (the embedded one by default)
global flags:
  --socket PATH   daemon socket (default $PFMD_SOCKET, /run/pfmd.sock, or an
                  embedded pfmd started on demand on $XDG_RUNTIME_DIR/pfmd/
                  pfmd.sock, else /tmp/pfmd-$UID/pfmd.sock)
  --json          one JSON document on stdout
  --driver host|sim, --sim-pmu NAME, --sim-cpus N, --sim-tasks N, --sim-seed N
                  how to start the embedded pfmd if none runs
)";
}

absl::StatusOr<int> RunCommand(const CliContext& ctx, const Args& args) {
  const std::string& cmd = args[0];
  if (cmd == "status") return Status(ctx, args);
  if (cmd == "shutdown") return Shutdown(ctx, args);
  if (cmd == "session") return Session(ctx, args);
  if (cmd == "resources") return Resources(ctx, args);
  if (cmd == "sim") return Sim(ctx, args);
  if (cmd == "snapshot") return Snapshot(ctx, args);
  if (cmd == "stream") return Stream(ctx, args);
  if (cmd == "report") return Report(ctx, args);
  if (cmd == "record") return Record(ctx, args);
  return Usage(absl::StrCat("unknown command '", cmd, "' (see pfmctl help)"));
}

}  // namespace pfm
