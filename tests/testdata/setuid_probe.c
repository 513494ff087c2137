// A small static program for the security tests (tests/security_host_e2e_test.cc).
// Installed setuid root by the test; its modes:
//   euid                 print "euid=E ruid=R" and exit 0
//   nondumpable SECONDS  make itself non-dumpable, print "ready", sleep
//   request FD JSON      print "euid=E", send JSON as one pfmd frame on FD
//                        (a socket connected before the exec), print the reply
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static int write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "euid") == 0) {
    printf("euid=%d ruid=%d\n", (int)geteuid(), (int)getuid());
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "nondumpable") == 0) {
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    printf("ready\n");
    fflush(stdout);
    sleep((unsigned)atoi(argv[2]));
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "request") == 0) {
    const int fd = atoi(argv[2]);
    printf("euid=%d\n", (int)geteuid());
    const uint32_t n = (uint32_t)strlen(argv[3]);
    unsigned char h[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >> 24};
    if (write_all(fd, h, 4) != 0 || write_all(fd, argv[3], n) != 0) return 3;
    if (read_all(fd, h, 4) != 0) return 4;
    const uint32_t m = h[0] | h[1] << 8 | h[2] << 16 | (uint32_t)h[3] << 24;
    if (m > (1u << 20)) return 5;
    char* body = malloc(m + 1);
    if (body == NULL || read_all(fd, body, m) != 0) return 6;
    body[m] = '\0';
    printf("reply=%s\n", body);
    return 0;
  }
  return 2;
}
