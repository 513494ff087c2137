/* Crashes with SIGSEGV in crash_here() after writing "<hex address of
 * crash_here>\n" to argv[1]. Statically linked to keep startup short. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

volatile int* volatile null_ptr = 0;

__attribute__((noinline)) void crash_here(void) { *null_ptr = 42; }

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  char buf[64];
  int len = snprintf(buf, sizeof(buf), "%lx\n", (unsigned long)&crash_here);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, buf, len) != len) return 3;
  close(fd);
  crash_here();
  return 0;
}
