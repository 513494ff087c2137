/* A program for following children: `forker OUT PROG` forks a child that
 * runs child_work() and exits 7, then vforks (through posix_spawn) PROG,
 * waits for both and writes "<child pid> <spawned pid> <child_work address>"
 * to OUT. Exits 0 when the children exited as expected. Statically linked. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;
static volatile uint64_t sink_;

__attribute__((noinline)) static void child_work(void) {
  for (int i = 0; i < 2000; ++i) sink_ += (uint64_t)i;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const pid_t c = fork();
  if (c < 0) return 3;
  if (c == 0) {
    child_work();
    _exit(7);
  }
  int st = 0;
  if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 7) return 4;
  pid_t s = 0;
  char* args[] = {argv[2], NULL};
  if (posix_spawn(&s, argv[2], NULL, NULL, args, environ) != 0) return 5;
  if (waitpid(s, &st, 0) != s || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 6;
  FILE* f = fopen(argv[1], "w");
  if (f == NULL) return 8;
  fprintf(f, "%d %d %lx\n", (int)c, (int)s, (unsigned long)(uintptr_t)child_work);
  fclose(f);
  return 0;
}
