// branchstep: branch stepping against single-stepping (issue 13). Both are
// the ptrace soft-BTS tracer (SoftBtsTracer draining into a DsAllocator
// with the lossless consumer pfmd gives a profiler); branch stepping stops
// a thread only at the branch ending each basic block (SoftBtsOptions::
// branch_step). For each program, in the same run: the untraced program's
// wall time, then the single-step tracer and the branch-stepping tracer,
// alternating, `reps` times each. Reported: branches recorded per second
// (medians), the ratio (target >= 3), traps (stops) per branch, and each
// tracer's wall-time slowdown against the untraced program.
//
// Programs: /bin/true, `ls -la /usr/bin`, `gzip -c` of a 200 KB text file
// (generated, deterministic). Their stdout goes to /dev/null. Pinned to one
// CPU like bench/softbts. Needs ptrace (root). `--only NAME` (true, ls,
// gzip) runs one of them; `--no-single-step` leaves the single-step tracer
// out (it takes most of the hour; no ratio then).
//
// Address filters (issue 17, docs/host_drivers.md): each program is also
// traced (branch stepping) with `--start main` and with its own binary as
// the filter (`--filter '@ /usr/bin/ls'`), in the same repetitions, against
// the unfiltered branch stepping above. ASLR is off for this process and
// its children (personality ADDR_NO_RANDOMIZE), so `main`, resolved once in
// a child stopped at its exec the way pfmctl resolves it, is at the same
// address in every run.
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/soft_bts_run.h"
#include "kernel/ds/ds_allocator.h"
#include "kernel/uapi/proc_maps.h"
#include "pfm/symbolizer.h"

namespace pfm::bench {
namespace {

struct Workload {
  std::string name;
  std::vector<std::string> argv;
};

// A 200 KB text of words from a fixed generator: compressible like prose.
std::string MakeGzipInput() {
  const std::string path = "/tmp/pfm-branchstep-input.txt";
  static const char* kWords[] = {"branch", "trace", "the", "of", "record", "stream",
                                 "ring", "consumer", "lossless", "history", "pfm",
                                 "sample", "counter", "and", "to", "a"};
  std::string text;
  uint64_t x = 88172645463325252ull;
  while (text.size() < 200 * 1024) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    text += kWords[x % 16];
    text += (x >> 20) % 11 == 0 ? ".\n" : " ";
  }
  text.resize(200 * 1024);
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    std::perror("branchstep: write input");
    std::exit(1);
  }
  std::fclose(f);
  return path;
}

// Wall seconds of the untraced program (fork, exec, wait).
double Untraced(const std::vector<std::string>& argv) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int Traced(const std::vector<std::string>& argv, const SoftBtsOptions& opt,
           SoftBtsRunResult* res, uint64_t* lost) {
  uint64_t ring_records = 0;
  return TraceLossless(argv, opt, "branchstep", res, &ring_records, lost);
}

// `main` of argv[0], in a child stopped at its exec (ASLR off: the same
// address in the runs that follow). 0 if it cannot be resolved.
uint64_t ResolveMain(const std::vector<std::string>& argv) {
  uint64_t addr = 0;
  BareStepResult unused;
  BareStepLoop(argv, &unused, [&](pid_t pid) {
    absl::StatusOr<std::vector<Mapping>> maps = ReadProcMaps(pid);
    char exe[PATH_MAX];
    const std::string link = "/proc/" + std::to_string(pid) + "/exe";
    const ssize_t n = readlink(link.c_str(), exe, sizeof(exe) - 1);
    if (maps.ok() && n > 0) {
      exe[n] = 0;
      absl::StatusOr<ResolvedLocation> r = ResolveLocation("main", *maps, exe);
      if (r.ok()) addr = r->addr;
      else std::fprintf(stderr, "branchstep: %s\n", std::string(r.status().message()).c_str());
    }
    return -ECANCELED;  // stop here: the child is killed
  });
  return addr;
}

std::string RealPathOf(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
}

}  // namespace
}  // namespace pfm::bench

