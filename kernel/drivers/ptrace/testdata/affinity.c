/* CPU affinity under a tracer that binds (SoftBtsOptions::bind_cpu;
 * soft_bts_tasks_test): `affinity OUT` appends "parent N R" to OUT, N the
 * CPUs in its affinity as sched_getaffinity says (what the tracer lets it
 * see) and R as /proc/thread-self/status says (the kernel's, which the
 * tracer does not touch), then forks a child that appends "child M S" the
 * same way, waits for it and exits 0. `affinity --pinned OUT`: two threads
 * pin themselves, one to the first CPU it may use, one to the second, then
 * all three spin; OUT gets "ready TID0 TID1 C0 N0 C1 N1 NM" once both are
 * pinned: each thread's first CPU and CPU count by sched_getaffinity after
 * pinning, and the main thread's count. `affinity --spin-ms MS OUT`:
 * three threads spin until the main thread, after sleeping MS milliseconds,
 * tells them to stop, and joins them; OUT gets "late L", L the
 * milliseconds from main's start to the last join beyond MS (bound with the
 * tracer, the main thread's stops, creating the threads, waking from the
 * sleep and joining, must be handled among the spinners'); exits 0.
 * `affinity --nested OUT`: a thread pins itself to the second CPU it may
 * use and creates a thread that writes "nested N C" to OUT, N the CPUs in
 * its affinity and C the first, by sched_getaffinity (it inherited its
 * creator's: 1 and that CPU); exits 0 once both are joined.
 * `affinity --nested-spin K OUT`: the same with K threads created one
 * after the other by the pinned thread, each appending its line, while the
 * main thread spins until they are all joined.
 * `affinity --exec-thread OUT`: a thread pins itself to the second CPU it
 * may use and execs this program as `affinity --report OUT` (the kernel
 * makes it the leader; the old main thread goes), which writes "exec N C R"
 * to OUT: N and C as for --nested (the exec'ing thread's: 1 and that CPU),
 * R as /proc says; exits 0. `affinity --exec-thread-spin OUT`: the same
 * while the main thread spins, and two other threads that start spinning
 * when the exec'ing thread has pinned itself. `affinity --watch OUT`:
 * asks sched_getaffinity over and over; the first answer that differs from
 * its first one is written to OUT as "saw N" (N CPUs) and it exits 1.
 * Static, -O0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* The CPUs in Cpus_allowed_list of /proc/thread-self/status ("0-3,6"). */
static int RealCount(void) {
  const int fd = open("/proc/thread-self/status", O_RDONLY);
  if (fd < 0) return -1;
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* p = strstr(buf, "Cpus_allowed_list:");
  if (p == NULL) return -1;
  p += strlen("Cpus_allowed_list:");
  int count = 0;
  while (*p != 0 && *p != '\n') {
    while (*p == ' ' || *p == '\t' || *p == ',') ++p;
    if (*p < '0' || *p > '9') break;
    const long a = strtol(p, (char**)&p, 10);
    long b = a;
    if (*p == '-') b = strtol(p + 1, (char**)&p, 10);
    count += (int)(b - a + 1);
  }
  return count;
}

static int Say(const char* path, const char* who) {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof(s), &s) != 0) return -1;
  char buf[64];
  const int len = snprintf(buf, sizeof(buf), "%s %d %d\n", who, CPU_COUNT(&s), RealCount());
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return -1;
  const int ok = write(fd, buf, (size_t)len) == len ? 0 : -1;
  close(fd);
  return ok;
}

static volatile int pinned_;
static volatile pid_t tids_[2];
static volatile int first_[2], count_[2];

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
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(0, sizeof(now), &now) != 0) return NULL;
  first_[which] = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c)
    if (CPU_ISSET(c, &now)) first_[which] = c;
  count_[which] = CPU_COUNT(&now);
  tids_[which] = gettid();
  __sync_fetch_and_add(&pinned_, 1);
  for (;;) {
  }
}

static volatile int stop_;

/* Pins the calling thread to the second CPU it may use. */
static int PinToSecond(void) {
  cpu_set_t all, one;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof(all), &all) != 0) return -1;
  int seen = 0;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all) && seen++ == 1) CPU_SET(c, &one);
  return sched_setaffinity(0, sizeof(one), &one);
}

static const char* nested_out_;
static int nested_count_ = 1;
static volatile int nested_done_;

static void* NestedChild(void* arg) {
  (void)arg;
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof(s), &s) != 0) return (void*)1;
  int first = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c)
    if (CPU_ISSET(c, &s)) first = c;
  char buf[64];
  const int len = snprintf(buf, sizeof(buf), "nested %d %d\n", CPU_COUNT(&s), first);
  const int fd = open(nested_out_, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return (void*)1;
  const int ok = write(fd, buf, (size_t)len) == len;
  close(fd);
  return ok ? NULL : (void*)1;
}

