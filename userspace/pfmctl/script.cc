#include "userspace/pfmctl/script.h"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>

#include <ostream>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "libpfm-bts/units.h"
#include "pfm/record_json.h"
#include "userspace/pfmctl/flags.h"

namespace pfm {
namespace {

namespace json = boost::json;

// Output is written in pieces of about this size: one write per piece, and
// a closed stdout noticed within a piece.
constexpr size_t kFlushBytes = 64 << 10;

const std::string& SymOrUnknown(const std::string& sym) {
  static const std::string kUnknown = "[unknown]";
  return sym.empty() ? kUnknown : sym;
}

std::string WaitStatusText(int64_t status) {
  const int ws = static_cast<int>(status);
  if (status < 0 || status > 0xffff) return "";
  if (WIFEXITED(ws)) return absl::StrCat(" (exit ", WEXITSTATUS(ws), ")");
  if (WIFSIGNALED(ws)) return absl::StrCat(" (killed by signal ", WTERMSIG(ws), ")");
  return "";
}

}  // namespace

absl::Status FlushOutput(std::ostream& out, std::string* buf, uint64_t written) {
  errno = 0;
  out.write(buf->data(), static_cast<std::streamsize>(buf->size()));
  if (!out.fail()) out.flush();
  buf->clear();
  if (!out) {
    if (errno == EPIPE) return absl::CancelledError("output pipe closed");
    return absl::UnavailableError(absl::StrCat(
        "cannot write the output (closed or full); stopped after ", written, " records"));
  }
  return absl::OkStatus();
}

void AppendScriptLine(const ReportRecord& rr, std::string* out) {
  const pfm_record& r = rr.record;
  absl::StrAppendFormat(out, "%u.%09u [%03u] %u/%u %s: ", r.time / 1000000000,
                        r.time % 1000000000, r.cpu, r.pid, r.tid, RecordTypeName(r.type));
  switch (r.type) {
    case PFM_REC_BRANCH:
      absl::StrAppendFormat(out, "%x %s => %x %s%s", r.u.branch.from,
                            SymOrUnknown(rr.from_sym), r.u.branch.to,
                            SymOrUnknown(rr.to_sym),
                            (r.misc & PFM_MISC_BRANCH_KERNEL_FROM) ? " (from kernel)" : "");
      break;
    case PFM_REC_PEBS:
      absl::StrAppendFormat(out, "ip %x %s addr %#x latency %u data_src %#x request %u",
                            r.u.pebs.ip, SymOrUnknown(rr.ip_sym), r.u.pebs.addr,
                            r.u.pebs.latency, r.u.pebs.data_src, r.u.pebs.event);
      break;
    case PFM_REC_SWITCH_OUT:
    case PFM_REC_SWITCH_IN:
      absl::StrAppendFormat(out, "%s %u/%u %s", r.type == PFM_REC_SWITCH_OUT ? "->" : "<-",
                            r.u.sw.other_pid, r.u.sw.other_tid,
                            (r.misc & PFM_MISC_SWITCH_PREEMPT) ? "preempted" : "voluntary");
      break;
    case PFM_REC_LOST:
      absl::StrAppendFormat(out, "%u records lost", r.u.lost.count);
      break;
    case PFM_REC_COUNTER:
      absl::StrAppendFormat(out, "request %u value %u enabled %u running %u",
                            r.u.counter.request, r.u.counter.value,
                            r.u.counter.time_enabled, r.u.counter.time_running);
      break;
    case PFM_REC_RESIZED:
      absl::StrAppend(out, FormatSize(r.u.resized.old_bytes), " -> ",
                      FormatSize(r.u.resized.new_bytes));
      break;
    case PFM_REC_EXIT:
      absl::StrAppendFormat(out, "status %d%s", r.u.exit.status,
                            WaitStatusText(r.u.exit.status));
      break;
    case PFM_REC_SCHEDULE:
      absl::StrAppendFormat(out, "request %u %s slot %u", r.u.sched.request,
                            (r.misc & PFM_MISC_SCHED_ON) ? "on" : "off", r.u.sched.slot);
      break;
    case PFM_REC_GAP:
      absl::StrAppendFormat(out, "untraced from %x %s to %x %s", r.u.gap.from,
                            SymOrUnknown(rr.from_sym), r.u.gap.to, SymOrUnknown(rr.to_sym));
      break;
    default:
      break;
  }
  // Types without fields leave "type: " with a trailing space: trim it.
  if (!out->empty() && out->back() == ' ') out->pop_back();
  out->push_back('\n');
}

namespace {

// A JSON object's members without its braces: "" for none.
std::string Members(const json::object& o) {
  const std::string s = json::serialize(o);
  return s.size() > 2 ? s.substr(1, s.size() - 2) : "";
}

}  // namespace

JsonRecordStream::JsonRecordStream(std::ostream& out, const json::object& head) : out_(out) {
  const std::string members = Members(head);
  buf_ = absl::StrCat("{", members, members.empty() ? "" : ",", "\"records\":[");
}

absl::Status JsonRecordStream::Add(const ReportRecord& record) {
  if (records_ > 0) buf_.push_back(',');
  buf_ += json::serialize(RecordJson(record));
  ++records_;
  return buf_.size() >= kFlushBytes ? FlushOutput(out_, &buf_, records_) : absl::OkStatus();
}

absl::Status JsonRecordStream::Finish(const json::object& tail) {
  const std::string members = Members(tail);
  absl::StrAppend(&buf_, "]", members.empty() ? "" : ",", members, "}\n");
  return FlushOutput(out_, &buf_, records_);
}

void JsonRecordStream::Fail(const absl::Status& error) {
  if (records_ == 0) {
    buf_.clear();
    return;
  }
  // The code as the error line names it (StatusCodeName).
  const json::object e{{"code", absl::StatusCodeToString(error.code())},
                       {"message", std::string(error.message())}};
  absl::StrAppend(&buf_, "],\"error\":", json::serialize(e), "}\n");
  (void)FlushOutput(out_, &buf_, records_);
}

absl::StatusOr<int> ScriptCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("script");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1) return UsageError("usage: script TRACE");
  const std::string& file = pos->front();
  std::ostream& out = *ctx.out;
  ReportOptions options;
  options.limit = 0;
  absl::StatusOr<TraceReport> rep;
  uint64_t written = 0;
  if (ctx.json) {
    // One document, its records streamed: the summary fields come after
    // the array (a JSON object's members have no order).
    JsonRecordStream stream(out, json::object{{"trace", file}});
    options.each_record = [&](const ReportRecord& rr) { return stream.Add(rr); };
    rep = BuildReport(file, options);
    written = stream.records();
    if (rep.status().code() == absl::StatusCode::kCancelled) return 128 + SIGPIPE;
    if (!rep.ok()) {
      stream.Fail(rep.status());
      return rep.status();
    }
    absl::Status s = stream.Finish(
        json::object{{"complete", rep->complete},
                     {"cut_reason", rep->cut_reason},
                     {"warnings", json::array(rep->warnings.begin(), rep->warnings.end())}});
    if (!s.ok())
      return s.code() == absl::StatusCode::kCancelled ? absl::StatusOr<int>(128 + SIGPIPE) : s;
  } else {
    std::string buf;
    options.each_record = [&](const ReportRecord& rr) {
      AppendScriptLine(rr, &buf);
      ++written;
      return buf.size() >= kFlushBytes ? FlushOutput(out, &buf, written) : absl::OkStatus();
    };
    rep = BuildReport(file, options);
    if (rep.status().code() == absl::StatusCode::kCancelled) return 128 + SIGPIPE;
    if (!rep.ok()) {
      // Nothing on stdout for a file that is not a trace (the error comes
      // before any record); a failure mid-way keeps what was printed, as a
      // cut trace does.
      if (written > 0) (void)FlushOutput(out, &buf, written);
      return rep.status();
    }
    if (absl::Status s = FlushOutput(out, &buf, written); !s.ok())
      return s.code() == absl::StatusCode::kCancelled ? absl::StatusOr<int>(128 + SIGPIPE) : s;
  }
  // As perf script does, what makes names untrustworthy goes to stderr,
  // after the records.
  if (!ctx.json && ctx.err != nullptr)
    for (const std::string& w : rep->warnings) *ctx.err << "warning: " << w << "\n";
  if (!rep->complete)
    return absl::DataLossError(absl::StrCat(file, ": trace cut short: ", rep->cut_reason,
                                            "; printed ", written, " records"));
  return 0;
}

}  // namespace pfm
