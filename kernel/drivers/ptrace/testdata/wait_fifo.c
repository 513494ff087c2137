/* `wait_fifo PATH`: busy-polls the FIFO at PATH (a syscall every
 * iteration) and exits 7 once a byte can be read: lets a test show the
 * program keeps running after the tracer detaches. */
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int fd = open(argv[1], O_RDONLY | O_NONBLOCK);
  if (fd < 0) return 3;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
      char c;
      return read(fd, &c, 1) == 1 ? 7 : 8;
    }
  }
}
