// pfmctl: the pfm command line. Logic in cli.cc and commands.cc.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "kernel/drivers/ptrace/soft_bts.h"
#include "kernel/drivers/ptrace/tracer_process.h"
#include "userspace/pfmctl/cli.h"
#include "userspace/pfmctl/connect.h"
#include "userspace/pfmctl/context.h"

int main(int argc, char** argv) {
  // The embedded pfmd re-executes this binary as its tracer processes.
  if (int rc = pfm::MaybeRunTracerHelper(argc, argv); rc >= 0) return rc;
  // The commands pfmctl runs get these back (SpawnStopped), not its own.
  pfm::RememberStartSignals();
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);  // copied before
  pfm::SetProcessArgv(argc, argv);                        // anything renames it
  const int rc = pfm::RunPfmctl(args, std::cout, std::cerr);
  // Ended by a signal: die of it, as perf does, once everything is out.
  if (const int sig = pfm::ExitSignal(); sig > 0) {
    std::cout.flush();
    std::cerr.flush();
    ::signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
  }
  return rc;
}
