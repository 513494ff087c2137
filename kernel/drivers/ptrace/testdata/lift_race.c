/* Branch stepping's int3s lifted under a running thread (soft_bts_test
 * LiftedInt3sUnderARunningThreadKeepItsBranches): a worker calls leaf() in
 * a loop while the main thread calls madvise(MADV_NORMAL) on leaf's page
 * ROUNDS times. madvise changes nothing, but the tracer takes its int3s out
 * of that page before each such syscall (they may be about to change) and
 * interrupts the worker if it is running towards one of them; the worker
 * must go on exactly as it would untraced. Prints the worker's calls; exit
 * 0. Static, -O0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#define ROUNDS 3000

static volatile int stop_, started_;
static volatile uint64_t calls_;

__attribute__((noinline)) void leaf(void) { calls_ = calls_ + 1; }

static void* worker(void* arg) {
  (void)arg;
  started_ = 1;
  while (!stop_) leaf();
  return NULL;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
  while (!started_) {
  }
  void* page = (void*)((uintptr_t)&leaf & ~(uintptr_t)4095);
  for (int i = 0; i < ROUNDS; ++i)
    if (madvise(page, 4096, MADV_NORMAL) != 0) return 3;
  stop_ = 1;
  pthread_join(t, NULL);
  printf("%llu\n", (unsigned long long)calls_);
  return 0;
}
