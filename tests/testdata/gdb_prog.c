/* The program tests/gdb_e2e_test debugs with GDB through pfmctl gdbserver:
 * a fixed call nesting (main -> top -> middle -> leaf x3, top -> leaf) whose
 * values are known (middle(0) = 12, leaf(0) = 1). With an argument it loops
 * forever (one round per millisecond), for a debugger to attach to. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <unistd.h>

volatile int sink;

__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int middle(int x) {
  int s = 0;
  for (int i = 0; i < 3; i++) s += leaf(x + i);
  return s;
}

__attribute__((noinline)) int top(int x) { return middle(x) + leaf(x); }

int main(int argc, char** argv) {
  (void)argv;
  if (argc > 1) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;) {
      sink = top(0);
      usleep(1000);
    }
  }
  sink = top(0);
  printf("done %d\n", sink);
  return 7;
}
