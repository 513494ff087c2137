// pfmctl: the pfm command line. Logic in cli.cc and commands.cc.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/drivers/ptrace/tracer_process.h"
#include "userspace/pfmctl/cli.h"
#include "userspace/pfmctl/connect.h"

int main(int argc, char** argv) {
  // The embedded pfmd re-executes this binary as its tracer processes.
  if (int rc = pfm::MaybeRunTracerHelper(argc, argv); rc >= 0) return rc;
  // The commands pfmctl runs get these back (SpawnStopped), not its own.
  pfm::RememberStartSignals();
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);  // copied before
  pfm::SetProcessArgv(argc, argv);                        // anything renames it
  return pfm::RunPfmctl(args, std::cout, std::cerr);
}
