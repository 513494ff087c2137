// softbts: branch records/s and steps/s of the ptrace soft-BTS driver
// (SoftBtsTracer draining into a DsAllocator with one fixed lossless
// consumer, as pfmd's host driver does) against the bare PTRACE_SINGLESTEP
// loop (fork, PTRACE_TRACEME, exec, singlestep to exit, count steps) on the
// same program in the same run. Repetitions alternate the two sides.
// Target: the tracer's steps/s >= 0.8 x the bare loop's. Needs ptrace (root).
// Also reports how many steps needed a register read (the tracer computes
// the RIP after sequential instructions, see kernel/drivers/ptrace/soft_bts.h);
// --read-every-step turns that off (PTRACE_GETREGS after every step), for an
// A/B of it on the same machine.
//
// The whole benchmark (tracers, tracees) is pinned to one CPU: a step is a
// ping-pong between two tasks, and on a shared 2-CPU VM its cost otherwise
// depends on whether the two land on the same CPU more than on the code.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/soft_bts_run.h"
#include "kernel/ds/ds_allocator.h"

namespace pfm::bench {
namespace {

int Traced(const std::vector<std::string>& argv, const SoftBtsOptions& opt,
           SoftBtsRunResult* res, uint64_t* ring_records, uint64_t* lost) {
  return TraceLossless(argv, opt, "softbts", res, ring_records, lost);
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  // --read-every-step is this benchmark's own flag; the rest are common.
  SoftBtsOptions tracer_opt;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::string(argv[i]) == "--read-every-step") {
      tracer_opt.compute_rip = false;
    } else if (i > 0 && std::string(argv[i]) == "--no-kernel-switches") {
      tracer_opt.kernel_switches = false;  // A/B of the per-task switch watcher
    } else {
      args.push_back(argv[i]);
    }
  }
  const Options opt = ParseOptions(
      static_cast<int>(args.size()), args.data(),
      "soft-BTS tracer vs bare PTRACE_SINGLESTEP loop on /bin/true "
      "[--read-every-step] [--no-kernel-switches]");
  const std::vector<std::string> prog = {"/bin/true"};
  const int pinned_cpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) - 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pinned_cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::perror("softbts: sched_setaffinity");
    return 1;
  }
  const int reps = opt.quick ? 1 : 3;
  std::vector<double> bare_sps, tr_sps, tr_bps;
  BareStepResult b{};
  SoftBtsRunResult t{};
  uint64_t ring_records = 0, lost = 0;
  for (int r = 0; r < reps; ++r) {
    if (int rc = BareStepLoop(prog, &b); rc != 0) {
      std::fprintf(stderr, "softbts: bare loop failed: %d\n", rc);
      return 1;
    }
    bare_sps.push_back(b.steps / b.seconds);
    if (int rc = Traced(prog, tracer_opt, &t, &ring_records, &lost); rc != 0) {
      std::fprintf(stderr, "softbts: tracer failed: %d\n", rc);
      return 1;
    }
    tr_sps.push_back(t.stats.steps / t.seconds);
    tr_bps.push_back(t.stats.branches / t.seconds);
    std::fprintf(stderr, "rep %d: bare %llu steps %.0f steps/s | tracer %llu steps %.0f steps/s %.0f branches/s, %llu register reads\n",
                 r, static_cast<unsigned long long>(b.steps), bare_sps.back(),
                 static_cast<unsigned long long>(t.stats.steps), tr_sps.back(),
                 tr_bps.back(), static_cast<unsigned long long>(t.stats.reg_reads));
  }
  const double ratio = Median(tr_sps) / Median(bare_sps);
  boost::json::object doc = Envelope("softbts", opt);
  doc["program"] = prog[0];
  doc["repetitions"] = reps;
  doc["pinned_cpu"] = pinned_cpu;
  doc["compute_rip"] = tracer_opt.compute_rip;
  doc["kernel_switches"] = tracer_opt.kernel_switches;
  boost::json::array bare_runs(bare_sps.begin(), bare_sps.end());
  boost::json::array tr_runs(tr_sps.begin(), tr_sps.end());
  doc["bare_steps_per_s_runs"] = bare_runs;
  doc["tracer_steps_per_s_runs"] = tr_runs;
  doc["bare"] = boost::json::object{{"steps", b.steps},
                                    {"steps_per_s_median", Median(bare_sps)}};
  doc["tracer"] = boost::json::object{
      {"steps", t.stats.steps},
      {"branches", t.stats.branches},
      {"ring_records", ring_records},
      {"lost", lost},
      {"singleblock_honoured", t.stats.singleblock_honoured},
      {"reg_reads", t.stats.reg_reads},
      {"computed_rips", t.stats.computed},
      {"reg_read_fraction",
       t.stats.steps != 0 ? double(t.stats.reg_reads) / t.stats.steps : 0.0},
      {"resyncs", t.stats.resyncs},
      {"switch_source", t.stats.switch_errno == 0 ? "kernel" : "inferred"},
      {"switches", t.stats.switches},
      {"switch_artifacts_dropped", t.stats.switch_artifacts},
      {"steps_per_s_median", Median(tr_sps)},
      {"branch_records_per_s_median", Median(tr_bps)}};
  // Interference from other processes only ever slows a run down, so the
  // fastest run of each side is a second, less noisy estimate.
  const double best_ratio = *std::max_element(tr_sps.begin(), tr_sps.end()) /
                            *std::max_element(bare_sps.begin(), bare_sps.end());
  doc["ratio_steps_per_s"] = ratio;
  doc["ratio_steps_per_s_best_of"] = best_ratio;
  doc["target"] = boost::json::object{
      {"what", "tracer steps/s >= 0.8 x bare PTRACE_SINGLESTEP loop (medians)"},
      {"met", ratio >= 0.8},
      {"met_best_of", best_ratio >= 0.8}};
  PrintJson(doc);
  return 0;
}
