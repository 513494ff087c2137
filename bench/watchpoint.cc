// watchpoint: what GDB's hardware watchpoints cost the stepping tracer per
// step. Under debug control (pfmctl gdbserver: every instruction is a step,
// docs/gdb.md) /bin/true runs from its exec stop to its exit three ways in
// the same run, repetitions alternating: with no hardware point, with one
// write watchpoint, and with four (every debug register), each armed as
// `watch` arms it (SoftBtsTracer::DebugHwPoint: a perf breakpoint event per
// thread whose ring head the tracer compares at every step). The watched
// addresses are never written, so every run steps the same instructions.
// Reported: steps/s of each, and their ratio to the no-point run.
//
// An armed debug register costs the kernel too, whoever steps: it installs
// the task's breakpoints at every switch-in (two switches per step, tracer
// and tracee), and in a VM a write to DR7 exits to the hypervisor. So the
// baseline, in the same run, is the bare PTRACE_SINGLESTEP loop
// (bench/softbts's) with the same 0, 1 and 4 breakpoint events opened on
// its child. Target: the tracer's ratio is within 0.05 of the bare loop's:
// what watchpoints cost the tracer beyond the kernel's price is its check
// of each event's ring head at every step (a load). Needs ptrace and
// perf_event_open of breakpoints (root here). Pinned to one CPU as
// bench/softbts is.
#include <linux/hw_breakpoint.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/soft_bts_run.h"
#include "kernel/drivers/perf/perf_events.h"
#include "kernel/ds/ds_allocator.h"

