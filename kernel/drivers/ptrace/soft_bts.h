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
// Scope: every thread of the process `pid` names, present (attached from
// /proc/PID/task at Start) and future (PTRACE_O_TRACECLONE), each its own
// task {pid, tid} with its own DS area (CoreHooks::TaskArea) and step state;
// with SoftBtsOptions::inherit also the processes they fork/vfork/clone and
// what those exec, as perf record follows children. Every new task is
// reported (CoreHooks::TaskCreated) before its first record, every exit
// (CoreHooks::TaskExit, one per task), every exec (CoreHooks::TaskExec, with
// the new maps). The tracer is done when its last task is gone. One tracer
// thread serves all of them: it waits for any of its tracees
// (waitpid(-1, __WALL | __WNOTHREAD): only this thread's tracees), handles
// that stop and resumes that task, so the tasks run concurrently and only
// the tracer's handling is serialised; each task's records stay in that
// task's order.
//
// Switch records: from the kernel where it allows (a PERF_COUNT_SW_DUMMY
// event with context_switch per traced task, CLOCK_MONOTONIC times): under
// ptrace every stop is itself a switch-out and every resume a switch-in;
// those pairs are the tracer's artifacts and are dropped (the switch-in of a
// resume, and the last switch-out before a stop; a CPU change across them
// moves the task's later records to the new CPU), and the switches the task
// made while it ran
// (blocking, preemption: voluntary vs involuntary from the kernel's
// OUT_PREEMPT) are reported as they were. Where perf_event_open is refused
// (perf_event_paranoid, seccomp), switches are inferred from CPU changes
// (/proc/TID/stat) as before, and Stats::switch_errno says why.
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

#include <sched.h>
#include <sys/types.h>
#include <sys/user.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
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

// The default SoftBtsOptions::ds_records.
inline constexpr uint32_t kSoftBtsDsRecords = 8192;

struct SoftBtsOptions {
  // Size of the task DS area a tracer's own core gives it (the tracer
  // process's, see tracer_process.h); threshold = full.
  uint32_t ds_records = kSoftBtsDsRecords;
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
  // Also trace the processes the traced ones create (fork, vfork, clone
  // without CLONE_THREAD) and what they exec. Threads are always traced.
  bool inherit = false;
  // Switch records from the kernel (see the top of this file); false: infer
  // them from CPU changes.
  bool kernel_switches = true;
  uint32_t switch_ring_pages = 8;  // per task, a power of two
  // Run every traced task and the tracer thread on one CPU (as rr binds
  // its tracees): a stop and its resume then wake a task on the CPU they
  // run on. On a VM, where waking a task on the other CPU goes through the
  // hypervisor, branch stepping made 4-5x the stops per second bound for
  // one or two tasks, 2x for three (docs/host_drivers.md, "One CPU"). The
  // CPU is `cpu` below, else the tracer's, if the tracee may run there,
  // else the first it may use. Each task gets its own affinity back at detach and when let
  // go, unless it was changed from outside meanwhile; the program's own
  // sched_getaffinity reports it, and its sched_setaffinity changes it.
  // Not with address filters. False: the scheduler places them.
  bool bind_cpu = true;
  // The CPU bind_cpu binds to when the traced program may run there (pfmd
  // spreads its tracers over the CPUs this way: HostTracers); -1, or one
  // it may not use: as above.
  int cpu = -1;
  // Called (on the tracer thread) when a task is bound, and when the
  // affinity it is to get back changes (its own sched_setaffinity): for a
  // tracer in another process, so that someone can give it back should the
  // tracer die without detaching (tracer_helper.cc, kBound).
  std::function<void(TaskId task, int cpu, const cpu_set_t& own)> on_bound;
  // Branch stepping (docs/host_drivers.md, "Branch stepping"): a thread is
  // stopped only at the branch that ends each basic block, by an int3 the
  // tracer plants there (in the tracee's private copy of the code; hidden
  // from the decoder), the branch is emulated from the registers
  // (branch_emulator.h) and the next block runs at full speed. What cannot
  // be handled so is single-stepped: syscalls and other traps, untrusted
  // (writable, shared, [vsyscall]) code, undecodable bytes, branches the
  // emulator does not take, signal delivery, threads with a CET shadow
  // stack. Off: every instruction is single-stepped. Never under debug
  // control (which turns it off and takes the int3s out).
  bool branch_step = false;
  // Address filters (docs/host_drivers.md, "Address filters"), with
  // branch_step only, like Intel PT's: a thread's branches are recorded
  // only while it runs inside the filter. When it leaves, it runs at full
  // speed (PTRACE_SYSCALL: stops only at syscalls, to see mapping changes)
  // until it hits a gate: an int3 on a function entry inside the filter
  // (function_entries.h), on the return address of the call that left it,
  // or on a branch planned earlier; then one PFM_REC_GAP record {where the
  // untraced run began, where tracing resumed} and tracing goes on. With
  // no filter and no start address, everything is traced.
  struct AddrRange {
    uint64_t lo = 0;  // [lo, hi)
    uint64_t hi = 0;
  };
  // Ranges of the root process's program as it is at Start (its children
  // until they exec).
  std::vector<AddrRange> filter_ranges;
  // Every executable mapping of these files (paths as /proc/PID/maps
  // shows them), in every traced process, across exec.
  std::vector<std::string> filter_files;
  // Nothing is traced until a thread of the root reaches this address (an
  // instruction's); then the filter (or everything) is.
  uint64_t start_at = 0;
  bool filtering() const {
    return !filter_ranges.empty() || !filter_files.empty() || start_at != 0;
  }
};

