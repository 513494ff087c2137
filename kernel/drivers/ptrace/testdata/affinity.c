/* CPU affinity under a tracer that binds (SoftBtsOptions::bind_cpu;
 * soft_bts_tasks_test TracedTasksShareOneCpuAndChildrenLetGoGetTheirsBack):
 * `affinity OUT` appends "parent N" to OUT, N the CPUs in its affinity,
 * then forks a child that appends "child M" the same way, waits for it
 * and exits 0. `affinity --pinned OUT`: two threads pin themselves, one
 * to the first CPU it may use, one to the second, then all three spin;
 * OUT gets "ready TID0 TID1" once both are pinned (a tracer attaches after
 * that and must give each its own affinity back). Static, -O0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
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

static volatile int pinned_;
static volatile pid_t tids_[2];

static void* Pinned(void* arg) {
  const int which = (int)(long)arg;
  cpu_set_t all, one;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof(all), &all) != 0) return NULL;
  int seen = 0;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all) && seen++ == which) CPU_SET(c, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return NULL;
  tids_[which] = gettid();
  __sync_fetch_and_add(&pinned_, 1);
  for (;;) {
  }
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--pinned") == 0) {
    pthread_t t[2];
    for (long i = 0; i < 2; ++i)
      if (pthread_create(&t[i], NULL, Pinned, (void*)i) != 0) return 2;
    while (pinned_ < 2) {
    }
    char buf[64];
    const int len = snprintf(buf, sizeof(buf), "ready %d %d\n", (int)tids_[0], (int)tids_[1]);
    const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)len) != len) return 3;
    close(fd);
    for (;;) {
    }
  }
  if (argc < 2) return 2;
  if (Say(argv[1], "parent") != 0) return 3;
  const pid_t c = fork();
  if (c < 0) return 4;
  if (c == 0) _exit(Say(argv[1], "child") == 0 ? 0 : 5);
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 6;
  return 0;
}
