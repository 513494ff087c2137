/* Ways back into an address filter, for soft-BTS tests. `reentry N OUT`
 * writes "<lo> <hi>\n" (hex) to OUT, the bounds of the section that holds
 * the filtered functions, then runs inner(N). Each round leaves the section
 * and comes back four ways: a return (setjmp, escape), a longjmp from
 * outside into the middle of inner, a signal handler inside entered from
 * outside, and a qsort callback inside called from outside. Exit status 0
 * when the sum is the expected one. Statically linked (see BUILD). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILTERED __attribute__((noinline, section("pfm_filtered")))
extern char __start_pfm_filtered[], __stop_pfm_filtered[];

static jmp_buf env;
static volatile long handled;

FILTERED static void on_usr1(int sig) { handled += sig == SIGUSR1; }

FILTERED static int cmp(const void* a, const void* b) {
  const int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

/* Outside the filter. */
__attribute__((noinline)) static void escape(long i) {
  if (i % 3 == 1) longjmp(env, 1);
  if (i % 3 == 2) raise(SIGUSR1);
}

FILTERED static long inner(long n) {
  volatile long sum = 0;
  for (volatile long i = 0; i < n; ++i) {
    if (setjmp(env) == 0) {
      escape(i);
      sum += 1;
    } else {
      sum += 2;
    }
    int v[8] = {5, 3, 8, 1, 9, 2, 7, 4};
    qsort(v, 8, sizeof v[0], cmp);
    sum += v[0];
  }
  return sum;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 4;
  char buf[64];
  int len = snprintf(buf, sizeof(buf), "%lx %lx\n", (unsigned long)__start_pfm_filtered,
                     (unsigned long)__stop_pfm_filtered);
  int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, buf, len) != len) return 3;
  close(fd);
  const long n = atol(argv[1]);
  long want = 0;
  for (long i = 0; i < n; ++i) want += (i % 3 == 1 ? 2 : 1) + 1;
  return inner(n) == want && handled == n / 3 ? 0 : 1;
}
