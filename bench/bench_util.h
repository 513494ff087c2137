// Shared helpers of the bench/ binaries: flags, timing, medians, output.
// Time is MonotonicNs() (kernel/drivers/clock.h), the clock the drivers use.
//
// Every benchmark prints exactly one JSON document on stdout (human notes go
// to stderr) and compares against a baseline measured in the same run, never
// against a fixed number of seconds. Not thread-safe; single-threaded use.
#ifndef PFM_BENCH_BENCH_UTIL_H_
#define PFM_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "kernel/drivers/clock.h"

namespace pfm::bench {

struct Options {
  bool json = false;   // --json: accepted for symmetry; stdout is always JSON
  bool quick = false;  // --quick: a few-second run
};

// Parses --json and --quick; prints usage and exits 2 on anything else.
Options ParseOptions(int argc, char** argv, const char* what);

// Median of `v` (the mean of the two middle values for an even count);
// 0 for an empty vector. Takes a copy: callers keep their order.
double Median(std::vector<double> v);
// The p-th percentile (0..100), nearest-rank; 0 for an empty vector.
double Percentile(std::vector<double> v, double p);

// The common envelope: {"benchmark", "quick", "machine", ...results}.
boost::json::object Envelope(const char* name, const Options& opt);
// Writes `doc` as one line of JSON on stdout.
void PrintJson(const boost::json::object& doc);

// Keeps the optimiser from discarding a computed value.
inline void DoNotOptimize(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

}  // namespace pfm::bench

#endif  // PFM_BENCH_BENCH_UTIL_H_
