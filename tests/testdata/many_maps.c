/* `many_maps FILE N FORKS`: maps the first page of FILE executable N times
 * (each its own mapping: the kernel places them next to each other, every
 * one at offset 0, so none merge), then forks FORKS children that exit at
 * once (each a process with all N mappings), waits for them and exits 0.
 * The soft-BTS tracer's mapping lists of it are megabytes of JSON
 * (host_tasks_e2e_test). Statically linked. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 3;
  const long n = atol(argv[2]), forks = atol(argv[3]);
  for (long i = 0; i < n; ++i)
    if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 4;
  for (long i = 0; i < forks; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 5;
    if (pid == 0) _exit(0);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || status != 0) return 6;
  }
  return 0;
}
