/* A multi-threaded target (tests/host_tasks_e2e_test.cc): spin_threads N [MS]
 * starts N (1..4) worker threads, each spinning in its own function
 * (spin_0 .. spin_3) and its own counter, prints "ready <pid>" once all run,
 * and then: with MS, lets them spin MS milliseconds of wall time; without,
 * until a byte or EOF arrives on stdin. The main thread only waits (in
 * nanosleep or read): its own CPU time stays near zero. Exit 0. Static, -O0,
 * symbols. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile int stop_;
static volatile uint64_t counts_[4];

#define SPIN(n)                                      \
  __attribute__((noinline)) void spin_##n(void) {    \
    for (int k = 0; k < 16; ++k) counts_[n] += k;    \
  }
SPIN(0)
SPIN(1)
SPIN(2)
SPIN(3)

static void (*const spins_[4])(void) = {spin_0, spin_1, spin_2, spin_3};

static void* worker(void* arg) {
  void (*spin)(void) = spins_[(intptr_t)arg];
  while (!stop_) spin();
  return NULL;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 1 || n > 4) return 2;
  pthread_t t[4];
  for (intptr_t i = 0; i < n; ++i)
    if (pthread_create(&t[i], NULL, worker, (void*)i) != 0) return 3;
  printf("ready %ld\n", (long)getpid());
  fflush(stdout);
  if (argc > 2) {
    const long ms = atol(argv[2]);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  } else {
    char c;
    if (read(0, &c, 1) < 0) return 4;
  }
  stop_ = 1;
  for (int i = 0; i < n; ++i) pthread_join(t[i], NULL);
  return 0;
}
