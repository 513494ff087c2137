/* `many_maps FILE N FORKS [attach]`: maps the first page of FILE
 * executable N times (each its own mapping: the kernel places them next to
 * each other, every one at offset 0, so none merge), then forks FORKS
 * children that exit at once (each a process with all N mappings), waits
 * for them and exits 0. With `attach`, after the mappings it writes
 * "ready\n" to stdout and waits to be traced (TracerPid in
 * /proc/self/status) before the children: for a tracer that attaches to a
 * process whose list is already made. The soft-BTS tracer's mapping lists
 * of it are megabytes of JSON (host_tasks_e2e_test). Statically linked. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int Traced(void) {
  char buf[4096];
  const int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* t = strstr(buf, "TracerPid:");
  return t != NULL && atol(t + strlen("TracerPid:")) != 0;
}

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && strcmp(argv[4], "attach") == 0)) return 2;
  const int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 3;
  const long n = atol(argv[2]), forks = atol(argv[3]);
  for (long i = 0; i < n; ++i)
    if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 4;
  if (argc == 5) {
    if (write(1, "ready\n", 6) != 6) return 7;
    while (!Traced()) usleep(1000);
  }
  for (long i = 0; i < forks; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 5;
    if (pid == 0) _exit(0);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || status != 0) return 6;
  }
  return 0;
}
