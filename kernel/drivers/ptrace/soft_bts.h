// Soft BTS: branch tracing of a real process by ptrace single-stepping, for
// machines without BTS (VMs, AMD). Every step the tracer learns the tracee's
// RIP, classifies the instruction it just executed (branch_decoder) and, for
// a taken branch, writes a raw BTS record {from, to, flags = 0} into the
// task's DS area (CoreHooks::TaskArea) exactly as the CPU would, and raises
// CoreHooks::TaskDsInterrupt at its threshold. It reports everything else
// (switches, exit, fatal signals, whether to hold the task) through the same
// CoreHooks: a driver like any other.
//
// Computed RIPs: after a plain single-step stop over an instruction the
// decoder calls `sequential` (no control transfer, no REP string, nothing
// the kernel may emulate; see DecodedInsn), the next RIP is rip + length and
// the tracer does not read the registers (PTRACE_GETREGS) for that step. It
// reads them after every branch, trap, undecodable or unsure instruction,
// after any stop other than a SIGTRAP step stop, before a syscall
// instruction (for the mmap check below), when the computed RIP would leave
// the executable mapping of the previous one or lies in a writable, shared
// or [vsyscall] mapping, and after `max_computed_run` computed RIPs in a
// row. See docs/host_drivers.md for the remaining risks.
//
// Threading: Start() creates one tracer thread; every ptrace and wait call
// happens on it (ptrace ties a tracee to the tracer *thread*). CoreHooks
// calls come from that thread, one at a time. stats(), maps(), done() and Stop()
// may be called from any thread.
//
// Scope: the thread `pid` names (the main thread of a process) is traced;
// threads it creates later run untraced (no PTRACE_O_TRACECLONE) — one
// tracer thread steps one task, which keeps attribution and DS draining
// per-task exact.
//
// Reaping: when the tracer runs in the tracee's parent process (e.g. after
// SpawnStopped), the tracer thread's wait reaps the tracee, so the caller's
// own waitpid() gets ECHILD; the wait status arrives through
// CoreHooks::TaskExit().
//
// Wake signal: Stop() interrupts a tracer blocked in waitpid() (the tracee
// sits in a blocking syscall) with kSoftBtsWakeSignal sent to the tracer
// thread; Start() installs a no-op handler for it (without SA_RESTART). A
// process using soft BTS must leave that signal alone.
#ifndef PFM_KERNEL_DRIVERS_PTRACE_SOFT_BTS_H_
#define PFM_KERNEL_DRIVERS_PTRACE_SOFT_BTS_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernel/drivers/driver.h"
#include "kernel/ds/ds_area.h"
#include "kernel/uapi/pfm_error.h"
#include "kernel/uapi/proc_maps.h"

namespace pfm {

struct SoftBtsOptions {
  // Size of the task DS area a tracer's own core gives it (the tracer
  // process's, see tracer_process.h); threshold = full.
  uint32_t ds_records = 8192;
  bool try_singleblock = true;           // probe PTRACE_SINGLEBLOCK once
  uint32_t decode_cache_entries = 1u << 16;  // rounded up to a power of two
  uint32_t cpu_poll_steps = 4096;        // read /proc/PID/stat every N steps
  // Compute the RIP after a sequential instruction instead of reading the
  // registers (see the top of this file). Off: a PTRACE_GETREGS every step.
  bool compute_rip = true;
  // Read the registers after at most this many computed RIPs in a row, and
  // check the chain (a mismatch counts in Stats::resyncs). 0 = no limit.
  uint32_t max_computed_run = 64;
  // Tests only: also read the registers after every computed RIP, compare,
  // count mismatches in Stats::mispredictions and continue from the RIP
  // read. Costs what compute_rip saves.
  bool verify_computed_rip = false;
};

// The signal Stop() uses to interrupt the tracer thread's waitpid().
int SoftBtsWakeSignal();

class SoftBtsTracer {
 public:
  // Starts a tracer thread that attaches to `pid` (PTRACE_SEIZE with
  // PTRACE_O_TRACEEXEC, then PTRACE_INTERRUPT) and returns once attached (0)
  // or failed: -EINVAL (bad arguments), -EPERM (not allowed to trace), -ESRCH
  // (no such process, or it exited while attaching), other ptrace errnos.
  // On success the tracer has reported Switch(idle -> task) and captured the
  // executable maps. `core` must outlive the tracer.
  static int Start(pid_t pid, const SoftBtsOptions& opt, CoreHooks* core,
                   std::unique_ptr<SoftBtsTracer>* out, ErrorDetail* d);

