#include "userspace/pfmctl/render.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "libpfm-bts/units.h"
#include "pfm/record_json.h"

namespace pfm {
namespace {

using K = JsonKind;

void RenderHolders(const ReplyNode& holders, std::ostream& out) {
  for (const ReplyNode& h : holders.Elements()) {
    out << absl::StrFormat("    %-10s %-28s session %-4s %-8s %-8s running %s\n",
                           h.Member("slot").Text(K::kString, "-"),
                           h.Member("what").Text(K::kString, "-"),
                           h.Member("session").Text(K::kUint, "-"),
                           h.Member("mode").Text(K::kString, "-"),
                           h.Member("state").Text(K::kString, "-"),
                           h.Member("ratio").Ratio());
  }
}

constexpr char kSessionLine[] = "%-4s %-6s %-9s %-12s %-9s %10s %10s %10s %6s\n";
constexpr char kCounterLine[] = "  %-28s %16s %14s %14s %16s %12s\n";

}  // namespace

void RenderStatus(const ReplyNode& o, const std::string& socket_path,
                  std::ostream& out) {
  const ReplyNode m = o.Member("machine");
  out << "pfmd on " << socket_path << " (driver "
      << o.Member("driver").Text(K::kString) << ")\n";
  out << "machine: " << m.Member("cpus").Text(K::kUint) << " cpus, pmu "
      << m.Member("pmu").Text(K::kString) << " ("
      << m.Member("pmu_desc").Text(K::kString) << ")\n";
  out << "  counters: " << m.Member("gp_counters").Text(K::kUint) << " general, "
      << m.Member("fixed_counters").Text(K::kUint) << " fixed; debug registers: "
      << m.Member("debug_registers").Text(K::kUint) << "\n";
  out << "  bts: " << m.Member("bts").Text(K::kBool)
      << "  pebs: " << m.Member("pebs").Text(K::kBool)
      << "  lbr: " << m.Member("lbr").Text(K::kBool)
      << "  soft-bts (ptrace): " << m.Member("soft_bts").Text(K::kBool)
      << "  software events: " << m.Member("software_events").Text(K::kBool)
      << "\n";
  if (const ReplyNode scope = m.Member("soft_bts_scope");
      scope.present() && !scope.String().empty())
    out << "  soft-bts: " << scope.String() << "\n";
  out << "  from: " << m.Member("source").Text(K::kString) << "\n";
  out << "sessions: " << o.Member("sessions").Text(K::kUint) << "\n";
  const ReplyNode mem = o.Member("memory");
  out << "memory: limit per uid " << FormatSize(mem.Member("limit_per_uid").Uint())
      << "\n";
  for (const ReplyNode& e : mem.Member("charged").Elements()) {
    out << "  uid " << e.Member("uid").Text(K::kUint) << ": "
        << FormatSize(e.Member("bytes").Uint()) << "\n";
  }
}

void RenderResources(const ReplyNode& r, std::ostream& out) {
  if (const ReplyNode cpus = r.Member("cpus"); cpus.present()) {
    for (const ReplyNode& c : cpus.Elements()) {
      out << "cpu " << c.Member("cpu").Text(K::kInteger, "-") << " (running pid "
          << c.Member("running_pid").Text(K::kInteger, "-") << ")\n";
      if (const ReplyNode h = c.Member("holders"); h.present()) RenderHolders(h, out);
    }
  }
  if (const ReplyNode tasks = r.Member("tasks"); tasks.present()) {
    for (const ReplyNode& t : tasks.Elements()) {
      out << "task " << t.Member("pid").Text(K::kInteger, "-") << "\n";
      if (const ReplyNode h = t.Member("holders"); h.present()) RenderHolders(h, out);
    }
  }
}

void RenderSessionHeader(std::ostream& out) {
  out << absl::StrFormat(kSessionLine, "ID", "UID", "ROLE", "TARGET", "BTS", "BUFFER",
                         "CHARGED", "RECORDS", "LOST");
}

void RenderSessionLine(const ReplyNode& s, std::ostream& out) {
  out << absl::StrFormat(kSessionLine, s.Member("id").Text(K::kUint),
                         s.Member("uid").Text(K::kUint),
                         s.Member("role").Text(K::kString),
                         s.Member("target").Text(K::kString),
                         s.Member("bts").Text(K::kString),
                         FormatSize(s.Member("buffer_bytes").Uint()),
                         FormatSize(s.Member("charged_bytes").Uint()),
                         s.Member("records").Text(K::kUint),
                         s.Member("lost").Text(K::kUint));
}

void RenderSessionDetail(const ReplyNode& s, std::ostream& out) {
  RenderSessionLine(s, out);
  if (const ReplyNode cs = s.Member("counters"); cs.present()) {
    const std::vector<ReplyNode> counters = cs.Elements();
    if (!counters.empty())
      out << absl::StrFormat(kCounterLine, "COUNTER", "VALUE", "ENABLED(ns)",
                             "RUNNING(ns)", "SCALED", "RUNNING");
    for (const ReplyNode& c : counters) {
      out << absl::StrFormat(kCounterLine, c.Member("event").Text(K::kString),
                             c.Member("value").Text(K::kUint),
                             c.Member("time_enabled").Text(K::kUint),
                             c.Member("time_running").Text(K::kUint),
                             c.Member("scaled").Text(K::kUint),
                             c.Member("ratio").Ratio());
    }
  }
  if (const ReplyNode bs = s.Member("breakpoints"); bs.present()) {
    for (const ReplyNode& b : bs.Elements()) {
      out << "  breakpoint " << b.Member("spec").Text(K::kString) << " "
          << b.Member("state").Text(K::kString) << ", "
          << b.Member("value").Text(K::kUint, "0") << " hits, on hardware "
          << b.Member("ratio").Ratio() << "\n";
    }
  }
}

void RenderRecordLine(const pfm_record& r, std::ostream& out) {
  boost::json::object o = RecordToJson(r);
  out << absl::StrFormat("%14u cpu%-3u %6u/%-6u %-10s", r.time, r.cpu, r.pid,
                         r.tid, JsonText(o.if_contains("type")));
  switch (r.type) {
    case PFM_REC_BRANCH:
      // Prediction is only known from hardware BTS (flags bit 4); soft BTS
      // leaves flags 0, so print the bit only where a mix shows it matters.
      out << JsonText(o.if_contains("from")) << " -> " << JsonText(o.if_contains("to"))
          << ((r.misc & PFM_MISC_BRANCH_KERNEL_FROM) ? "  (kernel)" : "");
      break;
    case PFM_REC_PEBS:
      out << "ip " << JsonText(o.if_contains("ip")) << " addr "
          << JsonText(o.if_contains("addr")) << " lat " << r.u.pebs.latency
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
    case PFM_REC_SCHEDULE:
      out << "request " << r.u.sched.request
          << ((r.misc & PFM_MISC_SCHED_ON) ? " on" : " off") << " slot "
          << r.u.sched.slot;
      break;
    case PFM_REC_GAP:
      out << "untraced " << JsonText(o.if_contains("from")) << " .. "
          << JsonText(o.if_contains("to"));
      break;
    default:
      break;
  }
  out << "\n";
}

absl::Status PrintCheckedReply(const CliContext& ctx, const ReplyReader& reader,
                               const boost::json::value& raw,
                               const std::string& text) {
  if (!reader.ok()) return reader.status();
  if (ctx.json) {
    PrintJson(ctx, raw);
  } else {
    *ctx.out << text;
  }
  return absl::OkStatus();
}

}  // namespace pfm
