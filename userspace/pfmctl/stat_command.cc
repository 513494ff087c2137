#include "userspace/pfmctl/stat_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "pfm/client.h"
#include "pfm/session_spec.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/flags.h"
#include "userspace/pfmctl/reply.h"
#include "userspace/pfmctl/trace_commands.h"

namespace pfm {
namespace {

namespace json = boost::json;

// perf stat's default events (tools/perf/builtin-stat.c, default_attrs0/1):
// the software ones count everywhere; the hardware ones need a CPU PMU.
const std::vector<std::string> kSoftwareDefaults = {"task-clock", "context-switches",
                                                    "cpu-migrations", "page-faults"};
const std::vector<std::string> kHardwareDefaults = {"cycles", "instructions", "branches",
                                                    "branch-misses"};

volatile std::sig_atomic_t g_stat_stop = 0;
void StopStat(int sig) { g_stat_stop = sig; }

// A counter of the reply, read through its checked accessors (a wrong type
// is the reader's error, which the caller checks before anything is
// printed).
StatCounter ReadCounter(const ReplyNode& c) {
  StatCounter out;
  out.event = c.Member("event").String();
  const ReplyNode value = c.Member("value");
  const ReplyNode counted = c.Member("counted");
  const ReplyNode scaled = c.Member("scaled");
  const ReplyNode ratio = c.Member("ratio");
  const uint64_t raw = value.present() ? value.Uint() : 0;
  out.counted = value.present() && counted.present() && counted.Bool();
  out.value = scaled.present() ? scaled.Uint() : raw;
  out.ratio = ratio.present() ? ratio.Number() : 1.0;
  return out;
}

// The event's name, lowercased (pfmd takes names in any case), without
// its modifiers ("Cycles:u" -> "cycles"), and the modifiers (":u").
std::string BaseName(const std::string& event) {
  return absl::AsciiStrToLower(event.substr(0, event.find(':')));
}
std::string Modifiers(const std::string& event) {
  const size_t colon = event.find(':');
  return colon == std::string::npos ? "" : event.substr(colon);
}

}  // namespace

locale_t UserNumericLocale() {
  static const locale_t loc = newlocale(LC_NUMERIC_MASK, "", static_cast<locale_t>(nullptr));
  return loc;
}

std::string LocaleFormat(locale_t numeric, const char* fmt, ...) {
  static const locale_t c = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  const locale_t use = numeric != nullptr ? numeric : c;
  const locale_t old = use != nullptr ? uselocale(use) : nullptr;
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::string out;
  if (n >= static_cast<int>(sizeof(buf))) {
    out.resize(static_cast<size_t>(n) + 1);
    va_start(ap, fmt);
    std::vsnprintf(out.data(), out.size(), fmt, ap);
    va_end(ap);
    out.resize(static_cast<size_t>(n));
  } else if (n > 0) {
    out.assign(buf, static_cast<size_t>(n));
  }
  if (old != nullptr) uselocale(old);
  return out;
}

std::string StatCounterLines(const std::vector<StatCounter>& counters, double elapsed_s,
                             locale_t numeric) {
  // Facts from perf 6.1's stat-display.c: a count "%'*.0f" and a clock's
  // msec "%'*.2f" (digit grouping: big_num, on by default), metrics and
  // shares plain "%8.3f" and the like, all in the locale perf set.
  const auto f = [numeric](const char* fmt, auto... v) { return LocaleFormat(numeric, fmt, v...); };
  auto is_clock = [](const std::string& b) { return b == "task-clock" || b == "cpu-clock"; };
  // The totals perf's metrics divide by: the first clock counted, whatever
  // its modifiers; cycles, branches and cache references counted with the
  // same modifiers as the event (perf keeps them apart by what they
  // exclude: instructions:u over cycles:u, not over cycles).
  const StatCounter* clock = nullptr;
  for (const StatCounter& c : counters)
    if (clock == nullptr && c.counted && is_clock(BaseName(c.event))) clock = &c;
  auto total = [&](std::initializer_list<const char*> names, const std::string& mods) {
    for (const StatCounter& c : counters) {
      if (!c.counted || Modifiers(c.event) != mods) continue;
      for (const char* n : names)
        if (BaseName(c.event) == n) return &c;
    }
    return static_cast<const StatCounter*>(nullptr);
  };
  std::string out;
  for (const StatCounter& c : counters) {
    std::string line;
    if (!c.counted) {
      line = absl::StrFormat("%18s      %s", "<not counted>", c.event);
      out += line + "\n";
      continue;
    }
    const std::string b = BaseName(c.event), mods = Modifiers(c.event);
    const StatCounter* cycles = total({"cycles", "cpu-cycles"}, mods);
    const StatCounter* branches = total({"branches", "branch-instructions"}, mods);
    const StatCounter* refs = total({"cache-references"}, mods);
    line = is_clock(b) ? f("%'18.2f msec %-32s", c.value / 1e6, c.event.c_str())
                       : f("%'18llu      %-32s", static_cast<unsigned long long>(c.value),
                           c.event.c_str());
    // The metric: its number as perf formats it, and its unit.
    std::string number, unit;
    if (is_clock(b)) {
      if (elapsed_s > 0) {
        number = f("%8.3f", c.value / (elapsed_s * 1e9));
        unit = "CPUs utilized";
      }
    } else if (b == "cycles" || b == "cpu-cycles") {
      if (clock != nullptr && clock->value != 0) {
        number = f("%8.3f", static_cast<double>(c.value) / clock->value);
        unit = "GHz";
      }
    } else if (b == "instructions") {
      if (cycles != nullptr && cycles->value != 0) {
        number = f("%7.2f ", static_cast<double>(c.value) / cycles->value);
        unit = "insn per cycle";
      }
    } else if (b == "branch-misses") {
      if (branches != nullptr) {
        const double r = branches->value != 0 ? 100.0 * c.value / branches->value : 0.0;
        number = f("%7.2f%%", r);
        unit = "of all branches";
      }
    } else if (b == "cache-misses") {
      if (refs != nullptr) {
        const double r = refs->value != 0 ? 100.0 * c.value / refs->value : 0.0;
        number = f("%8.3f %%", r);
        unit = "of all cache refs";
      }
    } else if (clock != nullptr && clock->value != 0) {
      double rate = c.value / (clock->value / 1e9);
      std::string prefix;
      if (rate > 1e9) {
        rate /= 1e9;
        prefix = "G";
      } else if (rate > 1e6) {
        rate /= 1e6;
        prefix = "M";
      } else if (rate > 1e3) {
        rate /= 1e3;
        prefix = "K";
      }
      number = f("%8.3f", rate);
      unit = prefix + "/sec";
    }
    if (!number.empty()) {
      absl::StrAppend(&line, " # ", number, " ", absl::StrFormat("%-23s", unit));
    } else {
      line += std::string(35, ' ');
    }
    if (c.ratio < 0.9999) absl::StrAppend(&line, f("  (%.2f%%)", 100.0 * c.ratio));
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

absl::StatusOr<int> StatCommand(const CliContext& ctx, const CommandArgs& args) {
  CommandFlags f(args, 1);
  absl::StatusOr<std::vector<std::string>> events = f.TakeAll("-e");
  if (!events.ok()) return events.status();
  absl::StatusOr<std::string> pid_s = f.Take("-p");
  if (!pid_s.ok()) return pid_s.status();
  absl::StatusOr<std::string> tid_s = f.Take("-t");
  if (!tid_s.ok()) return tid_s.status();
  const bool no_inherit = f.TakeBool("--no-inherit");
  absl::StatusOr<std::vector<std::string>> pos = f.Positional("stat");
  if (!pos.ok()) return pos.status();
  const bool run = !pos->empty() && pos->front() == "--" && pos->size() >= 2;
  const int targets = (run ? 1 : 0) + (pid_s->empty() ? 0 : 1) + (tid_s->empty() ? 0 : 1);
  if (targets != 1 || (!run && !pos->empty()))
    return UsageError(
        "usage: stat [-e EVENT]... [--no-inherit] (-- CMD ARGS... | -p PID | -t TID)");
  int attach_pid = 0, attach_tid = 0;
  if (!pid_s->empty()) {
    absl::StatusOr<int> p = ParseIntArg("-p", *pid_s, 1, 0x3fffffff);
    if (!p.ok()) return p.status();
    attach_pid = *p;
  }
  if (!tid_s->empty()) {
    // perf stat -t: that thread's counts alone, until it exits or ^C.
    absl::StatusOr<ThreadTarget> t = ParseThreadArg(*tid_s);
    if (!t.ok()) return t.status();
    attach_pid = t->pid;
    attach_tid = t->tid;
  }
  const std::vector<std::string> argv = run ? std::vector<std::string>(pos->begin() + 1,
                                                                       pos->end())
                                            : std::vector<std::string>{};
  if (run)
    if (absl::Status s = CheckCommand(argv[0]); !s.ok()) return s;

  absl::StatusOr<Client> c = Connect(ctx);
  if (!c.ok()) return c.status();
  // The default set: hardware events only where there is a CPU PMU.
  std::vector<std::string> not_supported;
  if (events->empty()) {
    *events = kSoftwareDefaults;
    absl::StatusOr<Client::Reply> st = c->Call("status");
    if (!st.ok()) return st.status();
    ReplyReader reader("status", st->result);
    const uint64_t gp = reader.result().Member("machine").Member("gp_counters").Uint();
    if (!reader.ok()) return reader.status();
    for (const std::string& e : kHardwareDefaults)
      (gp > 0 ? *events : not_supported).push_back(e);
  }

  g_stat_stop = 0;  // a second run in the same process (tests)
  struct sigaction sa {};
  sa.sa_handler = StopStat;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  pid_t pid = attach_pid;
  ErrorDetail d;
  if (run && SpawnCommand(ctx, argv, &pid, &d) < 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message));
  auto abandon = [&](absl::Status s) {
    if (run) {
      Abandon(pid, nullptr);
      int ws;
      ::waitpid(pid, &ws, 0);
    }
    return s;
  };
  SessionSpec spec;
  spec.role = "profiler";
  spec.bts = "off";
  spec.pid = pid;
  spec.tid = attach_tid;
  // Every thread of the process and, as perf stat counts them, the
  // processes it starts, unless --no-inherit; -t counts its thread alone.
  spec.inherit = attach_tid == 0 && !no_inherit;
  spec.counters = *events;
  spec.detached = false;  // ends with this connection
  absl::StatusOr<SessionSpec> valid = SessionSpec::FromJson(spec.ToJson());
  if (!valid.ok()) return abandon(valid.status());
  absl::StatusOr<Client::Reply> cr = c->Call("session_create", {{"spec", valid->ToJson()}});
  if (!cr.ok()) return abandon(cr.status());
  ReplyReader created("session_create", cr->result);
  const uint64_t id = created.result().Member("id").Id();
  if (!created.ok()) return abandon(created.status());
  const auto t0 = std::chrono::steady_clock::now();
  if (run && Release(pid, &d) < 0)
    return abandon(absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", d.message)));

  int wstatus = 0;
  bool reaped = false;
  struct rusage usage {};  // CMD's, once reaped
  if (run) {
    // Until CMD exits; ^C reaches it too (same terminal), and stat reports
    // what was counted, as perf stat does. SIGTERM or SIGHUP, sent to
    // pfmctl alone, end the counting at once: the command runs on, as it
    // does when perf stat is killed, and the counts so far are printed.
    // The stop signals are blocked but during ppoll on the command's pidfd,
    // so one that came before the wait (during session_create) is seen,
    // not slept through until the command ends.
    auto stop_now = [] { return g_stat_stop == SIGTERM || g_stat_stop == SIGHUP; };
    sigset_t stops, saved, during;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, sig);
    ::sigprocmask(SIG_BLOCK, &stops, &saved);
    during = saved;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigdelset(&during, sig);
    const UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    // Without pidfds (before Linux 5.3): a blocking waitpid that the
    // signals interrupt, with a small window before it.
    if (!pidfd.valid()) ::sigprocmask(SIG_SETMASK, &during, nullptr);
    while (!reaped && !stop_now()) {
      const pid_t w = ::wait4(pid, &wstatus, pidfd.valid() ? WNOHANG : 0, &usage);
      if (w == pid) {
        reaped = true;
      } else if (w < 0 && errno != EINTR) {
        break;
      } else if (w == 0) {
        pollfd pf{pidfd.get(), POLLIN, 0};
        (void)::ppoll(&pf, 1, nullptr, &during);  // its exit, or a signal
      }
    }
    ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  } else {
    // Until PID exits (the session says so) or ^C.
    while (!g_stat_stop) {
      absl::StatusOr<Client::Reply> show = c->Call("session_show", {{"id", id}});
      if (!show.ok()) break;
      ReplyReader r("session_show", show->result);
      const ReplyNode state = r.result().Member("state");
      const bool exited = state.present() && state.String() == "exited";
      if (!r.ok()) {
        (void)c->Call("session_kill", {{"id", id}});
        return r.status();
      }
      if (exited) break;
      struct stat st;
      if (attach_tid > 0 &&
          ::stat(absl::StrCat("/proc/", attach_pid, "/task/", attach_tid).c_str(), &st) != 0)
        break;  // the thread is gone
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  absl::StatusOr<Client::Reply> show = c->Call("session_show", {{"id", id}});
  (void)c->Call("session_kill", {{"id", id}});
  if (!show.ok()) return show.status();
  ReplyReader reader("session_show", show->result);
  const std::vector<ReplyNode> counters = reader.result().Member("counters").Elements();
  // The lines are made (and every counter's fields checked) before anything
  // is printed, in either form.
  std::vector<StatCounter> read;
  for (const ReplyNode& cn : counters) read.push_back(ReadCounter(cn));
  if (!reader.ok()) return reader.status();
  const locale_t numeric = ctx.json ? nullptr : UserNumericLocale();
  const std::string lines = StatCounterLines(read, elapsed, numeric);

  if (ctx.json) {
    json::object o{{"counters", *reader.result().Member("counters").json()},
                   {"elapsed_s", elapsed}};
    json::array ns;
    for (const std::string& e : not_supported) ns.push_back(json::value(e));
    o["not_supported"] = std::move(ns);
    if (run && reaped) {
      o["wait_status"] = wstatus;
      o["user_s"] = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6;
      o["sys_s"] = usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
    }
    if (g_stat_stop) o["interrupted"] = strsignal(g_stat_stop);
    PrintJson(ctx, o);
  } else {
    std::string target;
    if (run) {
      for (const std::string& a : argv) absl::StrAppend(&target, target.empty() ? "" : " ", a);
      target = absl::StrCat("'", target, "'");
    } else {
      target = attach_tid > 0 ? absl::StrCat("thread id '", attach_tid, "'")
                              : absl::StrCat("process id '", attach_pid, "'");
    }
    std::ostream& out = *ctx.err;  // as perf stat: the program's stdout stays its own
    out << "\n Performance counter stats for " << target << ":\n\n";
    out << lines;
    for (const std::string& e : not_supported)
      out << absl::StrFormat("%18s      %s\n", "<not supported>", e);
    out << LocaleFormat(numeric, "\n%18.9f seconds time elapsed\n\n", elapsed);
    // The command's own CPU time (and its waited-for children's), as perf
    // stat prints it for a command it ran.
    if (run && reaped)
      out << LocaleFormat(numeric, "%18.9f seconds user\n%18.9f seconds sys\n\n",
                          usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
                          usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6);
  }
  // A signal ended the counting: pfmctl dies of it once the counts are out
  // (main.cc), as perf stat does.
  if (g_stat_stop) SetExitSignal(g_stat_stop);
  if (!run) return 0;
  if (!reaped) return g_stat_stop ? 128 + g_stat_stop : 1;
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

}  // namespace pfm
