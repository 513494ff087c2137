// Linux perf_event_open for the host driver: counters (software, hardware),
// breakpoints, a context-switch watcher, and PEBS/BTS sampling, for a task
// or a CPU.
//
// Capabilities come from /sys/bus/event_source/devices (ProbePerfCaps). A
// request the machine cannot serve (no `cpu`/`cpu_core` PMU: no hardware
// counters, PEBS or BTS; no `intel_bts`: no BTS) fails before any syscall
// with -EOPNOTSUPP and "... not supported on this machine (...)". Errors
// from the kernel are passed up as its negative errno with one sentence
// (e.g. -ENOSPC for a fifth breakpoint on a task: x86 has 4 debug
// registers).
//
// Every Open* returns 0 and fills its out-parameter, or a negative errno
// with `*out` untouched. Objects own their fd (and mapping); Close() and the
// destructor release them and are safe twice. A PerfEvent may be read from
// any thread; a PerfSampler's Read() from one thread at a time.
#ifndef PFM_KERNEL_DRIVERS_PERF_PERF_EVENTS_H_
#define PFM_KERNEL_DRIVERS_PERF_PERF_EVENTS_H_

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernel/drivers/perf/perf_ring.h"
#include "kernel/uapi/pfm_error.h"

namespace pfm {

constexpr char kPerfDevicesDir[] = "/sys/bus/event_source/devices";

struct PerfCaps {
  std::string devices_dir;   // where this was read
  bool cpu_pmu = false;      // `cpu` or `cpu_core` (hybrid) present
  std::string cpu_pmu_name;  // "cpu" / "cpu_core" / ""
  bool intel_bts = false;    // the AUX BTS PMU
  int max_precise = 0;       // cpu/caps/max_precise: PEBS when > 0
  bool software = false;
  bool breakpoint = false;
};

// Reads `devices_dir` (normally kPerfDevicesDir; tests pass a fake tree).
// -ENOENT when the directory does not exist (no perf_events at all).
int ProbePerfCaps(const std::string& devices_dir, PerfCaps* out,
                  ErrorDetail* d);

// What an event watches: a task (pid >= 0, cpu = -1 for any CPU, or a given
// CPU), or a whole CPU (pid = -1, cpu >= 0), or a whole process.
//
// A process target (counters only: OpenSoftwareCounter, OpenHardwareCounter)
// is counted as `perf stat -p` counts it: one event per thread the process
// has when it is opened (/proc/PID/task), each with attr.inherit, so the
// threads those threads create later count with them, and with `children`
// the processes they fork too (else attr.inherit_thread: threads only). One
// PerfEvent holds them and its Read sums them. A thread created between the
// listing and the opening of its creator's event is not counted (perf's race
// as well); a thread that is gone by then is skipped.
//
// A thread's id is free for reuse as soon as the thread exits (no reaping),
// so each thread's event counts only if the id is still one of the
// process's threads after the open; else it may be on another task and is
// closed, and an error from that open (another user's process now at the
// id) is not the request's.
struct PerfTarget {
  pid_t pid = -1;
  int cpu = -1;
  bool process = false;
  bool children = false;
  // Tests: called with each thread id of a process target just before its
  // event is opened (to end the thread and put a new process at its id).
  std::function<void(pid_t tid)> before_thread_open;
  static PerfTarget Task(pid_t pid) { return PerfTarget{pid, -1, false, false, {}}; }
  static PerfTarget Cpu(int cpu) { return PerfTarget{-1, cpu, false, false, {}}; }
  static PerfTarget Process(pid_t pid, bool children) {
    return PerfTarget{pid, -1, true, children, {}};
  }
};

// read() with PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING.
struct PerfCount {
  uint64_t value = 0;
  uint64_t time_enabled = 0;  // ns
  uint64_t time_running = 0;  // ns; < time_enabled when multiplexed
};

class PerfEvent {
 public:
  PerfEvent() = default;
  ~PerfEvent() { Close(); }
  PerfEvent(PerfEvent&& o) noexcept : fd_(o.fd_), more_(std::move(o.more_)) {
    o.fd_ = -1;
    o.more_.clear();
  }
  PerfEvent& operator=(PerfEvent&& o) noexcept;
  PerfEvent(const PerfEvent&) = delete;
  PerfEvent& operator=(const PerfEvent&) = delete;

  bool is_open() const { return fd_ >= 0; }
  // The first (for a process target: the first thread's) event.
  int fd() const { return fd_; }
  // How many events: 1, or a process target's threads.
  size_t threads() const { return fd_ >= 0 ? 1 + more_.size() : 0; }
  // Sums over a process target's threads (values, enabled and running
  // times, as perf stat sums per-thread counts before scaling).
  int Read(PerfCount* out, ErrorDetail* d) const;
  int Enable(ErrorDetail* d);
  int Disable(ErrorDetail* d);
  void Close();

