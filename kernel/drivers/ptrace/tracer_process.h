// The soft-BTS tracer in a process of its own: what lets a traced program
// outlive pfmd, and what lets the kernel decide what a client may trace
// (docs/security.md).
//
// Why a process and not a thread of pfmd: a single-step in flight, or a
// tracee stopped after one, has the trap flag set by the tracer (x86
// TIF_FORCED_TF; PTRACE_SETREGS cannot clear it, only a resume or a detach
// can). When the tracer process dies, the kernel unlinks its tracees
// without clearing that flag, so the next instruction raises a SIGTRAP
// nobody catches and the tracee dies. If pfmd itself is the tracer, a
// SIGKILL, a crash or the OOM killer of pfmd kills every traced program.
// Here the tracer is a small helper process; it follows pfmd by its socket:
// when pfmd goes away for any reason, the helper drains, detaches cleanly
// (PTRACE_DETACH clears the flag) and exits, and the tracee runs on.
//
// Credentials: the helper takes the client's uid, gid and groups (and so
// no capabilities) before it attaches, unless the client is privileged. The
// kernel then applies its own ptrace rules to the attach (same ids,
// dumpable, Yama, LSMs), and a setuid/setgid exec by the tracee does not
// raise its privileges, exactly as for any unprivileged tracer.
//
// The helper is the same binary re-executed (/proc/self/exe) with
// kTracerHelperFlag: every program that starts tracers (pfmd; pfmctl, which
// embeds a pfmd) calls MaybeRunTracerHelper first thing in main().
//
// Trust: pfmd trusts nothing the helper sends. The helper runs as the
// client, who may signal it; it can only misreport the branches of a task
// the client may trace anyway. Messages are bounded and validated; time
// comes from pfmd, never from the message. Task identity does come from the
// helper, within bounds pfmd checks: the first task is the pid pfmd asked
// for; every other one must be announced (kTaskCreated) by a live parent,
// as a thread of the parent's process or, only when inheriting, a process
// of its own (pid == tid), and must have the helper as its tracer
// (/proc/TID/status TracerPid) when pfmd looks; a message naming any other
// task ends the conversation. So records only ever land in the context of
// the pid the session asked for.
//
// Reports reach the kernel core through its CoreHooks like any driver's: the
// reader thread takes the kernel lock per report, writes the branches it
// received into the task's own DS area (CoreHooks::TaskArea) and raises
// TaskDsInterrupt, exactly as the tracer would in-process. Everything else
// may be called from any thread; Stop() not with the kernel lock held.
#ifndef PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROCESS_H_
#define PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernel/drivers/credentials.h"
#include "kernel/drivers/driver.h"
#include "kernel/kernel_lock.h"
#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/unique_fd.h"

namespace pfm {

inline constexpr char kTracerHelperFlag[] = "--pfm-tracer-helper";

// If argv is a helper invocation (argv[1] == kTracerHelperFlag), runs the
// helper and returns its exit code (>= 0); otherwise returns -1 at once.
int MaybeRunTracerHelper(int argc, char** argv);

struct TracerProcessOptions {
  // Follow the processes the traced ones create (SoftBtsOptions::inherit).
  bool inherit = false;
  // Branch stepping (SoftBtsOptions::branch_step).
  bool branch_step = false;
  // The tracer and its tasks on one CPU (SoftBtsOptions::bind_cpu), that
  // one if set (SoftBtsOptions::cpu; HostTracers picks it).
  bool bind_cpu = true;
  int cpu = -1;
  // Address filters (SoftBtsOptions::filter_ranges, filter_files,
  // start_at), with branch_step.
  std::vector<SoftBtsOptions::AddrRange> filter_ranges;
  std::vector<std::string> filter_files;
  uint64_t start_at = 0;
  // The same filter (sessions of one pid share its tracer).
  bool SameFilter(const TracerProcessOptions& o) const {
    if (filter_ranges.size() != o.filter_ranges.size()) return false;
    for (size_t i = 0; i < filter_ranges.size(); ++i)
      if (filter_ranges[i].lo != o.filter_ranges[i].lo ||
          filter_ranges[i].hi != o.filter_ranges[i].hi)
        return false;
    return filter_files == o.filter_files && start_at == o.start_at;
  }
};

class TracerProcess {
 public:
  // Where a tracer's reports go, in pfmd.
  struct Host {
    CoreHooks* core = nullptr;   // the kernel core
    KernelLock* lock = nullptr;  // taken around every report
    int cpus = 1;                // a CPU number outside [0, cpus) reports as 0
    // Called with the lock held, after the core was told (may be empty).
    // `exited`: the last traced task is gone, with the wait status of the
    // process traced first (its main thread's). `signaled`: a fatal-looking
    // signal is about to be delivered to one of the traced tasks.
    std::function<void(int64_t wait_status)> exited;
    std::function<void(int signo)> signaled;
  };
  using Options = TracerProcessOptions;
  // Starts a helper that takes `creds` (nullopt: keeps the caller's) and
  // attaches a SoftBtsTracer with default options to `pid`; returns once it
  // is attached (0) or failed (the helper's errno, e.g. -EPERM with the
  // kernel's reason in *d). `exe` is the binary to run as the helper
  // (default: this program). `host.core` must outlive the TracerProcess.
  static int Start(pid_t pid, const std::optional<Credentials>& creds,
                   Host host, std::unique_ptr<TracerProcess>* out,
                   ErrorDetail* d, const std::string& exe = "/proc/self/exe",
                   Options options = Options());