// The signal Stop() uses to interrupt the tracer thread's waitpid().
int SoftBtsWakeSignal();

class SoftBtsRun;

// Run control for a debugger (pfmctl gdbserver, docs/gdb.md), carried out
// by the stepping tracer itself: it already stops after every instruction,
// so a breakpoint is a comparison of the next RIP with a set of addresses
// (no int3 is written: nothing to hide from memory reads or the decoder),
// a step is "stop after the next step stop", and a stop of the whole
// process is "do not resume its threads" (PTRACE_INTERRUPT for the ones
// blocked in a syscall). The debugger controls the threads of the traced
// process (the root); children followed with inherit run on. While a
// thread is held stopped its branches are handed over and a switch-out is
// reported, and a switch-in when it is resumed: a profiler on the same task
// sees the time it spent stopped as such.
struct DebugStopEvent {
  enum Kind { kStopped, kExited, kKilled } kind = kStopped;
  pid_t tid = 0;        // kStopped: the thread that stopped
  int signo = 0;        // kStopped: SIGTRAP (step, breakpoint, attach, exec)
                        // or the signal it received; kKilled: the signal
  int exit_code = 0;    // kExited
  bool swbreak = false;  // kStopped at a breakpoint address (not executed)
  // kStopped by a hardware breakpoint or watchpoint (DebugHwPoint): its
  // kind (kDebugHwExec/Write/Access) and address; 0 for none.
  int hw_kind = 0;
  uint64_t hw_addr = 0;
};
// DebugHwPoint kinds: GDB's Z1, Z2 and Z4 numbering.
inline constexpr int kDebugHwExec = 1;
inline constexpr int kDebugHwWrite = 2;
inline constexpr int kDebugHwAccess = 4;
using DebugEventFn = std::function<void(const DebugStopEvent&)>;

// Per-thread resume actions (GDB's vCont): `step` threads run one
// instruction, `cont` threads continue, and every other thread continues
// too if `continue_others` (else it stays stopped: GDB's scheduler
// locking); a thread in `signals` gets that signal on resume.
struct DebugResumeSpec {
  std::vector<pid_t> step;
  std::vector<pid_t> cont;
  bool continue_others = true;
  std::map<pid_t, int> signals;
};

struct DebugRegs {
  user_regs_struct regs;
  user_fpregs_struct fp;
};