  ~SoftBtsTracer();
  SoftBtsTracer(const SoftBtsTracer&) = delete;
  SoftBtsTracer& operator=(const SoftBtsTracer&) = delete;

  // Drains, detaches (the tracee continues untraced, with any signal that
  // was about to be delivered) and joins the tracer thread. Safe twice, and
  // after the tracee exited. Not to be called from a CoreHooks call.
  void Stop();
  // The tracee exited or the tracer stopped.
  bool done() const { return done_.load(std::memory_order_acquire); }

  struct Stats {
    uint64_t steps = 0;     // step stops processed
    uint64_t branches = 0;  // taken branches recorded
    bool singleblock_honoured = false;
    // Step stops at which the tracer read the registers (PTRACE_GETREGS),
    // not counting verify_computed_rip's reads; and steps whose RIP was
    // computed. A step can count in both (a computed RIP followed by a
    // syscall instruction is read back for its arguments).
    uint64_t reg_reads = 0;
    uint64_t computed = 0;
    // verify_computed_rip: computed RIPs that differed from the registers.
    uint64_t mispredictions = 0;
    // Register reads that contradicted a computed chain (the RIP is not one
    // the previous instruction can lead to); the record that would have
    // come from that chain is dropped. 0 unless something the decoder
    // cannot see moved RIP (docs/host_drivers.md, risks).
    uint64_t resyncs = 0;
  };
  Stats stats() const;

  // Asks the tracer thread to hand its task's DS area to the core now (a
  // snapshot on demand), waking it if it waits for a tracee blocked in a
  // syscall. Returns a ticket; DrainServed(ticket) turns true once a drain
  // after the request happened. Thread-safe; never call it holding a lock
  // the core's hooks take, and don't wait for the answer with it held.
  uint64_t RequestDrain();
  bool DrainServed(uint64_t ticket) const {
    return drains_served_.load(std::memory_order_acquire) > ticket;
  }

  // Executable mappings of the tracee (kernel/uapi/proc_maps.h, malformed
  // lines skipped), captured at attach, after every exec
  // (PTRACE_EVENT_EXEC) and after every mmap/mprotect syscall asking for
  // PROT_EXEC (seen as a `syscall` instruction about to run with that
  // number and protection in its registers — no extra syscall stops). The
  // decode cache is flushed at the same moments.
  std::vector<Mapping> maps() const;

 private:
  SoftBtsTracer(pid_t pid, const SoftBtsOptions& opt, CoreHooks* core);
  void Run();
  void ReportStarted(int rc);

  const pid_t pid_;
  const SoftBtsOptions opt_;
  CoreHooks* const core_;
  std::thread thread_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> branches_{0};
  std::atomic<uint64_t> reg_reads_{0};
  std::atomic<uint64_t> computed_{0};
  std::atomic<uint64_t> mispredictions_{0};
  std::atomic<uint64_t> resyncs_{0};
  std::atomic<bool> drain_requested_{false};
  std::atomic<uint64_t> drains_served_{0};
  std::atomic<bool> singleblock_{false};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool started_ = false;
  int start_rc_ = 0;
  ErrorDetail start_detail_;
  bool thread_exited_ = false;
  std::vector<Mapping> maps_;

  std::mutex stop_mu_;  // serializes Stop()

  friend class SoftBtsRun;
};

// Forks a child that blocks before exec, so a tracer can attach before the
// program's first instruction. Protocol: the child blocks in read() on a
// close-on-exec AF_UNIX socket pair; Release(pid) sends one byte 'g' and the
// child execvp()s argv. If the socket closes without that byte (the parent exits,
// or Abandon()), the child _exit(126)s; if execvp fails it _exit(127)s.
// The child is the caller's child: reap it (or let a tracer in this process
// reap it, see above). Returns 0, -EINVAL for an empty argv, or the errno of
// socketpair/fork.
int SpawnStopped(const std::vector<std::string>& argv, pid_t* pid,
                 ErrorDetail* d);
// Lets a SpawnStopped child exec. -ENOENT if `pid` is not a waiting child of
// SpawnStopped (or was already released); -EPIPE if the child is gone.
int Release(pid_t pid, ErrorDetail* d);
// Makes a waiting SpawnStopped child exit(126) without running anything.
int Abandon(pid_t pid, ErrorDetail* d);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_SOFT_BTS_H_
