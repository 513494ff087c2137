#include "userspace/pfmctl/trace_commands.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "pfm/client.h"
#include "pfm/record_json.h"
#include "pfm/ring_reader.h"
#include "pfm/session_spec.h"
#include "pfm/trace_file.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmctl/breakpoint_names.h"
#include "userspace/pfmctl/capture.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/export.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/progress.h"
#include "userspace/pfmctl/render.h"
#include "userspace/pfmctl/reply.h"
#include "userspace/pfmctl/report.h"
#include "userspace/pfmctl/script.h"
#include "userspace/pfmctl/timeline.h"

namespace pfm {
namespace {

namespace json = boost::json;

// `record`: how long the ring may take to end after the command exited (the
// daemon ends it when it sees the exit) before the file is finished anyway,
// e.g. because the daemon went away.
constexpr auto kRecordEndWait = std::chrono::seconds(5);
// `record` of a history ring: how long to wait for the ring to end (2.5 s in
// 5 ms steps) before taking the snapshot.
constexpr int kHistoryEndPolls = 500;
constexpr auto kHistoryEndPoll = std::chrono::milliseconds(5);
// `report`: branches shown by default in the text form.
constexpr size_t kReportTextLimit = 20;
// `record --output-format`: the trace file's own format (the default), and
// the suffix of the trace kept next to an export.
constexpr char kTraceOutputFormat[] = "pfmtrace";
constexpr char kTraceSuffix[] = ".pfmtrace";

volatile std::sig_atomic_t g_stop_stream = 0;
void StopStream(int sig) { g_stop_stream = sig; }

// `record`: how long to wait, after an interruption, for the traced command
// to exit by itself (a ^C at the terminal reaches it too) before leaving it
// running untraced.
constexpr auto kInterruptedChildWait = std::chrono::seconds(1);
// `record`: after an interruption and session_kill, how long the last drain
// may wait for the ring to end.
constexpr auto kInterruptedDrainWait = std::chrono::seconds(3);

// SIGINT, SIGTERM and SIGHUP stop `record` cleanly: a handler without
// SA_RESTART, so a blocking waitpid returns with EINTR.
void CatchStopSignals() {
  g_stop_stream = 0;  // a second run in the same process (tests)
  struct sigaction sa {};
  sa.sa_handler = StopStream;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

// A pidfd of the daemon at the other end of `conn` (taken while the
// connection pins its pid, so it cannot name a reused pid), or invalid.
UniqueFd DaemonPidfd(int conn) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0)
    return UniqueFd();
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0)));
}

// StreamToFile's progress callback: redraws `line` when due, asking pfmd for
// the tracer's step count only then (one session_show per redraw; the
// count is left out when the request fails).
std::function<void(const StreamResult&)> ProgressCallback(ProgressLine& line, Client& c,
                                                          uint64_t id, const TraceWriter& w) {
  return [&line, &c, id, &w](const StreamResult& r) {
    if (!line.Due()) return;
    ProgressCounts counts;
    counts.branches = r.branches;
    counts.bytes = w.bytes();
    counts.lost = r.lost_records;
    if (absl::StatusOr<Client::Reply> show = c.Call("session_show", {{"id", id}}); show.ok()) {
      ReplyReader reader("session_show", show->result);
      const ReplyNode soft_bts = reader.result().Member("soft_bts");
      if (soft_bts.present()) {
        // Stops of the traced threads: single steps, plus the int3 stops
        // of branch stepping (absent from an older pfmd).
        uint64_t steps = soft_bts.Member("steps").Uint();
        const ReplyNode int3 = soft_bts.Member("int3_stops");
        if (int3.present()) steps += int3.Uint();
        if (reader.ok()) counts.steps = steps;
      }
    }
    line.Show(counts);
  };
}

// What an export says should be known (a binary whose build-id changed since
// the recording: perf would take the new file's symbols), in text mode on
// stderr, one "pfmctl: warning: LINE" each, as perf prints its warnings;
// --json has them in "detail" only (stderr stays quiet).
void PrintExportWarnings(const CliContext& ctx, const ExportResult& r) {
  if (ctx.json || ctx.err == nullptr) return;
  for (const std::string& w : r.warnings) *ctx.err << "pfmctl: warning: " << w << "\n";
}

}  // namespace

