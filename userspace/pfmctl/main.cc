// pfmctl: the pfm command line. Logic in cli.cc and commands.cc.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "userspace/pfmctl/cli.h"

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  return pfm::RunPfmctl(args, std::cout, std::cerr);
}
