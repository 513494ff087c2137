/* The demo's real process: `workload [rounds] [crash]` prints the address of
 * work() and then alternates computing (a call tree with loops) and
 * sleeping; with "crash" it ends by dereferencing NULL in fault_here().
 * Statically linked so single-stepping skips the dynamic loader. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile int* volatile null_ptr = 0;

__attribute__((noinline)) long leaf(long x) { return (x * 7) ^ (x >> 3); }

__attribute__((noinline)) long work(long n) {
  long acc = 0;
  for (long i = 0; i < n; ++i) acc += (i & 1) ? leaf(i) : -leaf(i + 1);
  return acc;
}

__attribute__((noinline)) void fault_here(long v) { *null_ptr = (int)v; }

int main(int argc, char** argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 20;
  int crash = argc > 2 && strcmp(argv[2], "crash") == 0;
  printf("workload pid %d: work() at %p\n", getpid(), (void*)&work);
  fflush(stdout);
  long total = 0;
  for (long r = 0; r < rounds; ++r) {
    total += work(300 + r);  /* r: not a loop invariant (GCC would hoist a pure call) */
    usleep(20000);
  }
  if (crash) fault_here(total);
  return (int)(total & 1);
}
