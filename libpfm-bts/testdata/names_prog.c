/* The program whose names the symbolizer resolves (libpfm-bts
 * symbolizer_test) and pfmctl puts breakpoints on (tests/names_e2e_test):
 * built by gcc -g -O0 as a dynamically linked PIE (libpfm-bts/BUILD), so a
 * name's address depends on where it is loaded, and libc is a library.
 *
 *   names_prog             prints where main and write are, runs a little
 *                          (twice() is called 5 times), exits 0
 *   names_prog wait        prints where main, write and pfm_names_work are,
 *                          then waits for a signal (a process to attach to)
 *
 * The line numbers below are read by the tests (the NAMES_LINE_* markers):
 * keep the markers on their lines. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int pfm_names_counter; /* a data symbol */

static int twice(int x) { /* NAMES_LINE_TWICE */
  return 2 * x;
}

__attribute__((noinline)) int pfm_names_work(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) /* NAMES_LINE_LOOP */
    sum += twice(i);
  /* NAMES_LINE_NO_CODE */
  pfm_names_counter = sum; /* NAMES_LINE_AFTER_NO_CODE */
  return sum;
}

int main(int argc, char** argv) {
  printf("main=%p\n", (void*)&main);
  printf("write=%p\n", (void*)&write);
  if (argc > 1 && strcmp(argv[1], "wait") == 0) {
    printf("pfm_names_work=%p\n", (void*)&pfm_names_work);
    fflush(stdout);
    pause();
  }
  fflush(stdout);
  return pfm_names_work(5) == 20 ? 0 : 1;
}