// What execvp would run for `name`, checked before anything is created, so
// `record -- nosuchcmd` is NOT_FOUND and leaves no session and no trace
// (rather than a trace of pfmctl's own failed exec).
int SpawnCommand(const CliContext& ctx, const std::vector<std::string>& argv, pid_t* pid,
                 ErrorDetail* d) {
  ctx.out->flush();
  std::fflush(stdout);
  UniqueFd saved;
  if (ctx.json) {
    saved = UniqueFd(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
    if (saved.get() >= 0) ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  const int rc = SpawnStopped(argv, pid, d);
  if (saved.get() >= 0) ::dup2(saved.get(), STDOUT_FILENO);
  return rc;
}

absl::Status CheckCommand(const std::string& name) {
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return absl::OkStatus();
    if (::access(name.c_str(), F_OK) != 0)
      return absl::NotFoundError(absl::StrCat(name, ": no such file"));
    return absl::PermissionDeniedError(absl::StrCat(name, ": not an executable file"));
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (runnable(absl::StrCat(dir.empty() ? "." : dir, "/", name))) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat(name, ": command not found"));
}

absl::StatusOr<int> SnapshotCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::string> file = f.Take("-o");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("snapshot");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1) return UsageError("usage: snapshot ID [-o FILE]");
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
    // The previous file at that name is kept as FILE.old, as perf record does.
    if (absl::Status s = KeepAsOld(*file); !s.ok()) return s;
    absl::StatusOr<TraceWriter> w = TraceWriter::Create(*file, header);
    if (!w.ok()) return w.status();
    if (absl::Status s = w->Append(recs.data(), recs.size()); !s.ok()) return s;
    json::object trailer{{"records", recs.size()},
                         {"lost", ring->lost()},
                         {"overwritten", ring->overwritten()}};
    // The maps (so `report` names the addresses) and the counters.
    const absl::Status summary = AddSessionSummary(*c, *id, *w, &trailer);
    if (absl::Status s = w->Finish(trailer); !s.ok()) return s;
    if (!summary.ok()) return summary;
    WarnMissingMaps(trailer, *ctx.err);
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
  for (const pfm_record& r : recs) RenderRecordLine(r, *ctx.out);
  *ctx.out << recs.size() << " records (" << ring->lost() << " lost, "
           << ring->overwritten() << " overwritten)\n";
  return 0;
}

absl::StatusOr<int> StreamCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::string> file = f.Take("-o");
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("stream");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1 || file->empty()) return UsageError("usage: stream ID -o FILE");
  absl::StatusOr<uint64_t> id = ParseSessionId(pos->front());
  if (!id.ok()) return id.status();
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  json::object info;
  absl::StatusOr<RingReader> ring = MapRing(*c, *id, /*drain=*/false, &info);
  if (!ring.ok()) return ring.status();
  if (ring->header().mode != PFM_RING_LOSSLESS)
    return UsageError(absl::StrCat("session ", *id,
                                   " is not lossless: use snapshot for a history ring"));
  // The connection stays open only so a dead pfmd is noticed (it hangs up).
  const UniqueFd daemon = DaemonPidfd(c->fd());
  absl::StatusOr<SessionStart> start = ReadSessionStart(*c, *id);
  if (!start.ok()) return start.status();
  json::object header{{"session", *id}, {"kind", "stream"}, {"ring", info}};
  if (start->pid > 0) header["pid"] = start->pid;
  if (!start->comm.empty()) header["command"] = start->comm;
  if (absl::Status s = KeepAsOld(*file); !s.ok()) return s;  // as perf record
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(*file, header);
  if (!w.ok()) return w.status();
  // The maps now, in case the session is killed before the end (report
  // uses the last MAPS block, so the summary's later one wins).
  if (start->maps)
    if (absl::Status s = w->AppendMaps(*start->maps); !s.ok()) return s;
  CatchStopSignals();
  StreamOptions options;
  options.daemon_conn = c->fd();
  options.daemon_pidfd = daemon.valid() ? daemon.get() : -1;
  options.stop = &g_stop_stream;
  ProgressLine progress(ctx.err, ProgressWanted());
  options.progress = ProgressCallback(progress, *c, *id, *w);
  absl::StatusOr<StreamResult> res = StreamToFile(*ring, *w, *file, options);
  progress.Clear();
  if (!res.ok()) return res.status();
  if (res->hung_up && !ring->ended() && !g_stop_stream) {
    // No trailer: the file says it was cut short (pfm/trace_file.h), and the
    // records flushed so far stay readable.
    return absl::UnavailableError(absl::StrCat(
        "pfmd went away before session ", *id, "'s ring ended; ", w->records(),
        " records written to ", *file, " without a trailer (trace cut short)"));
  }
  json::object trailer{{"records", w->records()},
                       {"lost", ring->lost()},
                       {"lost_records_in_stream", res->lost_records},
                       {"ended", ring->ended()},
                       {"interrupted", g_stop_stream != 0},
                       {"daemon_exited", res->hung_up}};
  // The session summary, if the session is still there to ask. A malformed
  // answer still leaves a complete trace (without the summary) behind.
  absl::Status summary =
      res->hung_up ? absl::OkStatus() : AddSessionSummary(*c, *id, *w, &trailer);
  if (absl::Status s = w->Finish(trailer); !s.ok()) return s;
  if (!summary.ok()) return summary;
  WarnMissingMaps(trailer, *ctx.err);
  if (ctx.json) {
    PrintJson(ctx, trailer);
  } else {
    *ctx.out << w->records() << " records written to " << *file << " ("
             << ring->lost() << " lost)\n";
  }
  if (g_stop_stream) SetExitSignal(g_stop_stream);
  return 0;
}