 private:
  // `request` on every fd (all of a process target's threads).
  int Ioctl(unsigned long request, const char* what, ErrorDetail* d);
  friend int OpenPerfEvent(const perf_event_attr&, PerfTarget, const char*,
                           PerfEvent*, ErrorDetail*);
  int fd_ = -1;
  std::vector<int> more_;  // a process target's other threads
};

// The threads process `pid` has now (/proc/PID/task); 0 if it is gone.
size_t ProcessThreadCount(pid_t pid);

// perf_event_open with pfm's defaults filled in (size, read_format,
// CLOEXEC); `what` names the request in error messages. -EINVAL for a target
// that is neither a task nor a CPU; otherwise the kernel's errno.
int OpenPerfEvent(const perf_event_attr& attr, PerfTarget target,
                  const char* what, PerfEvent* out, ErrorDetail* d);

// The perf tool's software event names ("task-clock", "cs", "page-faults",
// ...: kPerfGenericEvents in perf_event_names.h) -> PERF_COUNT_SW_*.
// -ENOENT for other names, hardware ones included.
int SoftwareEventByName(const std::string& name, uint64_t* config);

// `user_only` counts user mode only (exclude_kernel, exclude_hv): what an
// unprivileged opener may ask for at perf_event_paranoid >= 2.
int OpenSoftwareCounter(PerfTarget target, uint64_t config, PerfEvent* out,
                        ErrorDetail* d, bool user_only = false);
// PERF_TYPE_HARDWARE (`config` = PERF_COUNT_HW_*) or PERF_TYPE_RAW.
int OpenHardwareCounter(const PerfCaps& caps, PerfTarget target,
                        uint32_t type, uint64_t config, PerfEvent* out,
                        ErrorDetail* d, bool user_only = false);
// PERF_TYPE_BREAKPOINT. `bp_type` is HW_BREAKPOINT_R/W/RW/X; `len` 1, 2, 4
// or 8 (X: must be sizeof(long), as the kernel requires). Pinned: a
// breakpoint is never multiplexed by the kernel.
int OpenBreakpoint(const PerfCaps& caps, PerfTarget target, uint64_t addr,
                   uint32_t len, uint32_t bp_type, PerfEvent* out,
                   ErrorDetail* d);

// A sampling event with its mmap ring.
class PerfSampler {
 public:
  ~PerfSampler();
  PerfSampler(const PerfSampler&) = delete;
  PerfSampler& operator=(const PerfSampler&) = delete;

  // A dummy software event with context_switch = 1 (and sample_id_all with
  // TID|TIME|CPU, times on CLOCK_MONOTONIC): PERF_RECORD_SWITCH for a task,
  // PERF_RECORD_SWITCH_CPU_WIDE for a CPU. `data_pages` must be a power of
  // two.
  static int OpenSwitchWatcher(PerfTarget target, uint32_t data_pages,
                               std::unique_ptr<PerfSampler>* out,
                               ErrorDetail* d);
  // PEBS: a hardware event sampled every `period` with precise_ip
  // (1..3, capped by cpu/caps/max_precise) and IP|TID|TIME|ADDR|CPU|
  // WEIGHT|DATA_SRC; turn samples into pfm_pebs_raw with PebsFromSample.
  static int OpenPebs(const PerfCaps& caps, PerfTarget target, uint32_t type,
                      uint64_t config, uint64_t period, int precise_ip,
                      uint32_t data_pages, std::unique_ptr<PerfSampler>* out,
                      ErrorDetail* d);
  // BTS: branch-instructions with sample_period 1 (which Intel's perf driver
  // serves from the DS area) and IP|ADDR|TID|TIME|CPU; BtsFromSample turns
  // a sample into {from = ip, to = addr}.
  static int OpenBts(const PerfCaps& caps, PerfTarget target, bool user,
                     bool kernel, uint32_t data_pages,
                     std::unique_ptr<PerfSampler>* out, ErrorDetail* d);

  // A breakpoint (as OpenBreakpoint) that samples every hit with IP|ADDR:
  // the kernel writes the sample in its debug exception handler, so a
  // tracer that stops the task after each instruction sees the hit in
  // pending() at that stop without a syscall.
  static int OpenBreakpointSampler(const PerfCaps& caps, PerfTarget target,
                                   uint64_t addr, uint32_t len,
                                   uint32_t bp_type, uint32_t data_pages,
                                   std::unique_ptr<PerfSampler>* out,
                                   ErrorDetail* d);

  // Delivers every record in the ring (see PerfRingReader::Read).
  int Read(const std::function<void(const PerfRecord&)>& fn, ErrorDetail* d) {
    return reader_.Read(fn, d);
  }
  // Bytes the kernel has written and Read has not consumed (a load).
  uint64_t pending() const { return reader_.pending(); }
  PerfEvent& event() { return event_; }
  uint64_t sample_type() const { return sample_type_; }

 private:
  PerfSampler() = default;
  static int Open(const perf_event_attr& attr, PerfTarget target,
                  const char* what, uint32_t data_pages,
                  std::unique_ptr<PerfSampler>* out, ErrorDetail* d);

  PerfEvent event_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  uint64_t sample_type_ = 0;
  PerfRingReader reader_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_DRIVERS_PERF_PERF_EVENTS_H_
