#include "bench/bench_util.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace pfm::bench {

Options ParseOptions(int argc, char** argv, const char* what) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      o.json = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      o.quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--quick]\n  %s\n", argv[0], what);
      std::exit(2);
    }
  }
  return o;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  if (rank == 0) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}

boost::json::object Envelope(const char* name, const Options& opt) {
  utsname u{};
  uname(&u);
  return boost::json::object{
      {"benchmark", name},
      {"quick", opt.quick},
      {"machine",
       boost::json::object{{"cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                           {"kernel", u.release},
                           {"arch", u.machine}}},
  };
}

void PrintJson(const boost::json::object& doc) {
  std::cout << boost::json::serialize(doc) << std::endl;
}

}  // namespace pfm::bench