absl::StatusOr<int> RecordCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<SessionSpec> spec = ParseSessionFlags(f);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::string> out = f.Take("-o");
  if (!out.ok()) return out.status();
  absl::StatusOr<std::string> output_format = f.Take("--output-format", kTraceOutputFormat);
  if (!output_format.ok()) return output_format.status();
  absl::StatusOr<std::string> attach_s = f.Take("-p");
  if (!attach_s.ok()) return attach_s.status();
  absl::StatusOr<std::string> thread_s = f.Take("-t");
  if (!thread_s.ok()) return thread_s.status();
  // Children are followed by default, as perf record does.
  const bool no_inherit = f.TakeBool("--no-inherit");
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("record");
  if (!pos.ok()) return pos.status();
  // -p PID: attach to a running process (perf record -p) instead of running
  // CMD; traced until it exits or ^C. -t TID: one thread of a running
  // process (perf record -t), until that thread exits or ^C.
  const bool attach = !attach_s->empty() || !thread_s->empty();
  const bool run = !pos->empty() && pos->front() == "--" && pos->size() >= 2;
  if (out->empty() || attach == run || (attach && !pos->empty()) ||
      (!attach_s->empty() && !thread_s->empty()))
    return UsageError(
        "usage: record [session flags] [--output-format FORMAT] -o FILE "
        "(-- CMD ARGS... | -p PID | -t TID)");
  pid_t attach_pid = 0;
  if (!attach_s->empty()) {
    absl::StatusOr<int> p = ParseIntArg("-p", *attach_s, 1, 0x3fffffff);
    if (!p.ok()) return p.status();
    attach_pid = *p;
  }
  if (spec->tid > 0) return UsageError("record: one thread is -t TID (--tid is session create's)");
  if (!thread_s->empty()) {
    absl::StatusOr<ThreadTarget> t = ParseThreadArg(*thread_s);
    if (!t.ok()) return t.status();
    attach_pid = t->pid;
    spec->tid = t->tid;
  }
  // Another format than the trace's: the trace goes next to FILE (kept, for
  // `report` and another export), FILE gets the export.
  const bool exporting = *output_format != kTraceOutputFormat;
  if (exporting && !CheckExportFormat(*output_format).ok())
    return UsageError(absl::StrCat("record: unknown --output-format '", *output_format,
                                   "' (formats: ", kTraceOutputFormat, ", ",
                                   ExportFormatList(), ")"));
  const std::string trace_file = exporting ? *out + kTraceSuffix : *out;
  const std::vector<std::string> argv =
      run ? std::vector<std::string>(pos->begin() + 1, pos->end()) : std::vector<std::string>{};
  if (run)
    if (absl::Status s = CheckCommand(argv[0]); !s.ok()) return s;
  spec->detached = false;
  if (spec->pid >= 0 || spec->cpu >= 0)
    return UsageError("record traces the command it runs or -p PID: no --pid or --cpu");
  if (spec->bts == "off" && spec->counters.empty() && spec->pebs_event.empty() &&
      spec->breakpoints.empty())
    spec->bts = "lossless";
  if (no_inherit && spec->inherit)
    return UsageError("record: --inherit and --no-inherit contradict each other");
  // One thread (-t) has no children to follow.
  spec->inherit = !no_inherit && spec->bts != "off" && spec->tid == 0;
  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  absl::StatusOr<std::string> driver = DaemonDriver(*c);
  if (!driver.ok()) return driver.status();
  if (*driver != "host")
    return absl::FailedPreconditionError(
        "record runs a real command: it needs a pfmd with --driver host");
  CatchStopSignals();
  pid_t pid = attach ? attach_pid : -1;
  ErrorDetail d;
  int spawned = 0;
  if (run) spawned = SpawnCommand(ctx, argv, &pid, &d);
  if (spawned < 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message));
  // From here on, every way out reaps the child: held (Abandon makes it exit
  // without running anything) or released.
  LaunchedChild launched(pid);
  auto abandon = [&](absl::Status s) {
    if (run) launched.AbandonAndReap();
    return s;
  };
  spec->pid = pid;
  // Breakpoint names: resolved once the program has exec'd, or in the
  // attached process (breakpoint_names.h).
  if (absl::Status s = run ? launched.ResolveNames(&*spec) : ResolveBreakpointNames(pid, &*spec);
      !s.ok())
    return abandon(s);
  absl::StatusOr<SessionSpec> valid = ValidateSpec(*spec);
  if (!valid.ok()) return abandon(valid.status());
  absl::StatusOr<Client::Reply> cr =
      c->Call("session_create", {{"spec", valid->ToJson()}});
  if (!cr.ok()) return abandon(cr.status());
  ReplyReader created("session_create", cr->result);
  const uint64_t id = created.result().Member("id").Id();
  if (!created.ok()) return abandon(created.status());
  json::object info;
  std::optional<RingReader> ring;
  if (spec->bts != "off" || !spec->pebs_event.empty()) {
    absl::StatusOr<RingReader> r = MapRing(*c, id, false, &info);
    if (!r.ok()) return abandon(r.status());
    ring.emplace(std::move(*r));
  }
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  std::optional<ProcessMaps> start_maps;
  if (attach) {
    // The running process's name and its maps now (it may be killed).
    absl::StatusOr<SessionStart> start = ReadSessionStart(*c, id);
    if (!start.ok()) return start.status();
    command = start->comm;
    start_maps = start->maps;
  }
  json::object header{{"session", id}, {"kind", "record"}, {"command", command},
                      {"pid", pid}, {"spec", valid->ToJson()}, {"ring", info}};
  // An existing file at either name is kept as NAME.old, as perf record
  // keeps perf.data.old; after every check, so a refused command moves
  // nothing.
  bool moved = false;
  if (absl::Status s = KeepAsOld(trace_file, &moved); !s.ok()) return abandon(s);
  if (exporting) {
    if (absl::Status s = KeepAsOld(*out); !s.ok()) {
      // Both or neither: the trace file moved aside goes back.
      if (moved) (void)::rename((trace_file + ".old").c_str(), trace_file.c_str());
      return abandon(s);
    }
  }
  absl::StatusOr<TraceWriter> w = TraceWriter::Create(trace_file, header);
  if (!w.ok()) return abandon(w.status());
  if (start_maps)
    if (absl::Status s = w->AppendMaps(*start_maps); !s.ok()) return s;
  if (run)
    if (int err = launched.Start(&d); err < 0)
      return abandon(
          absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message)));

  int wstatus = 0;
  bool reaped = false;
  // Until the command exits, or (interrupted) until it has had
  // kInterruptedChildWait to: then it runs on, untraced.
  auto wait_child = [&] {
    if (!run) return;  // not our child: the ring's end says it exited
    std::optional<std::chrono::steady_clock::time_point> deadline;
    while (!reaped) {
      if (g_stop_stream) {
        // The grace starts at the interruption, however long CMD ran.
        if (!deadline) deadline = std::chrono::steady_clock::now() + kInterruptedChildWait;
        if (::waitpid(pid, &wstatus, WNOHANG) == pid) {
          reaped = true;
        } else if (std::chrono::steady_clock::now() >= *deadline) {
          break;
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } else if (::waitpid(pid, &wstatus, 0) == pid) {
        reaped = true;
      } else if (errno != EINTR) {
        break;
      }
    }
  };
  absl::StatusOr<StreamResult> streamed = StreamResult{};
  UniqueFd daemon;  // a pidfd of pfmd, while the ring is streamed
  if (ring && ring->mode() == PFM_RING_LOSSLESS) {
    std::optional<std::chrono::steady_clock::time_point> exited_at;
    StreamOptions options;
    options.stop = &g_stop_stream;
    options.daemon_conn = c->fd();  // a dead pfmd ends the wait
    // A SIGTERMed pfmd closes connections first and ends rings afterwards:
    // wait for its exit, then drain once more (as `stream`).
    daemon = DaemonPidfd(c->fd());
    options.daemon_pidfd = daemon.valid() ? daemon.get() : -1;
    if (run) options.give_up = [&] {
      if (!reaped && ::waitpid(pid, &wstatus, WNOHANG) == pid) {
        reaped = true;
        exited_at = std::chrono::steady_clock::now();
      }
      return exited_at.has_value() &&
             std::chrono::steady_clock::now() - *exited_at > kRecordEndWait;
    };
    ProgressLine progress(ctx.err, ProgressWanted());
    options.progress = ProgressCallback(progress, *c, id, *w);
    streamed = StreamToFile(*ring, *w, trace_file, options);
  }
  // The trace cannot go on (the file cannot be written): the session ends
  // now, so that a command held by a full --block ring is not held forever;
  // it runs on untraced.
  if (!streamed.ok()) (void)c->Call("session_kill", {{"id", id}});
  // Reaped in every case: CMD runs to its end whatever became of the trace
  // (interrupted: unless it outlives kInterruptedChildWait).
  wait_child();
  if (!streamed.ok()) return streamed.status();
  if (streamed->hung_up && ring && !ring->ended() && !g_stop_stream) {
    // As `stream`: no trailer, the file says it was cut short
    // (pfm/trace_file.h) and what was flushed stays readable.
    return absl::UnavailableError(absl::StrCat(
        "pfmd went away before session ", id, "'s ring ended; ", w->records(),
        " records written to ", trace_file, " without a trailer (trace cut short)"));
  }
  const int interrupted = g_stop_stream;
  if (ring && ring->mode() != PFM_RING_LOSSLESS) {
    // History: the newest records, up to the exit (or the crash).
    for (int i = 0; i < kHistoryEndPolls && !ring->ended(); ++i)
      std::this_thread::sleep_for(kHistoryEndPoll);
    std::vector<pfm_record> batch;
    if (absl::Status s = ring->Snapshot(&batch); !s.ok()) return s;
    if (absl::Status s = w->Append(batch.data(), batch.size()); !s.ok()) return s;
  }
  json::object trailer;
  if (attach) {
    // The process's own end, if it came, is the session summary's state
    // and exit_status.
  } else if (reaped) {
    if (WIFEXITED(wstatus)) trailer["exit"] = absl::StrCat("exit ", WEXITSTATUS(wstatus));
    if (WIFSIGNALED(wstatus))
      trailer["exit"] = absl::StrCat("killed by signal ", WTERMSIG(wstatus));
    trailer["wait_status"] = wstatus;
  } else {
    trailer["exit"] = absl::StrCat("still running, pid ", pid, " (no longer traced)");
  }
  if (interrupted) trailer["interrupted"] = strsignal(interrupted);
  // The maps and counters while the session is there, then the session
  // ends; an interrupted recording drains what the ring still holds.
  const absl::Status summary = AddSessionSummary(*c, id, *w, &trailer);
  if (attach) {
    const json::value* state = trailer.if_contains("state");
    const bool exited = state != nullptr && state->is_string() && state->get_string() == "exited";
    trailer["exit"] =
        exited ? std::string("exited") : absl::StrCat("still running, pid ", pid, " (no longer traced)");
  }
  (void)c->Call("session_kill", {{"id", id}});
  // What the ring still holds after the kill: an interrupted recording's,
  // and one that gave up waiting for processes the command left running
  // (their records up to the kill, and what the tracer handed over then).
  if (ring && ring->mode() == PFM_RING_LOSSLESS && !streamed->ended) {
    const auto until = std::chrono::steady_clock::now() + kInterruptedDrainWait;
    StreamOptions options;
    options.give_up = [&] { return std::chrono::steady_clock::now() > until; };
    (void)StreamToFile(*ring, *w, trace_file, options);
  }
  trailer["records"] = w->records();
  if (ring) trailer["lost"] = ring->lost();
  // A history ring's newest records replace its oldest (report says how
  // many, as for a snapshot).
  if (ring && ring->mode() == PFM_RING_HISTORY) trailer["overwritten"] = ring->overwritten();
  if (absl::Status s = w->Finish(trailer); !s.ok()) return s;
  if (!summary.ok()) return summary;
  WarnMissingMaps(trailer, *ctx.err);
  std::optional<ExportResult> exported;
  if (exporting) {
    std::vector<std::string> cmdline = {"pfmctl"};
    cmdline.insert(cmdline.end(), args.begin(), args.end());
    absl::StatusOr<ExportResult> e =
        ExportTrace({trace_file, *out, *output_format, std::move(cmdline)});
    if (!e.ok()) return e.status();
    PrintExportWarnings(ctx, *e);
    exported = std::move(*e);
  }
  if (ctx.json) {
    if (exported)
      trailer["export"] = json::object{{"format", *output_format},
                                       {"trace", trace_file},
                                       {"output", *out},
                                       {"detail", exported->detail}};
    PrintJson(ctx, trailer);
  } else {
    *ctx.err << "pfmctl: recorded " << w->records() << " records of '" << command
             << "' to " << trace_file << " (" << JsonText(trailer.if_contains("exit"))
             << (interrupted ? absl::StrCat("; interrupted by ", strsignal(interrupted)) : "")
             << ")";
    if (exported) *ctx.err << "; exported to " << *out << " (" << *output_format << ")";
    *ctx.err << "\n";
  }
  // Interrupted: pfmctl dies of the signal once all is written, as perf
  // record does (main.cc), whatever the command did. Else the command's
  // status when it ended; an attached recording is 0, ended by the
  // process's exit (as perf record -p).
  // (A signal during the summary or the export counts too.)
  if (g_stop_stream) SetExitSignal(g_stop_stream);
  if (attach) return 0;
  if (!reaped) return interrupted ? 128 + interrupted : 1;
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

namespace {
// A reader that went away (FlushOutput's CANCELLED) ends the command as
// SIGPIPE would, without a message.
absl::StatusOr<int> CancelledIsSigpipe(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) return 128 + SIGPIPE;
  return s;
}

// `report --timeline OUT.svg`'s file, opened before the trace is read, so
// that a path that cannot be written is refused at once, before anything
// reaches stdout (INVALID_ARGUMENT, as export's output). A new file is made
// unnamed in its directory (O_TMPFILE) and linked under its name once
// written: a report that fails, or a pfmctl killed by ^C or SIGKILL while
// reading the trace, leaves no empty SVG behind. Where the file system
// cannot (EOPNOTSUPP), it is created at once and removed again if never
// written (so then only a killed pfmctl leaves it). An existing file is
// truncated only when written. A FIFO is not waited on for a reader (ENXIO
// without one).
class TimelineFile {
 public:
  static absl::StatusOr<TimelineFile> Open(const std::string& path) {
    constexpr int kFlags = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    auto refused = [&path](int e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot write the timeline: ", strerror(e)));
    };
    Kind kind = Kind::kExisting;
    UniqueFd fd(::open(path.c_str(), kFlags));
    const int open_errno = fd.valid() ? 0 : errno;
    struct stat lst {};
    // Missing (and not a dangling symlink, which O_CREAT goes through).
    if (open_errno == ENOENT && ::lstat(path.c_str(), &lst) != 0) {
      const size_t slash = path.rfind('/');
      const std::string dir = slash == std::string::npos ? "."
                              : slash == 0              ? "/"
                                                        : path.substr(0, slash);
      fd = UniqueFd(::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644));
      kind = Kind::kUnnamed;
      if (fd.valid()) {
        // The mode a created file gets (kernels before 6.2 skipped the
        // umask for O_TMPFILE on file systems without ACLs; pfmctl runs
        // one thread here, so umask can be read by setting it back).
        const mode_t mask = ::umask(0);
        ::umask(mask);
        (void)::fchmod(fd.get(), 0644 & ~mask);
        // Named later through /proc: without it, the fallback below.
        if (::access(ProcFdPath(fd.get()).c_str(), F_OK) != 0) {
          fd.reset();
          errno = EOPNOTSUPP;
        }
      }
      if (!fd.valid() && (errno == EOPNOTSUPP || errno == EISDIR)) {
        fd = UniqueFd(::open(path.c_str(), kFlags | O_CREAT | O_EXCL, 0644));
        kind = Kind::kCreated;
      }
      if (!fd.valid()) return refused(errno);
    } else if (open_errno == ENOENT) {
      fd = UniqueFd(::open(path.c_str(), kFlags | O_CREAT, 0644));
      if (!fd.valid()) return refused(errno);
    } else if (!fd.valid()) {
      return refused(open_errno);
    }
    // Writes block as usual (a pipe's reader is slow, not absent).
    const int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl >= 0) (void)::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
    return TimelineFile(path, std::move(fd), kind);
  }
  TimelineFile(TimelineFile&& o) noexcept
      : path_(std::move(o.path_)), fd_(std::move(o.fd_)),
        kind_(std::exchange(o.kind_, Kind::kExisting)) {}
  TimelineFile& operator=(TimelineFile&&) = delete;
  ~TimelineFile() {
    if (kind_ == Kind::kCreated) ::unlink(path_.c_str());
  }

  // UNAVAILABLE naming the file when the bytes do not all go (a full
  // disk, /dev/full); a file this created is then removed. An unnamed file
  // whose name was taken meanwhile (another report to the same path):
  // the bytes go into that file instead, as into an existing one.
  absl::Status Write(const std::string& bytes) {
    int error = WriteAllTo(fd_.get(), bytes);
    bool linked = false;
    if (error == 0 && kind_ == Kind::kUnnamed) {
      // linkat through /proc: AT_EMPTY_PATH would need
      // CAP_DAC_READ_SEARCH.
      if (::linkat(AT_FDCWD, ProcFdPath(fd_.get()).c_str(), AT_FDCWD, path_.c_str(),
                   AT_SYMLINK_FOLLOW) == 0) {
        linked = true;
      } else if (errno == EEXIST) {
        UniqueFd now(::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
        error = now.valid() ? 0 : errno;
        if (error == 0) {
          const int fl = ::fcntl(now.get(), F_GETFL);
          if (fl >= 0) (void)::fcntl(now.get(), F_SETFL, fl & ~O_NONBLOCK);
          error = WriteAllTo(now.get(), bytes);
        }
        if (error == 0 && ::close(now.release()) != 0) error = errno;
      } else {
        error = errno;
      }
    }
    if (error == 0 && ::close(fd_.release()) != 0) error = errno;
    if (error != 0) {
      if (linked) ::unlink(path_.c_str());
      return absl::UnavailableError(
          absl::StrCat(path_, ": cannot write the timeline: ", strerror(error)));
    }
    kind_ = Kind::kExisting;  // written: kept
    return absl::OkStatus();
  }

 private:
  static std::string ProcFdPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }
  // Truncates a regular file, then writes all of `bytes`: 0 or the errno.
  static int WriteAllTo(int fd, const std::string& bytes) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0) return errno;
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 ? errno : EIO;
      done += static_cast<size_t>(n);
    }
    return 0;
  }
  enum class Kind {
    kExisting,  // there before (or written): never removed
    kUnnamed,   // O_TMPFILE: named when written, gone with the fd
    kCreated,   // created by Open: removed unless written
  };
  TimelineFile(std::string path, UniqueFd fd, Kind kind)
      : path_(std::move(path)), fd_(std::move(fd)), kind_(kind) {}
  std::string path_;
  UniqueFd fd_;
  Kind kind_;
};
}  // namespace

