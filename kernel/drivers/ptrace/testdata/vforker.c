/* A vfork whose child takes a while before it exits: `vforker N` vforks a
 * child that runs N iterations of a loop, then _exit(3)s; the parent, asleep
 * in the kernel until then (vfork), waits for it and exits 40 + its status.
 * A tracer stopped while the child loops must let the child run first: the
 * parent cannot stop before (soft_bts_tasks_test). Statically linked. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink_;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const long n = atol(argv[1]);
  const pid_t c = vfork();
  if (c < 0) return 4;
  if (c == 0) {
    for (long i = 0; i < n; ++i) sink_ += (uint64_t)i;
    _exit(3);
  }
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st)) return 5;
  return 40 + WEXITSTATUS(st);
}