class SoftBtsTracer {
 public:
  // Starts a tracer thread that attaches to every thread of `pid`
  // (PTRACE_SEIZE with PTRACE_O_TRACEEXEC | PTRACE_O_TRACECLONE, plus
  // TRACEFORK | TRACEVFORK with inherit, then PTRACE_INTERRUPT) and returns
  // once attached (0) or failed: -EINVAL (bad arguments), -EPERM (not
  // allowed to trace), -ESRCH (no such process, or it exited while
  // attaching), other ptrace errnos. A thread that exits while being
  // attached is skipped; only the failure of `pid` itself fails Start. On
  // success the tracer has reported TaskCreated and Switch(idle -> task)
  // for each thread and captured the executable maps. `core` must outlive
  // the tracer.
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
    // Tasks traced now, and ever (threads and processes).
    uint64_t tasks = 0;
    uint64_t tasks_seen = 0;
    uint64_t processes_seen = 0;
    // Tasks met at their own first stop before their creator's clone or
    // fork event: adopted with a guessed creator (the main thread of their
    // process), corrected when the event comes.
    uint64_t children_first = 0;
    // Stops taken in a round of several tasks that were no more when their
    // turn came (the task was killed, or another thread's exec took its
    // tid, while an earlier stop was handled): dropped.
    uint64_t stale_stops = 0;
    // The CPU the tasks are bound to (bind_cpu), -1 when they are not.
    int32_t bound_cpu = -1;
    // Switch records: 0 when they come from the kernel, else the negative
    // errno of the perf_event_open that was refused (inferred instead).
    int64_t switch_errno = 0;
    uint64_t switches = 0;           // switch records reported
    uint64_t switch_artifacts = 0;   // kernel switch records of ptrace stops, dropped
    // Branch stepping: stops at an int3 of the tracer's, branches emulated
    // (at those stops and at step stops), int3s written.
    uint64_t branch_stops = 0;
    uint64_t emulated = 0;
    uint64_t planted = 0;
    // Address filters: gap records written (a return into the filter).
    uint64_t gaps = 0;
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

  // Debug control (see DebugStopEvent). Each call is carried out by the
  // tracer thread and waits for it; 0 or a negative errno (-ESRCH: the
  // tracer or the task is gone; -EBUSY: debug control is on already;
  // -EINVAL: not enabled, or bad arguments). Not from a CoreHooks call.
  //
  // Enable: stops the root process now (stop_at_exec false; reported as
  // SIGTRAP) or at its next exec (true: a program launched stopped).
  // `events` is called on the tracer thread, once per stop of the whole
  // process, after its threads' branches were handed over; it must not call
  // back into the tracer.
  int DebugEnable(bool stop_at_exec, DebugEventFn events);
  // Stops the root process (reported with SIGINT) unless it is stopped.
  int DebugInterrupt();
  // Resumes a stopped process. A thread with an event not yet reported (a
  // breakpoint or signal that came while the others were being stopped)
  // reports it instead, and nothing is resumed.
  int DebugResume(const DebugResumeSpec& spec);
  int DebugGetRegs(pid_t tid, DebugRegs* out);
  int DebugSetRegs(pid_t tid, const DebugRegs& in);
  // Memory of the root process (/proc/PID/mem: the tracer may write
  // read-only code, as a debugger does); a short read returns what was read.
  int DebugReadMemory(uint64_t addr, size_t len, std::string* out);
  int DebugWriteMemory(uint64_t addr, const std::string& bytes);
  int DebugBreakpoint(uint64_t addr, bool insert);
  // A hardware breakpoint (kDebugHwExec, len 1) or watchpoint (Write,
  // Access; len 1, 2, 4 or 8, aligned) in a debug register of every thread
  // of the root process: a perf breakpoint event per thread, opened by the
  // tracer (threads created later get theirs at their first stop). A
  // watchpoint's hit is the sample the kernel writes into the event's ring
  // in its debug exception handler, seen at the step stop after the
  // instruction that hit it. An execute breakpoint's hit is reported
  // before the instruction runs, at the step that reaches it (the debug
  // register's own hit would come one instruction late under
  // single-stepping); its register is held all the same, so the machine's
  // accounting of debug registers is true. The kernel's errno when it
  // refuses a thread (-ENOSPC: no free debug register; -EINVAL: a length or
  // alignment it does not take), with `err` saying why; nothing is left
  // half-inserted. Removing what was never inserted is 0.
  int DebugHwPoint(int kind, uint64_t addr, uint32_t len, bool insert, std::string* err);
  // The root process's threads (tids), main thread first.
  int DebugThreads(std::vector<pid_t>* out);
  // SIGKILL to the root process; its end is reported as an event.
  int DebugKill();
  // Ends debug control: breakpoints go, stopped threads are resumed (with
  // any signal they stopped for), or with `kill` the process is killed.
  int DebugDisable(bool kill);