absl::StatusOr<int> ReportCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::string> limit_s = f.Take("--limit", "");
  if (!limit_s.ok()) return limit_s.status();
  absl::StatusOr<std::string> timeline = f.Take("--timeline", "");
  if (!timeline.ok()) return timeline.status();
  const bool every_record = f.TakeBool("--records");
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("report");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1)
    return UsageError("usage: report FILE [--limit N] [--records] [--timeline OUT.svg]");
  ReportOptions options;
  options.limit = kReportTextLimit;
  if (!limit_s->empty()) {
    absl::StatusOr<int> n = ParseIntArg("--limit", *limit_s, 0, 1 << 30);
    if (!n.ok()) return n.status();
    options.limit = static_cast<size_t>(*n);
  }
  if (!timeline->empty()) {
    // The picture of when each thread ran and each counter and breakpoint
    // was on hardware (docs/export.md), from two streaming passes over the
    // file (the branches are counted, never held). Its file is opened
    // first and written before the report streams anything to stdout: a
    // --timeline that cannot be written leaves stdout empty (one JSON
    // document, or nothing), and is found before any pass over the trace.
    absl::StatusOr<TimelineFile> svg = TimelineFile::Open(*timeline);
    if (!svg.ok()) return svg.status();
    absl::StatusOr<Timeline> tl = BuildTimelineFromFile(pos->front());
    if (!tl.ok()) return tl.status();
    if (absl::Status s = svg->Write(TimelineSvg(*tl)); !s.ok()) return s;
  }
  // --records: every record, streamed out as it is read (script's lines, or
  // the JSON document's "records" array), before the summary.
  std::optional<JsonRecordStream> stream;
  std::string buf;
  uint64_t written = 0;
  auto flush = [&] { return FlushOutput(*ctx.out, &buf, written); };
  if (every_record && ctx.json) {
    stream.emplace(*ctx.out, json::object{});
    options.each_record = [&](const ReportRecord& rr) { return stream->Add(rr); };
  } else if (every_record) {
    options.each_record = [&](const ReportRecord& rr) -> absl::Status {
      AppendScriptLine(rr, &buf);
      ++written;
      return buf.size() >= (64 << 10) ? flush() : absl::OkStatus();
    };
  }
  absl::StatusOr<TraceReport> report = BuildReport(pos->front(), options);
  if (!report.ok()) {
    // The reader of --records went away (`report --records | head`).
    if (report.status().code() == absl::StatusCode::kCancelled) return 128 + SIGPIPE;
    // Records already out (a read error mid-file): the JSON document is
    // closed with an "error" member (JsonRecordStream), the lines printed
    // so far stay, as script's.
    if (stream) stream->Fail(report.status());
    if (every_record && !ctx.json && written > 0) (void)flush();
    return report.status();
  }
  if (ctx.json) {
    json::object summary = RenderReportJson(*report);
    if (stream) {
      // The streamed array stands for "records"; the summary's members
      // follow it in the same object.
      summary.erase("records");
      if (absl::Status s = stream->Finish(summary); !s.ok()) return CancelledIsSigpipe(s);
    } else {
      PrintJson(ctx, summary);
    }
  } else {
    if (every_record) {
      buf += "\n";
      if (absl::Status s = flush(); !s.ok()) return CancelledIsSigpipe(s);
    }
    RenderReportText(*report, *ctx.out);
  }
  return 0;
}

absl::StatusOr<int> ExportCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::string> out = f.Take("-o");
  if (!out.ok()) return out.status();
  absl::StatusOr<std::string> format = f.Take("--format", kDefaultExportFormat);
  if (!format.ok()) return format.status();
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("export");
  if (!pos.ok()) return pos.status();
  if (pos->size() != 1 || out->empty())
    return UsageError(absl::StrCat("usage: export TRACE -o FILE [--format ",
                                   ExportFormatList("|"), "]"));
  std::vector<std::string> cmdline = {"pfmctl"};
  cmdline.insert(cmdline.end(), args.begin(), args.end());
  absl::StatusOr<ExportResult> r = ExportTrace({pos->front(), *out, *format, cmdline});
  if (!r.ok()) return r.status();
  PrintExportWarnings(ctx, *r);
  if (ctx.json) {
    PrintJson(ctx, json::object{{"format", *format},
                                {"trace", pos->front()},
                                {"output", *out},
                                {"records", r->records},
                                {"detail", r->detail}});
  } else {
    *ctx.out << r->records << " records of " << pos->front() << " exported to " << *out
             << " (" << *format << ")\n";
  }
  return 0;
}

}  // namespace pfm
