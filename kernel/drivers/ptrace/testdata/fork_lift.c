/* A fork while a sibling thread's syscall makes the tracer lift int3s
 * (soft_bts_tasks_test ForkedChildrenLoseTheInt3sLiftedAfterTheirFork): a
 * worker calls leaf() in a loop (branch stepping plants int3s in leaf's
 * page), a second thread calls madvise(MADV_NORMAL) on that page in a loop
 * (the tracer takes its int3s there out before each such syscall), and the
 * main thread forks FORKS children, one after the other. Each child calls
 * leaf() and _exits 0. A child whose copy of the page still holds an int3
 * that the tracer lifted from the parent after the fork dies of SIGTRAP
 * (not followed, it runs untraced). Prints "children killed: N"; exits 0
 * when N is 0, else 1. Static, -O0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop_, started_;
static volatile uint64_t calls_;

__attribute__((noinline)) void leaf(void) {
  if (calls_ & 1)
    calls_ = calls_ + 3;
  else
    calls_ = calls_ + 1;
}

static void* worker(void* arg) {
  (void)arg;
  started_ = 1;
  while (!stop_) leaf();
  return NULL;
}

static void* lifter(void* arg) {
  void* page = (void*)((uintptr_t)&leaf & ~(uintptr_t)4095);
  (void)arg;
  while (!stop_)
    if (madvise(page, 4096, MADV_NORMAL) != 0) exit(3);
  return NULL;
}

int main(int argc, char** argv) {
  const int forks = argc > 1 ? atoi(argv[1]) : 200;
  pthread_t w, l;
  if (pthread_create(&w, NULL, worker, NULL) != 0) return 2;
  while (!started_) {
  }
  if (pthread_create(&l, NULL, lifter, NULL) != 0) return 2;
  int killed = 0;
  for (int i = 0; i < forks; ++i) {
    leaf();
    const pid_t c = fork();
    if (c < 0) return 4;
    if (c == 0) {
      for (int k = 0; k < 8; ++k) leaf();
      _exit(0);
    }
    int st = 0;
    if (waitpid(c, &st, 0) != c) return 5;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++killed;
  }
  stop_ = 1;
  pthread_join(w, NULL);
  pthread_join(l, NULL);
  printf("children killed: %d\n", killed);
  return killed == 0 ? 0 : 1;
}