  // Executable mappings of the tracee (kernel/uapi/proc_maps.h, malformed
  // lines skipped), captured at attach, after every exec
  // (PTRACE_EVENT_EXEC) and after every mmap/mprotect syscall asking for
  // PROT_EXEC (seen as a `syscall` instruction about to run with that
  // number and protection in its registers — no extra syscall stops). The
  // decode cache is flushed at the same moments.
  std::vector<Mapping> maps() const;
  // The same for every traced process (the root's included), by pid; a
  // process leaves the map when its last task is gone. *cut (when given):
  // the pids whose list was cut at kMaxMappings (ParseProcMaps).
  std::map<pid_t, std::vector<Mapping>> process_maps(
      std::set<pid_t>* cut = nullptr) const;

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
  std::atomic<uint64_t> tasks_{0};
  std::atomic<uint64_t> tasks_seen_{0};
  std::atomic<uint64_t> processes_seen_{0};
  std::atomic<uint64_t> children_first_{0};
  std::atomic<uint64_t> stale_stops_{0};
  std::atomic<int32_t> bound_cpu_{-1};
  std::atomic<int64_t> switch_errno_{0};
  std::atomic<uint64_t> switches_{0};
  std::atomic<uint64_t> switch_artifacts_{0};
  std::atomic<uint64_t> branch_stops_{0};
  std::atomic<uint64_t> emulated_{0};
  std::atomic<uint64_t> planted_{0};
  std::atomic<uint64_t> gaps_{0};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool started_ = false;
  int start_rc_ = 0;
  ErrorDetail start_detail_;
  bool thread_exited_ = false;
  std::map<pid_t, std::vector<Mapping>> maps_;  // by process
  std::set<pid_t> maps_cut_;  // processes of maps_ whose list was cut
  pid_t root_ = 0;  // the process whose maps maps() returns

  std::mutex stop_mu_;  // serializes Stop()

  // Debug requests for the tracer thread (RunOnTracer).
  struct DebugCall {
    std::function<int(SoftBtsRun*)> fn;
    int rc = 0;
    bool done = false;
  };
  int RunOnTracer(std::function<int(SoftBtsRun*)> fn);
  std::deque<DebugCall*> debug_calls_;  // guarded by mu_
  std::atomic<bool> debug_calls_pending_{false};  // set with mu_ held

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
//
// The child's signals: handlers the caller installed are back to default
// before it waits (a ^C at the terminal ends it, as exec would have reset
// them anyway); and, once the caller has called RememberStartSignals, a
// signal the caller ignores that its own starter did not (pfmctl ignores
// SIGPIPE) is back to default too, and the signal mask is the starter's. A
// signal the starter ignored stays ignored, as a shell keeps it.
int SpawnStopped(const std::vector<std::string>& argv, pid_t* pid,
                 ErrorDetail* d);
// Records the process's ignored signals and signal mask as it started, for
// SpawnStopped's children. Call first thing in main, before changing any.
void RememberStartSignals();
// Lets a SpawnStopped child exec. -ENOENT if `pid` is not a waiting child of
// SpawnStopped (or was already released); -EPIPE if the child is gone.
int Release(pid_t pid, ErrorDetail* d);
// Makes a waiting SpawnStopped child exit(126) without running anything.
int Abandon(pid_t pid, ErrorDetail* d);

// For a tracer that needs the program's own addresses (address filters, a
// start address, names resolved in it) before it attaches: lets a
// SpawnStopped child exec under the caller's ptrace (PTRACE_SEIZE with
// PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL: if the caller dies, so does the
// child) and waits for the exec stop: the program loaded, none of it run.
// Signals that stop it before are passed on. 0 there; -ECHILD with
// *status (a wait status) when it ended first (126: abandoned, 127: exec
// failed), reaped; another -errno otherwise, the child abandoned or killed
// (the caller reaps it).
int ReleaseToExecStop(pid_t pid, int* status, ErrorDetail* d);
// Hands a child in one of the caller's ptrace stops on, stopped: SIGSTOP
// queued while it is held, PTRACE_DETACH, then a wait until it stops
// before its next instruction, for another tracer to attach (and SIGCONT
// it). 0; -ECHILD with *status when it ended instead, reaped; another
// -errno otherwise, the child killed (the caller reaps it).
int DetachStopped(pid_t pid, int* status, ErrorDetail* d);

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PTRACE_SOFT_BTS_H_
