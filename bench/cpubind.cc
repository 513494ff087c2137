// cpubind: the soft-BTS tracer with its tasks bound to its CPU
// (SoftBtsOptions::bind_cpu, the default) against the same tracer left to
// the scheduler, on the same program, alternating, in one run. Unlike
// bench/softbts and bench/branchstep this process is NOT pinned: the
// scheduler's placement is what is measured. Branch stepping, the lossless
// consumer pfmd gives a profiler. Program: a dash loop of N iterations
// (--iterations, default 100: about 265,000 int3 stops), no syscalls in
// the loop; with --tasks=N (N > 1), N such loops at once, each in a dash
// process the first one forks (followed: inherit), so that N tasks share
// the tracer, bound to one CPU together or free. Needs ptrace (root) and
// at least 2 CPUs.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/soft_bts_run.h"

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  long iterations = 100;
  long tasks = 1;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strncmp(argv[i], "--iterations=", 13) == 0) {
      iterations = std::atol(argv[i] + 13);
    } else if (i > 0 && std::strncmp(argv[i], "--tasks=", 8) == 0) {
      tasks = std::atol(argv[i] + 8);
    } else {
      args.push_back(argv[i]);
    }
  }
  const Options opt = ParseOptions(static_cast<int>(args.size()), args.data(),
                                   "soft-BTS tracer bound to one CPU vs free [--iterations=N] [--tasks=N]");
  if (iterations <= 0 || tasks < 1 || tasks > 16) {
    std::fprintf(stderr, "cpubind: --iterations must be positive, --tasks 1..16\n");
    return 2;
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2) {
    std::fprintf(stderr, "cpubind: needs at least 2 CPUs\n");
    return 1;
  }
  const std::string loop =
      "i=0; while [ $i -lt " + std::to_string(iterations) + " ]; do i=$((i+1)); done";
  std::string script = loop;
  if (tasks > 1) {
    script.clear();
    for (long k = 0; k < tasks; ++k) script += "(" + loop + ") & ";
    script += "wait";
  }
  const std::vector<std::string> prog = {"/bin/dash", "-c", script};
  const int reps = opt.quick ? 1 : 3;
  std::vector<double> bound_s, free_s, bound_rate, free_rate;
  uint64_t stops[2] = {0, 0};
  for (int r = 0; r < reps; ++r) {
    for (const bool bind : {false, true}) {
      SoftBtsOptions o;
      o.branch_step = true;
      o.bind_cpu = bind;
      o.inherit = tasks > 1;
      SoftBtsRunResult res;
      uint64_t ring_records = 0, lost = 0;
      if (int rc = TraceLossless(prog, o, "cpubind", &res, &ring_records, &lost); rc != 0) {
        std::fprintf(stderr, "cpubind: trace failed: %d\n", rc);
        return 1;
      }
      const double rate = res.stats.branch_stops / res.seconds;
      (bind ? bound_s : free_s).push_back(res.seconds);
      (bind ? bound_rate : free_rate).push_back(rate);
      stops[bind] = res.stats.branch_stops;
      std::fprintf(stderr, "rep %d %s: %.2f s, %llu int3 stops, %.0f stops/s, lost %llu\n", r,
                   bind ? "bound" : "free ", res.seconds,
                   static_cast<unsigned long long>(res.stats.branch_stops), rate,
                   static_cast<unsigned long long>(lost));
    }
  }
  boost::json::object doc = Envelope("cpubind", opt);
  doc["program"] = prog[2];
  doc["tasks"] = tasks;
  doc["repetitions"] = reps;
  doc["cpus"] = CPU_COUNT(&mine);
  doc["free"] = boost::json::object{
      {"seconds_runs", boost::json::array(free_s.begin(), free_s.end())},
      {"int3_stops", stops[0]},
      {"stops_per_s_median", Median(free_rate)}};
  doc["bound"] = boost::json::object{
      {"seconds_runs", boost::json::array(bound_s.begin(), bound_s.end())},
      {"int3_stops", stops[1]},
      {"stops_per_s_median", Median(bound_rate)}};
  doc["bound_vs_free"] = Median(bound_rate) / Median(free_rate);
  PrintJson(doc);
  return 0;
}
