// pfmd: the pfm daemon. Flags in userspace/pfmd/config.h; logic elsewhere.
#include <iostream>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/tracer_process.h"
#include "pfm/client.h"
#include "userspace/pfmd/config.h"
#include "userspace/pfmd/server.h"

int main(int argc, char** argv) {
  // pfmd re-executes itself as its soft-BTS tracer processes.
  if (int rc = pfm::MaybeRunTracerHelper(argc, argv); rc >= 0) return rc;
  std::vector<std::string> args(argv + 1, argv + argc);
  bool help = false;
  absl::StatusOr<pfm::PfmdConfig> config = pfm::ParsePfmdFlags(args, &help);
  if (help) {
    std::cout << pfm::PfmdUsage();
    return 0;
  }
  if (!config.ok()) {
    std::cerr << "pfmd: " << pfm::StatusCodeName(config.status().code())
              << ": " << config.status().message() << "\n"
              << pfm::PfmdUsage();
    return 2;
  }
  return pfm::RunPfmd(*config);
}
