/* The threaded program tests/gdb_e2e_test debugs: main starts 3 threads
 * that meet main at a barrier, then thread i (1..3) calls work(i), which
 * sets done[i] = 10 * i; main spins a while (spin: a few thousand
 * instructions while the workers run), joins them and prints the sum
 * (60). */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdio.h>

volatile int done[4];
static pthread_barrier_t barrier;

__attribute__((noinline)) int work(int i) {
  done[i] = 10 * i;
  return i;
}

__attribute__((noinline)) void spin(void) {
  static volatile int spins;
  for (int k = 0; k < 2000; k++) spins++;
}

static void* run(void* arg) {
  pthread_barrier_wait(&barrier);
  work((int)(long)arg);
  return NULL;
}

int main(void) {
  pthread_t t[3];
  pthread_barrier_init(&barrier, NULL, 4);
  for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, run, (void*)(i + 1));
  pthread_barrier_wait(&barrier);
  spin();
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("sum %d\n", done[1] + done[2] + done[3]);
  return 0;
}