int main(int argc, char** argv) {
  using namespace pfm;
  using namespace pfm::bench;
  std::string only;
  bool single_step = true;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::string(argv[i]) == "--no-single-step") {
      single_step = false;
    } else if (i > 0 && std::string(argv[i]) == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  const Options opt = ParseOptions(
      static_cast<int>(args.size()), args.data(),
      "branch stepping vs single-stepping on /bin/true, ls -la /usr/bin, gzip -c "
      "(200 KB), and with address filters [--only true|ls|gzip] [--no-single-step]");
  const std::vector<Workload> all = {
      {"true", {"/bin/true"}},
      {"ls", {"/bin/ls", "-la", "/usr/bin"}},
      {"gzip", {"/bin/gzip", "-c", MakeGzipInput()}},
  };
  const int pinned_cpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) - 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pinned_cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::perror("branchstep: sched_setaffinity");
    return 1;
  }
  // The programs' stdout goes to /dev/null; the JSON to the real stdout.
  const int saved_stdout = dup(1);
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  std::fflush(stdout);
  dup2(null_fd, 1);
  if (personality(PER_LINUX | ADDR_NO_RANDOMIZE) == -1) {
    std::perror("branchstep: personality(ADDR_NO_RANDOMIZE)");
    return 1;
  }
  const int reps = opt.quick ? 1 : 3;
  SoftBtsOptions single;
  single.try_singleblock = false;
  SoftBtsOptions branch = single;
  branch.branch_step = true;
  boost::json::object results;
  bool all_met = true;
  for (const Workload& w : all) {
    if (!only.empty() && only != w.name) continue;
    std::vector<double> native_s, single_bps, branch_bps, single_s, branch_s;
    SoftBtsRunResult a{}, b{};
    uint64_t lost_a = 0, lost_b = 0;
    // The filtered runs: --start main, and the program's own file.
    struct Filtered {
      std::string flag;
      SoftBtsOptions opt;
      SoftBtsRunResult res{};
      uint64_t lost = 0;
      std::vector<double> seconds;
    };
    std::vector<Filtered> filtered;
    const uint64_t main_addr = ResolveMain(w.argv);
    if (main_addr != 0) {
      Filtered f{"--start main", branch};
      f.opt.start_at = main_addr;
      filtered.push_back(f);
    }
    const std::string file = RealPathOf(w.argv[0]);
    Filtered ff{"--filter '@ " + file + "'", branch};
    ff.opt.filter_files = {file};
    filtered.push_back(ff);
    for (int r = 0; r < reps; ++r) {
      native_s.push_back(Untraced(w.argv));
      if ((single_step && Traced(w.argv, single, &a, &lost_a) != 0) ||
          Traced(w.argv, branch, &b, &lost_b) != 0) {
        std::fprintf(stderr, "branchstep: %s: tracer failed\n", w.name.c_str());
        return 1;
      }
      for (Filtered& f : filtered) {
        if (Traced(w.argv, f.opt, &f.res, &f.lost) != 0) {
          std::fprintf(stderr, "branchstep: %s %s: tracer failed\n", w.name.c_str(),
                       f.flag.c_str());
          return 1;
        }
        f.seconds.push_back(f.res.seconds);
        std::fprintf(stderr, "%s rep %d: %s %.3f s, %llu branches, %llu gaps\n", w.name.c_str(),
                     r, f.flag.c_str(), f.res.seconds, (unsigned long long)f.res.stats.branches,
                     (unsigned long long)f.res.stats.gaps);
      }
      if (single_step) single_bps.push_back(a.stats.branches / a.seconds);
      branch_bps.push_back(b.stats.branches / b.seconds);
      if (single_step) single_s.push_back(a.seconds);
      branch_s.push_back(b.seconds);
      std::fprintf(stderr,
                   "%s rep %d: untraced %.4f s | single-step %.2f s, %llu branches, %.0f/s | "
                   "branch stepping %.2f s, %llu branches, %.0f/s\n",
                   w.name.c_str(), r, native_s.back(), a.seconds,
                   (unsigned long long)a.stats.branches, single_step ? single_bps.back() : 0.0, b.seconds,
                   (unsigned long long)b.stats.branches, branch_bps.back());
    }
    const double ratio = single_step ? Median(branch_bps) / Median(single_bps) : 0;
    all_met = all_met && single_step && ratio >= 3.0;
    const double native = Median(native_s);
    const auto stops = [](const SoftBtsTracer::Stats& s) {
      return double(s.steps + s.branch_stops);
    };
    results[w.name] = boost::json::object{
        {"argv", boost::json::value_from(w.argv)},
        {"untraced_seconds_median", native},
        {"single_step",
         boost::json::object{{"branches", a.stats.branches},
                             {"steps", a.stats.steps},
                             {"traps_per_branch", stops(a.stats) / a.stats.branches},
                             {"lost", lost_a},
                             {"seconds_median", Median(single_s)},
                             {"branches_per_s_median", Median(single_bps)},
                             {"slowdown_vs_untraced", Median(single_s) / native}}},
        {"branch_stepping",
         boost::json::object{{"branches", b.stats.branches},
                             {"int3_stops", b.stats.branch_stops},
                             {"steps", b.stats.steps},
                             {"emulated", b.stats.emulated},
                             {"int3s_planted", b.stats.planted},
                             {"resyncs", b.stats.resyncs},
                             {"traps_per_branch", stops(b.stats) / b.stats.branches},
                             {"lost", lost_b},
                             {"seconds_median", Median(branch_s)},
                             {"branches_per_s_median", Median(branch_bps)},
                             {"slowdown_vs_untraced", Median(branch_s) / native}}},
        {"ratio_branches_per_s", ratio},
        {"met", ratio >= 3.0}};
    boost::json::array fl;
    for (const Filtered& f : filtered)
      fl.push_back(boost::json::object{
          {"flag", f.flag},
          {"branches", f.res.stats.branches},
          {"gaps", f.res.stats.gaps},
          {"int3_stops", f.res.stats.branch_stops},
          {"steps", f.res.stats.steps},
          {"lost", f.lost},
          {"exit_status", f.res.exit_status},
          {"seconds_median", Median(f.seconds)},
          {"slowdown_vs_untraced", Median(f.seconds) / native},
          {"speedup_vs_unfiltered_branch_stepping", Median(branch_s) / Median(f.seconds)},
          {"branches_vs_unfiltered", double(f.res.stats.branches) / b.stats.branches}});
    results[w.name].as_object()["filtered"] = std::move(fl);
    if (!single_step)
      for (const char* k : {"single_step", "ratio_branches_per_s", "met"})
        results[w.name].as_object().erase(k);
  }
  std::fflush(stdout);
  dup2(saved_stdout, 1);
  boost::json::object doc = Envelope("branchstep", opt);
  doc["repetitions"] = reps;
  doc["pinned_cpu"] = pinned_cpu;
  doc["programs"] = results;
  doc["target"] = boost::json::object{
      {"what", "branch stepping >= 3 x the single-step tracer's branches/s (medians), each program"},
      {"met", all_met}};
  PrintJson(doc);
  return 0;
}