static void* NestedParent(void* arg) {
  (void)arg;
  void* rc = (void*)1;
  if (PinToSecond() != 0) goto out;
  for (int i = 0; i < nested_count_; ++i) {
    pthread_t t;
    rc = (void*)1;
    if (pthread_create(&t, NULL, NestedChild, NULL) != 0 || pthread_join(t, &rc) != 0 ||
        rc != NULL)
      goto out;
  }
out:
  nested_done_ = 1;
  return rc;
}

static int go_[2] = {-1, -1};  /* --exec-thread-spin: spinners start at a byte */

static void* ExecThread(void* arg) {
  if (PinToSecond() != 0) return (void*)1;
  if (go_[1] >= 0 && write(go_[1], "gg", 2) != 2) return (void*)1;
  execl("/proc/self/exe", "affinity", "--report", (const char*)arg, (char*)NULL);
  _exit(4);  /* the exec failed: the spinners would spin on */
}

static void* Spin(void* arg) {
  char b;
  if (arg != NULL && read(*(int*)arg, &b, 1) != 1) return NULL;
  while (!stop_) {
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--watch") == 0) {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (sched_getaffinity(0, sizeof(s), &s) != 0) return 2;
    const int first = CPU_COUNT(&s);
    for (;;) {
      CPU_ZERO(&s);
      if (sched_getaffinity(0, sizeof(s), &s) != 0) return 2;
      if (CPU_COUNT(&s) != first) break;
    }
    char buf[32];
    const int len = snprintf(buf, sizeof(buf), "saw %d\n", CPU_COUNT(&s));
    const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)len) != len) return 3;
    close(fd);
    return 1;
  }
  if (argc == 3 && (strcmp(argv[1], "--exec-thread") == 0 ||
                    strcmp(argv[1], "--exec-thread-spin") == 0)) {
    pthread_t t;
    void* rc = (void*)1;
    if (strcmp(argv[1], "--exec-thread-spin") == 0) {
      if (pipe2(go_, O_CLOEXEC) != 0) return 2;
      for (int i = 0; i < 2; ++i)
        if (pthread_create(&t, NULL, Spin, &go_[0]) != 0) return 2;
      if (pthread_create(&t, NULL, ExecThread, argv[2]) != 0) return 2;
      for (;;) {  /* until the exec ends this thread */
      }
    }
    if (pthread_create(&t, NULL, ExecThread, argv[2]) != 0) return 2;
    pthread_join(t, &rc);  /* returns only if the exec failed */
    return 3;
  }
  if (argc == 3 && strcmp(argv[1], "--report") == 0) {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (sched_getaffinity(0, sizeof(s), &s) != 0) return 2;
    int first = -1;
    for (int c = CPU_SETSIZE - 1; c >= 0; --c)
      if (CPU_ISSET(c, &s)) first = c;
    char buf[64];
    const int len = snprintf(buf, sizeof(buf), "exec %d %d %d\n", CPU_COUNT(&s), first, RealCount());
    const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)len) != len) return 3;
    close(fd);
    return 0;
  }
  if ((argc == 3 && strcmp(argv[1], "--nested") == 0) ||
      (argc == 4 && strcmp(argv[1], "--nested-spin") == 0)) {
    const int spin = argc == 4;
    nested_out_ = argv[argc - 1];
    if (spin) nested_count_ = atoi(argv[2]);
    pthread_t t;
    void* rc = (void*)1;
    if (pthread_create(&t, NULL, NestedParent, NULL) != 0) return 2;
    while (spin && !nested_done_) {
    }
    if (pthread_join(t, &rc) != 0) return 2;
    return rc == NULL ? 0 : 3;
  }
  if (argc == 4 && strcmp(argv[1], "--spin-ms") == 0) {
    const long ms = atol(argv[2]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t[3];
    for (int i = 0; i < 3; ++i)
      if (pthread_create(&t[i], NULL, Spin, NULL) != 0) return 2;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    stop_ = 1;
    for (int i = 0; i < 3; ++i) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const long late = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 - ms;
    char buf[64];
    const int len = snprintf(buf, sizeof(buf), "late %ld\n", late);
    const int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)len) != len) return 3;
    close(fd);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--pinned") == 0) {
    pthread_t t[2];
    for (long i = 0; i < 2; ++i)
      if (pthread_create(&t[i], NULL, Pinned, (void*)i) != 0) return 2;
    while (pinned_ < 2) {
    }
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof(mine), &mine) != 0) return 2;
    char buf[128];
    const int len = snprintf(buf, sizeof(buf), "ready %d %d %d %d %d %d %d\n", (int)tids_[0],
                             (int)tids_[1], first_[0], count_[0], first_[1], count_[1],
                             CPU_COUNT(&mine));
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
