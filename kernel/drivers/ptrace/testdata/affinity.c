/* CPU affinity under a tracer that binds (SoftBtsOptions::bind_cpu;
 * soft_bts_tasks_test TracedTasksShareOneCpuAndChildrenLetGoGetTheirsBack):
 * `affinity OUT` appends "parent N" to OUT, N the CPUs in its affinity,
 * then forks a child that appends "child M" the same way, waits for it
 * and exits 0. Static, -O0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int Say(const char* path, const char* who) {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof(s), &s) != 0) return -1;
  char buf[64];
  const int len = snprintf(buf, sizeof(buf), "%s %d\n", who, CPU_COUNT(&s));
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return -1;
  const int ok = write(fd, buf, (size_t)len) == len ? 0 : -1;
  close(fd);
  return ok;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (Say(argv[1], "parent") != 0) return 3;
  const pid_t c = fork();
  if (c < 0) return 4;
  if (c == 0) _exit(Say(argv[1], "child") == 0 ? 0 : 5);
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 6;
  return 0;
}
