/* The target of `pfmctl record -t TID` (tests/host_tasks_e2e_test.cc):
 * prints "main <pid>" and "worker <tid>", then waits for one byte on stdin.
 * Then the worker runs worker_work() WORKER_ROUNDS times and exits, while
 * the main thread runs main_work() until the worker is done; then the main
 * thread waits for a second byte (or EOF) on stdin and exits 0. So the
 * worker's end comes well before the process's. Static, -O0, symbols. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WORKER_ROUNDS 200

static volatile uint64_t sink_;
static volatile int worker_done_;
static volatile int worker_started_;

__attribute__((noinline)) void worker_work(int i) {
  for (int k = 0; k < 10; ++k) sink_ += (uint64_t)(i * k);
}

__attribute__((noinline)) void main_work(void) {
  for (int k = 0; k < 10; ++k) sink_ ^= (uint64_t)k;
}

static void* worker(void* arg) {
  (void)arg;
  printf("worker %ld\n", (long)syscall(SYS_gettid));
  fflush(stdout);
  while (!worker_started_) usleep(1000);
  for (int i = 0; i < WORKER_ROUNDS; ++i) worker_work(i);
  worker_done_ = 1;
  return NULL;
}

int main(void) {
  printf("main %ld\n", (long)getpid());
  fflush(stdout);
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
  char c;
  if (read(0, &c, 1) != 1) return 3;
  worker_started_ = 1;
  while (!worker_done_) main_work();
  pthread_join(t, NULL);
  if (read(0, &c, 1) < 0) return 4;
  return 0;
}
