/* A known loop for soft-BTS tests: `loop N OUT` writes "<hex address of
 * spin>\n" to OUT, then runs spin(N), whose loop takes one backward branch
 * per iteration. Statically linked so the startup before main is short. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) long spin(long n) {
  volatile long sum = 0;
  for (long i = 0; i < n; ++i) sum += i;
  return sum;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  char buf[64];
  int len = snprintf(buf, sizeof(buf), "%lx\n", (unsigned long)&spin);
  int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, buf, len) != len) return 3;
  close(fd);
  return spin(atol(argv[1])) >= 0 ? 0 : 1;
}
