#include "pfm/record_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pfm {

std::string RecordTypeName(uint16_t type) {
  switch (type) {
    case PFM_REC_BRANCH: return "branch";
    case PFM_REC_PEBS: return "pebs";
    case PFM_REC_SWITCH_OUT: return "switch_out";
    case PFM_REC_SWITCH_IN: return "switch_in";
    case PFM_REC_LOST: return "lost";
    case PFM_REC_COUNTER: return "counter";
    case PFM_REC_THROTTLE: return "throttle";
    case PFM_REC_RESIZED: return "resized";
    case PFM_REC_EXIT: return "exit";
    case PFM_REC_SCHEDULE: return "schedule";
    case PFM_REC_GAP: return "gap";
    case PFM_REC_EXEC: return "exec";
    default: return absl::StrCat("type_", type);
  }
}

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

boost::json::object RecordToJson(const pfm_record& r) {
  boost::json::object o{{"type", RecordTypeName(r.type)},
                        {"time", r.time},
                        {"cpu", r.cpu},
                        {"pid", r.pid},
                        {"tid", r.tid}};
  switch (r.type) {
    case PFM_REC_BRANCH:
      o["from"] = Hex(r.u.branch.from);
      o["to"] = Hex(r.u.branch.to);
      o["predicted"] = (r.misc & PFM_MISC_BRANCH_PREDICTED) != 0;
      break;
    case PFM_REC_PEBS:
      o["ip"] = Hex(r.u.pebs.ip);
      o["addr"] = Hex(r.u.pebs.addr);
      o["latency"] = r.u.pebs.latency;
      o["data_src"] = Hex(r.u.pebs.data_src);
      o["event"] = r.u.pebs.event;
      o["counter"] = r.u.pebs.counter;
      break;
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN:
      o["preempt"] = (r.misc & PFM_MISC_SWITCH_PREEMPT) != 0;
      o[r.type == PFM_REC_SWITCH_OUT ? "next_pid" : "prev_pid"] = r.u.sw.other_pid;
      o[r.type == PFM_REC_SWITCH_OUT ? "next_tid" : "prev_tid"] = r.u.sw.other_tid;
      break;
    case PFM_REC_LOST:
      o["count"] = r.u.lost.count;
      break;
    case PFM_REC_COUNTER:
      o["request"] = r.u.counter.request;
      o["value"] = r.u.counter.value;
      o["time_enabled"] = r.u.counter.time_enabled;
      o["time_running"] = r.u.counter.time_running;
      break;
    case PFM_REC_RESIZED:
      o["old_bytes"] = r.u.resized.old_bytes;
      o["new_bytes"] = r.u.resized.new_bytes;
      break;
    case PFM_REC_EXIT:
      o["status"] = r.u.exit.status;
      break;
    case PFM_REC_SCHEDULE:
      o["request"] = r.u.sched.request;
      o["slot"] = r.u.sched.slot;
      o["on"] = (r.misc & PFM_MISC_SCHED_ON) != 0;
      break;
    case PFM_REC_GAP:
      o["from"] = Hex(r.u.gap.from);
      o["to"] = Hex(r.u.gap.to);
      break;
    default:
      break;
  }
  return o;
}

}  // namespace pfm
