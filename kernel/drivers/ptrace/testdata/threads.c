/* A program for tracing every thread: `threads OUT` starts 4 threads, each
 * running its own work function (different work: a sum, a string scan, a
 * recursion, a bit count) for a fixed number of iterations, joins them and
 * writes one line per thread to OUT: "<tid> <function start> <function
 * end>" (the end: the next of these functions in address order), and
 * "fib <start> <end>" for the recursion work_fib calls, so a tracer's test
 * can check that each tid's branches lie in its own function. Deterministic; statically linked (short startup). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ITERS 3000

static volatile uint64_t sink_;

__attribute__((noinline)) static void work_sum(void) {
  uint64_t s = 0;
  for (int i = 0; i < ITERS; ++i) s += (uint64_t)i * 3u;
  sink_ += s;
}

__attribute__((noinline)) static void work_scan(void) {
  static const char text[] = "the quick brown fox jumps over the lazy dog";
  int n = 0;
  for (int i = 0; i < ITERS / 10; ++i)
    for (const char* p = text; *p; ++p) n += *p == 'o';
  sink_ += (uint64_t)n;
}

__attribute__((noinline)) static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static void work_fib(void) { sink_ += (uint64_t)fib(15); }

__attribute__((noinline)) static void work_bits(void) {
  uint64_t n = 0;
  for (uint64_t v = 1; v < ITERS; ++v)
    for (uint64_t x = v; x; x &= x - 1) ++n;
  sink_ += n;
}

/* A marker after the work functions: bounds their code. */
__attribute__((noinline)) static void work_end(void) { sink_ += 1; }

typedef void (*work_fn)(void);
static const work_fn kWork[4] = {work_sum, work_scan, work_fib, work_bits};
static pid_t tids_[4];

static void* run(void* arg) {
  const int i = (int)(intptr_t)arg;
  tids_[i] = (pid_t)syscall(SYS_gettid);
  kWork[i]();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  pthread_t th[4];
  for (int i = 0; i < 4; ++i)
    if (pthread_create(&th[i], NULL, run, (void*)(intptr_t)i) != 0) return 3;
  for (int i = 0; i < 4; ++i) pthread_join(th[i], NULL);
  work_end();
  FILE* f = fopen(argv[1], "w");
  if (f == NULL) return 4;
  /* Every function's end is the next function's start. */
  const uintptr_t all[7] = {(uintptr_t)work_sum, (uintptr_t)work_scan, (uintptr_t)fib,
                            (uintptr_t)work_fib, (uintptr_t)work_bits, (uintptr_t)work_end,
                            (uintptr_t)run};
  uintptr_t end[7];
  for (int i = 0; i < 7; ++i) {
    end[i] = UINTPTR_MAX;
    for (int j = 0; j < 7; ++j)
      if (all[j] > all[i] && all[j] < end[i]) end[i] = all[j];
    if (end[i] == UINTPTR_MAX) end[i] = all[i] + 0x100;
  }
  const int slot[4] = {0, 1, 3, 4}; /* kWork[i] in all[] */
  for (int i = 0; i < 4; ++i)
    fprintf(f, "%d %lx %lx\n", (int)tids_[i], (unsigned long)all[slot[i]],
            (unsigned long)end[slot[i]]);
  fprintf(f, "fib %lx %lx\n", (unsigned long)all[2], (unsigned long)end[2]);
  fclose(f);
  return 0;
}
