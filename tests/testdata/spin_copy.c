/* A program that keeps its CPU busy without a branch for a long time:
 * `spin_copy ROUNDS` copies 32 MiB with one REP MOVSB per round (a branch
 * stepping tracer runs it natively, so the task stays on the CPU long
 * enough to be preempted there). Exits 0. Statically linked. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 40;
  const size_t n = 32u << 20;
  char* a = malloc(n);
  char* b = malloc(n);
  if (a == NULL || b == NULL) return 1;
  memset(a, 1, n);
  for (long r = 0; r < rounds; ++r) {
    void* d = b;
    const void* s = a;
    size_t c = n;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
  }
  return b[n - 1] == 1 ? 0 : 2;
}