namespace pfm::bench {
namespace {

struct Run {
  double seconds = 0;
  uint64_t steps = 0;
};

// Debug stops, as the channel's client sees them.
class Stops {
 public:
  void Push(const DebugStopEvent& e) {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(e);
    cv_.notify_all();
  }
  bool Wait(DebugStopEvent* e) {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, std::chrono::seconds(120), [&] { return !q_.empty(); })) return false;
    *e = q_.front();
    q_.erase(q_.begin());
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<DebugStopEvent> q_;
};

// Watched: words of a static array of this process, at addresses
// /bin/true (PIE, randomised) does not write. Any user address takes a
// debug register.
volatile uint64_t never[4];

// The bare loop (BareStepLoop) with `points` write breakpoint events
// opened on its child at the exec stop; they close when the run ends.
int Bare(int points, Run* out) {
  std::vector<std::unique_ptr<PerfSampler>> events(static_cast<size_t>(points));
  BareStepResult r;
  const int rc = BareStepLoop({"/bin/true"}, &r, [&](pid_t pid) {
    PerfCaps caps;
    ErrorDetail d;
    ProbePerfCaps(kPerfDevicesDir, &caps, &d);
    for (int i = 0; i < points; ++i) {
      const int rc = PerfSampler::OpenBreakpointSampler(
          caps, PerfTarget::Task(pid), reinterpret_cast<uint64_t>(&never[i]), 8,
          HW_BREAKPOINT_W, 1, &events[static_cast<size_t>(i)], &d);
      if (rc != 0) {
        std::fprintf(stderr, "watchpoint: bare: event %d: %s\n", i, d.message);
        return rc;
      }
    }
    return 0;
  });
  out->seconds = r.seconds;
  out->steps = r.steps;
  return rc;
}

// /bin/true under a debug-controlled tracer with `points` write
// watchpoints, from its exec stop to its exit.
int Traced(int points, Run* out) {
  DsAllocator ds(static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)), DsLimits{});
  pid_t pid = -1;
  if (int rc = SpawnForTrace({"/bin/true"}, &pid); rc != 0) return rc;
  if (int rc = AttachLosslessConsumer(&ds, pid, "watchpoint"); rc < 0) {
    Abandon(pid, nullptr);
    return rc;
  }
  ErrorDetail d;
  DsSink sink(&ds);
  std::unique_ptr<SoftBtsTracer> tracer;
  if (int rc = SoftBtsTracer::Start(pid, SoftBtsOptions(), &sink, &tracer, &d); rc != 0) {
    std::fprintf(stderr, "watchpoint: start: %s\n", d.message);
    Abandon(pid, nullptr);
    return rc;
  }
  Stops stops;
  int rc = tracer->DebugEnable(true, [&](const DebugStopEvent& e) { stops.Push(e); });
  if (rc == 0) rc = Release(pid, &d);
  DebugStopEvent e;
  if (rc == 0 && !stops.Wait(&e)) rc = -ETIMEDOUT;  // the exec stop
  for (int i = 0; rc == 0 && i < points; ++i) {
    std::string err;
    rc = tracer->DebugHwPoint(kDebugHwWrite, reinterpret_cast<uint64_t>(&never[i]), 8, true,
                              &err);
    if (rc != 0) std::fprintf(stderr, "watchpoint: point %d: %s\n", i, err.c_str());
  }
  const uint64_t steps0 = tracer->stats().steps;
  const uint64_t t0 = MonotonicNs();
  if (rc == 0) rc = tracer->DebugResume(DebugResumeSpec());
  if (rc == 0 && !stops.Wait(&e)) rc = -ETIMEDOUT;  // the exit
  if (rc == 0 && e.kind != DebugStopEvent::kExited) {
    std::fprintf(stderr, "watchpoint: stopped (kind %d, hw %d) before the exit\n", e.kind,
                 e.hw_kind);
    rc = -EPROTO;
  }
  out->seconds = (MonotonicNs() - t0) / 1e9;
  out->steps = tracer->stats().steps - steps0;
  tracer->Stop();
  return rc;
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  const Options opt = ParseOptions(argc, argv,
                                   "stepping tracer under debug control on /bin/true: "
                                   "0, 1 and 4 hardware watchpoints armed");
  const int pinned_cpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) - 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pinned_cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::perror("watchpoint: sched_setaffinity");
    return 1;
  }
  const int reps = opt.quick ? 1 : 5;
  const int kinds[3] = {0, 1, 4};
  // [0]: the tracer, [1]: the bare loop; by number of points.
  std::vector<double> sps[2][3];
  uint64_t steps[2][3] = {};
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      for (int side = 0; side < 2; ++side) {
        Run run;
        if (int rc = side == 0 ? Traced(kinds[k], &run) : Bare(kinds[k], &run); rc != 0) {
          std::fprintf(stderr, "watchpoint: %s, %d points: failed: %d\n",
                       side == 0 ? "tracer" : "bare", kinds[k], rc);
          return 1;
        }
        sps[side][k].push_back(run.steps / run.seconds);
        steps[side][k] = run.steps;
        std::fprintf(stderr, "rep %d: %s, %d points: %llu steps, %.0f steps/s\n", r,
                     side == 0 ? "tracer" : "bare", kinds[k],
                     static_cast<unsigned long long>(run.steps), sps[side][k].back());
      }
    }
  }
  boost::json::object doc = Envelope("watchpoint", opt);
  doc["program"] = "/bin/true";
  doc["repetitions"] = reps;
  doc["pinned_cpu"] = pinned_cpu;
  const char* names[3] = {"no_points", "one_watchpoint", "four_watchpoints"};
  bool met = true;
  for (int side = 0; side < 2; ++side) {
    boost::json::object by;
    const double base = Median(sps[side][0]);
    for (int k = 0; k < 3; ++k) {
      boost::json::array runs(sps[side][k].begin(), sps[side][k].end());
      boost::json::object o{{"points", kinds[k]},
                            {"steps", steps[side][k]},
                            {"steps_per_s_runs", runs},
                            {"steps_per_s_median", Median(sps[side][k])}};
      if (k > 0) {
        const double ratio = Median(sps[side][k]) / base;
        o["ratio_to_no_points"] = ratio;
        if (side == 0) {
          const double bare_ratio = Median(sps[1][k]) / Median(sps[1][0]);
          o["ratio_minus_bare_ratio"] = ratio - bare_ratio;
          met = met && ratio >= bare_ratio - 0.05;
        }
      }
      by[names[k]] = o;
    }
    doc[side == 0 ? "tracer" : "bare_singlestep"] = by;
  }
  doc["target"] = boost::json::object{
      {"what",
       "the tracer's steps/s ratio (1 and 4 watchpoints to none) >= the bare "
       "PTRACE_SINGLESTEP loop's with as many breakpoint events, - 0.05 (medians)"},
      {"met", met}};
  PrintJson(doc);
  return 0;
}
