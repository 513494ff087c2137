#include "userspace/pfmctl/breakpoint_names.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include <elf.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "pfm/symbolizer.h"
#include "pfm/unique_fd.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/reply.h"

namespace pfm {
namespace {

std::string Exe(pid_t pid) {
  char buf[PATH_MAX];
  const ssize_t n =
      ::readlink(absl::StrCat("/proc/", pid, "/exe").c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// AT_ENTRY of /proc/PID/auxv: where the kernel says the program starts
// (after its dynamic linker); 0 if unknown.
uint64_t EntryPoint(pid_t pid) {
  UniqueFd fd(::open(absl::StrCat("/proc/", pid, "/auxv").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return 0;
  uint64_t pair[2];
  for (;;) {
    const ssize_t n = ::read(fd.get(), pair, sizeof(pair));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(pair)) || pair[0] == AT_NULL) return 0;
    if (pair[0] == AT_ENTRY) return pair[1];
  }
}

// waitpid for `pid`, retrying EINTR (a ^C is seen by record's own loop
// later; this wait is short).
pid_t WaitFor(pid_t pid, int* st, int flags) {
  for (;;) {
    const pid_t r = ::waitpid(pid, st, flags);
    if (r >= 0 || errno != EINTR) return r;
  }
}

std::string ExitText(int st) {
  if (WIFEXITED(st)) return absl::StrCat("exit ", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return absl::StrCat("killed by signal ", WTERMSIG(st));
  return "gone";
}

}  // namespace

absl::Status ResolveNamesIn(const std::vector<Mapping>& maps, const std::string& exe,
                            SessionSpec* spec, std::vector<std::string>* missing) {
  SessionSpec out = *spec;
  for (BreakpointSpec& b : out.breakpoints) {
    if (b.resolved()) continue;
    absl::StatusOr<ResolvedLocation> r = ResolveLocation(
        b.name, maps, exe, b.access == "x" ? LocationUse::kCode : LocationUse::kData);
    if (!r.ok()) {
      if (missing != nullptr && r.status().code() == absl::StatusCode::kNotFound) {
        missing->emplace_back(r.status().message());
        continue;
      }
      return r.status();
    }
    if (r->addr == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("breakpoint '", b.name, "' resolves to address 0"));
    b.addr = r->addr;
  }
  // Address filters by function name: the function's bytes.
  for (std::string& text : out.address_filters) {
    absl::StatusOr<AddressFilter> a = ParseAddressFilter(text);
    if (!a.ok()) return a.status();
    if (a->resolved()) continue;
    absl::StatusOr<ResolvedLocation> r = ResolveLocation(a->name, maps, exe, LocationUse::kCode);
    if (!r.ok()) {
      if (missing != nullptr && r.status().code() == absl::StatusCode::kNotFound) {
        missing->emplace_back(r.status().message());
        continue;
      }
      return r.status();
    }
    if (r->size == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "address filter '", a->name, "': ", r->description,
          " has no size (a line or a symbol without one): give 'range LO-HI'"));
    text = absl::StrFormat("0x%x-0x%x (%s)", r->addr, r->addr + r->size, a->name);
  }
  if (!out.start.empty()) {
    absl::StatusOr<uint64_t> s = ParseStart(out.start);
    if (!s.ok()) return s.status();
    if (*s == 0) {
      absl::StatusOr<ResolvedLocation> r = ResolveLocation(out.start, maps, exe, LocationUse::kCode);
      if (!r.ok()) {
        if (missing == nullptr || r.status().code() != absl::StatusCode::kNotFound)
          return r.status();
        missing->emplace_back(r.status().message());
      } else {
        out.start = absl::StrFormat("0x%x (%s)", r->addr, out.start);
      }
    }
  }
  *spec = std::move(out);
  return absl::OkStatus();
}

absl::Status ResolveBreakpointNames(pid_t pid, SessionSpec* spec) {
  if (!spec->HasUnresolvedNames()) return absl::OkStatus();
  absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(pid);
  if (!maps.ok()) return maps.status();
  return ResolveNamesIn(*maps, Exe(pid), spec);
}

absl::Status CheckDaemonCanResolveNames(Client& c) {
  absl::StatusOr<std::string> driver = DaemonDriver(c);
  if (!driver.ok()) return driver.status();
  if (*driver != "host")
    return absl::FailedPreconditionError(absl::StrCat(
        "breakpoint names are looked up in a real process's files: the ", *driver,
        " driver's tasks have none; give addresses (ADDR:LEN:ACCESS)"));
  return absl::OkStatus();
}

void LaunchedChild::Kill() {
  if (state_ == State::kExecStopped) ::kill(pid_, SIGKILL);
}

absl::Status LaunchedChild::ResolveNames(SessionSpec* spec) {
  bool ranges = !spec->start.empty();
  for (const std::string& f : spec->address_filters) {
    absl::StatusOr<AddressFilter> a = ParseAddressFilter(f);
    ranges = ranges || (a.ok() && a->file.empty());
  }
  if ((!spec->HasUnresolvedNames() && !ranges) || state_ != State::kHeld)
    return absl::OkStatus();
  // EXITKILL: if pfmctl dies now, the child does not run on untraced.
  ErrorDetail d;
  int status = 0;
  const int rc = ReleaseToExecStop(pid_, &status, &d);
  if (rc == -ECHILD) {
    state_ = State::kReaped;
    return absl::InternalError(
        absl::StrCat("the command ended before its program started (", ExitText(status), ")"));
  }
  if (rc != 0) {  // ended (abandoned or killed): still to reap
    state_ = State::kExecStopped;
    return absl::InternalError(
        absl::StrCat("cannot start the command under ptrace to resolve names: ", d.message));
  }
  state_ = State::kExecStopped;
  auto fail = [&](absl::Status s) {
    Kill();
    return s;
  };
  const std::string exe = Exe(pid_);
  absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(pid_);
  if (!maps.ok()) return fail(maps.status());
  // The program alone first. Its dynamic linker, mapped beside it, comes
  // last in the search, after the libraries it has not mapped yet: its own
  // internal copies of libc functions (strlen, memcpy, in its debug info)
  // are not what a user names.
  std::vector<Mapping> program;
  for (const Mapping& m : *maps)
    if (m.path == exe) program.push_back(m);
  const bool dynamic = program.size() != maps->size();
  std::vector<std::string> missing;
  if (absl::Status s = ResolveNamesIn(program, exe, spec, &missing); !s.ok()) return fail(s);
  if (!missing.empty()) {
    if (!dynamic) return fail(absl::NotFoundError(missing.front()));
    if (absl::Status s = RunToEntry(exe); !s.ok()) return fail(s);
    maps = ReadProcMaps(pid_);
    if (!maps.ok()) return fail(maps.status());
    if (absl::Status s = ResolveNamesIn(*maps, exe, spec); !s.ok())
      return fail(s.code() == absl::StatusCode::kNotFound
                      ? absl::NotFoundError(absl::StrCat(
                            s.message(), "; libraries the program opens later (dlopen) "
                                         "are not searched: attach with -p PID once it runs"))
                      : s);
  }
  // Hand it over stopped, for pfmd to attach before its next instruction.
  if (int hr = DetachStopped(pid_, &status, &d); hr != 0) {
    if (hr == -ECHILD) {
      state_ = State::kReaped;
      return absl::InternalError(
          absl::StrCat("the command ended while starting (", ExitText(status), ")"));
    }
    return absl::InternalError(absl::StrCat("cannot hand the command over: ", d.message));
  }
  return absl::OkStatus();
}

absl::Status LaunchedChild::RunToEntry(const std::string& exe) {
#if defined(__x86_64__)
  const uint64_t entry = EntryPoint(pid_);
  if (entry == 0) return absl::InternalError(absl::StrCat(exe, ": no AT_ENTRY in its auxv"));
  errno = 0;
  const long word = ::ptrace(PTRACE_PEEKTEXT, pid_, reinterpret_cast<void*>(entry), nullptr);
  if (errno != 0)
    return absl::InternalError(absl::StrFormat("%s: cannot read its entry point 0x%x: %s", exe,
                                               entry, std::strerror(errno)));
  const long trap = static_cast<long>((static_cast<unsigned long>(word) & ~0xfful) | 0xcc);
  if (::ptrace(PTRACE_POKETEXT, pid_, reinterpret_cast<void*>(entry),
               reinterpret_cast<void*>(trap)) != 0)
    return absl::InternalError(absl::StrFormat("%s: cannot write its entry point 0x%x: %s",
                                               exe, entry, std::strerror(errno)));
  int sig = 0;
  for (;;) {
    if (::ptrace(PTRACE_CONT, pid_, nullptr, reinterpret_cast<void*>(long{sig})) != 0)
      return absl::InternalError(absl::StrCat("PTRACE_CONT: ", std::strerror(errno)));
    sig = 0;
    int st = 0;
    if (WaitFor(pid_, &st, __WALL) != pid_)
      return absl::InternalError(absl::StrCat("waiting for the entry point: ",
                                              std::strerror(errno)));
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      state_ = State::kReaped;
      return absl::InternalError(absl::StrCat(
          "the command ended before reaching its entry point (", ExitText(st), ")"));
    }
    if (!WIFSTOPPED(st) || (st >> 16) != 0) continue;
    if (WSTOPSIG(st) != SIGTRAP) {
      sig = WSTOPSIG(st);  // the program's own signal: pass it on
      continue;
    }
    user_regs_struct regs;
    if (::ptrace(PTRACE_GETREGS, pid_, nullptr, &regs) != 0)
      return absl::InternalError(absl::StrCat("PTRACE_GETREGS: ", std::strerror(errno)));
    if (regs.rip != entry + 1) {
      sig = SIGTRAP;  // not ours
      continue;
    }
    // Put the byte back and run the instruction the int3 stood for.
    regs.rip = entry;
    if (::ptrace(PTRACE_POKETEXT, pid_, reinterpret_cast<void*>(entry),
                 reinterpret_cast<void*>(word)) != 0 ||
        ::ptrace(PTRACE_SETREGS, pid_, nullptr, &regs) != 0)
      return absl::InternalError(absl::StrCat("restoring the entry point: ",
                                              std::strerror(errno)));
    return absl::OkStatus();
  }
#else
  return absl::UnimplementedError(
      absl::StrCat(exe, ": running to the entry point to find library names is x86-64 only"));
#endif
}

int LaunchedChild::Start(ErrorDetail* d) {
  switch (state_) {
    case State::kHeld: {
      const int rc = Release(pid_, d);
      if (rc == 0) state_ = State::kStarted;
      return rc;
    }
    case State::kExecStopped:
      if (::kill(pid_, SIGCONT) != 0) {
        const int e = errno;
        return SetError(d, -e, "SIGCONT: %s", std::strerror(e));
      }
      state_ = State::kStarted;
      return 0;
    case State::kStarted:
    case State::kReaped:
      return SetError(d, -ESRCH, "the command has already ended");
  }
  return -EINVAL;
}

void LaunchedChild::AbandonAndReap() {
  if (state_ == State::kReaped || state_ == State::kStarted) return;
  if (state_ == State::kHeld) {
    Abandon(pid_, nullptr);
  } else {
    ::kill(pid_, SIGKILL);
  }
  int st;
  WaitFor(pid_, &st, 0);
  state_ = State::kReaped;
}

}  // namespace pfm