  ~TracerProcess();
  TracerProcess(const TracerProcess&) = delete;
  TracerProcess& operator=(const TracerProcess&) = delete;

  // Asks the helper to drain and detach (the tracee runs on), waits for it
  // to exit and reaps it. Safe twice and after the tracee exited. A helper
  // that does not answer within kStopTimeout is killed.
  void Stop();
  // The tracee exited, the helper is gone, or Stop() ran.
  bool done() const { return done_.load(std::memory_order_acquire); }
  pid_t helper_pid() const { return helper_; }
  // The process it was started on.
  pid_t pid() const { return pid_; }

  // As last reported by the helper (at every drain and a few times a second).
  SoftBtsTracer::Stats stats() const;
  bool inherit() const { return options_.inherit; }
  const Options& options() const { return options_; }
  // The tracee's executable mappings as last reported by the helper (at
  // attach and whenever they changed, before the records taken with them),
  // stamped with the time pfmd received them; time_ns 0 and no mappings
  // before the first report.
  ProcessMaps maps() const;
  // Every mapping list the helper reported, of every traced process, in the
  // order received (each stamped with pfmd's time): what names the records
  // of children and of programs before an exec. Bounded: at most
  // kMaxMapsHistory lists and kMaxMapsHistoryBytes (the oldest of other
  // processes go first). A list over one helper message comes in parts
  // and is kept once whole (up to kMaxMapsListBytes). Each
  // list has a number, 1 for the first received and one more for each
  // after, never reused: a reader that pages through the history (pfmd's
  // session_maps, whose replies are bounded) resumes at the number after
  // the last list it got, whatever was dropped meanwhile.
  // Shared, never changed once received: a page copies pointers, not
  // megabytes of mappings, under the lock the reader thread needs.
  struct NumberedMaps {
    uint64_t seq = 0;
    std::shared_ptr<const ProcessMaps> maps;  // never null
    size_t bytes = 0;  // its encoding's size, what the bound counts
  };
  // The kept lists numbered `seq` or more, oldest first, at most
  // `max_lists` of them; *newest is the number of the newest list received
  // (0 before the first).
  std::vector<NumberedMaps> maps_since(uint64_t seq, size_t max_lists,
                                       uint64_t* newest) const;
  // maps() with its number (0 before the first report): the tracee's own
  // newest list, kept whatever else is dropped.
  NumberedMaps numbered_maps() const;
  static constexpr size_t kMaxMapsHistory = 256;
  // And at most this many bytes of lists (their encoded size), but for the
  // root's newest list.
  static constexpr size_t kMaxMapsHistoryBytes = 32 << 20;

  // Asks the helper to drain its DS area now; DrainServed(ticket) turns true
  // once it did (or the helper is gone). WaitDrain blocks until then or
  // `timeout`, on a condition the reader signals.
  uint64_t RequestDrain();
  bool DrainServed(uint64_t ticket) const;
  bool WaitDrain(uint64_t ticket, std::chrono::milliseconds timeout);

  static constexpr std::chrono::milliseconds kStopTimeout{5000};

  // A debug channel to the helper (debug_channel.h): a socket pair whose
  // other end goes to the helper, which serves it (one at a time: a second
  // one is closed by the helper at once). Never blocks on the helper.
  int OpenDebugChannel(UniqueFd* client, ErrorDetail* d);
  // Ends the channel being served (its closing ends debug control).
  void CloseDebugChannel();
  // A channel OpenDebugChannel passed has not ended yet: the helper has not
  // said it ended (kDebugEnded, once its client closed it or after
  // CloseDebugChannel) and is not gone. How pfmd learns that a debugger
  // whose connection it does not see (a detached session's) died.
  bool debug_channel_open() const {
    return !done() && debug_ended_.load() < debug_opened_.load();
  }

 private:
  TracerProcess(pid_t pid, pid_t helper, int fd, Host host, Options options);
  void ReadLoop();
  bool Send(uint32_t type, const void* payload, uint32_t len, bool wait);
  void MarkDone();
  // Appends a received list to the history, dropping old ones first to
  // stay within kMaxMapsHistory and kMaxMapsHistoryBytes.
  void KeepMapsLocked(std::shared_ptr<const ProcessMaps> list, size_t bytes);

  const pid_t pid_;     // the tracee
  const pid_t helper_;  // the helper process (our child)
  // Our end of the socket pair; -1 once Stop() closed it (written there
  // only, after the reader is joined, under send_mu_).
  int fd_;
  const Host host_;
  const Options options_;
  std::thread reader_;
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> next_ticket_{1};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  uint64_t served_ = 0;  // every ticket < served_ was served
  bool stopped_ = false;
  bool reaped_ = false;
  SoftBtsTracer::Stats stats_;
  std::vector<NumberedMaps> maps_;  // the history, oldest first
  uint64_t maps_received_ = 0;      // the newest list's number
  size_t maps_bytes_ = 0;           // the kept lists' bytes
  std::atomic<uint64_t> debug_opened_{0}, debug_ended_{0};  // channels
  std::mutex send_mu_;
  std::mutex stop_mu_;  // serializes Stop()
};

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_TRACER_PROCESS_H_
