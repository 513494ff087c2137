/* A program for checking computed RIPs in the soft-BTS tracer against the
 * registers: `mixed [nondet]` runs instructions whose next RIP is not
 * rip + length, or that a single-step treats specially, among ordinary
 * ones, and exits 0 when every part gave the expected result:
 *   - REP/REPNE string instructions (many iterations, and a count of 0) and
 *     the same instructions without REP;
 *   - syscalls by `syscall` and through libc;
 *   - signals delivered to handlers: SIGUSR1 sent to itself, SIGSEGV left
 *     by siglongjmp, SIGILL (ud2) skipped by editing RIP in the ucontext;
 *   - indirect calls through a table, a jump-table switch, loop/jrcxz;
 *   - MOV SS (delays the step trap by one instruction), PUSHF/POPF, CPUID,
 *     RDTSC, PAUSE, x87, SSE, AVX2 and (when the CPU has it) AVX-512;
 *   - code written at run time: mmap RW, mprotect RX, call; rewritten in
 *     place (mprotect RW, write, mprotect RX) and called again; and a
 *     writable+executable mapping.
 * Everything is deterministic unless `nondet` is given, which adds an
 * interval timer whose SIGALRMs land on arbitrary instructions and a
 * clock_gettime through the vDSO. Statically linked (short startup). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static volatile int usr1_seen, alrm_seen, ill_seen;
static sigjmp_buf segv_jmp;
static volatile int* volatile null_ptr = 0;

static void OnUsr1(int sig) { (void)sig; usr1_seen++; }
static void OnAlrm(int sig) { (void)sig; alrm_seen++; }
static void OnSegv(int sig) { (void)sig; siglongjmp(segv_jmp, 1); }
static void OnIll(int sig, siginfo_t* si, void* uc_) {
  (void)sig;
  (void)si;
  ucontext_t* uc = uc_;
  uc->uc_mcontext.gregs[REG_RIP] += 2; /* skip the ud2 */
  ill_seen++;
}

static int Strings(void) {
  char src[300], dst[300];
  for (int i = 0; i < 300; ++i) src[i] = (char)(i * 7);
  void* d = dst;
  const void* s = src;
  long n = 300;
  __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  if (memcmp(src, dst, 300) != 0) return 1;
  uint64_t q[16];
  d = q;
  n = 16;
  __asm__ volatile("rep stosq" : "+D"(d), "+c"(n) : "a"(0x1122334455667788ull) : "memory");
  if (q[15] != 0x1122334455667788ull) return 2;
  d = dst;
  n = 0; /* zero iterations: the step still ends after the instruction */
  __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(0) : "memory");
  if (dst[0] != src[0]) return 3;
  char hay[64] = "soft bts finds the x here";
  d = hay;
  n = 64;
  __asm__ volatile("repne scasb" : "+D"(d), "+c"(n) : "a"('x') : "cc", "memory");
  if ((char*)d - hay != 20) return 4; /* one past the x */
  d = dst;
  s = src;
  n = 300;
  __asm__ volatile("repe cmpsb" : "+D"(d), "+S"(s), "+c"(n) : : "cc", "memory");
  if (n != 0) return 5;
  /* Single iterations, no REP. */
  d = dst;
  s = src;
  __asm__ volatile("movsb\n\tmovsq\n\tlodsb\n\tstosb"
                   : "+D"(d), "+S"(s)
                   :
                   : "rax", "memory");
  return 0;
}

static int Syscalls(void) {
  long pid;
  __asm__ volatile("syscall" : "=a"(pid) : "a"(39L) : "rcx", "r11", "memory");
  if (pid != getpid()) return 10;
  return 0;
}

static int Signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnUsr1;
  sigaction(SIGUSR1, &sa, NULL);
  for (int i = 0; i < 3; ++i) kill(getpid(), SIGUSR1);
  if (usr1_seen != 3) return 20;
  sa.sa_handler = OnSegv;
  sigaction(SIGSEGV, &sa, NULL);
  if (sigsetjmp(segv_jmp, 1) == 0) {
    *null_ptr = 1;
    return 21;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnIll;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGILL, &sa, NULL);
  __asm__ volatile("ud2\n\tnop\n\tnop" ::: "memory");
  if (ill_seen != 1) return 22;
  return 0;
}

static int Add1(int x) { return x + 1; }
static int Twice(int x) { return x * 2; }
static int Neg(int x) { return -x; }

static int Indirect(void) {
  int (*const table[])(int) = {Add1, Twice, Neg};
  int v = 3;
  for (int i = 0; i < 9; ++i) v = table[i % 3](v);
  int acc = 0;
  for (int i = 0; i < 12; ++i) {
    switch (i % 6) { /* dense: a jump table at -O0 */
      case 0: acc += 1; break;
      case 1: acc += 3; break;
      case 2: acc ^= 5; break;
      case 3: acc -= 2; break;
      case 4: acc += 7; break;
      default: acc *= 2; break;
    }
  }
  long n = 10, count = 0;
  __asm__ volatile(
      "1: incq %1\n\t"
      "loop 1b\n\t"
      "jrcxz 2f\n\t"
      "incq %1\n"
      "2:"
      : "+c"(n), "+r"(count)
      :
      : "cc");
  if (count != 10) return 30;
  return v == 0 || acc == 0 ? 31 : 0;
}

static int Special(void) {
  unsigned short ss;
  __asm__ volatile("mov %%ss, %0\n\t"
                   "mov %0, %%ss\n\t"
                   "nop\n\t"
                   "nop"
                   : "=r"(ss));
  __asm__ volatile("pushfq\n\tpopfq\n\tpause" ::: "cc", "memory");
  unsigned a = 0, b, c = 0, d;
  __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
  unsigned lo, hi;
  __asm__ volatile("rdtsc\n\tnop" : "=a"(lo), "=d"(hi));
  double x = 2.0;
  __asm__ volatile("fldl %1\n\tfsqrt\n\tfstpl %0" : "=m"(x) : "m"(x));
  if (x < 1.41 || x > 1.42) return 40;
  float f[4] = {1, 2, 3, 4}, g[4];
  __asm__ volatile("movups %1, %%xmm0\n\taddps %%xmm0, %%xmm0\n\tmovups %%xmm0, %0"
                   : "=m"(g)
                   : "m"(f)
                   : "xmm0");
  if (g[3] != 8) return 41;
  if (__builtin_cpu_supports("avx2")) {
    int v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, w[8];
    __asm__ volatile(
        "vmovdqu %1, %%ymm1\n\t"
        "vpaddd %%ymm1, %%ymm1, %%ymm1\n\t"
        "vpshufd $0x1b, %%ymm1, %%ymm2\n\t"
        "vmovdqu %%ymm2, %0\n\t"
        "vzeroupper"
        : "=m"(w)
        : "m"(v)
        : "xmm1", "xmm2");
    if (w[0] != 8) return 42;
  }
  if (__builtin_cpu_supports("avx512f")) {
    int v[16], w[16];
    for (int i = 0; i < 16; ++i) v[i] = i;
    __asm__ volatile(
        "vmovdqu32 %1, %%zmm1\n\t"
        "vpaddd %1, %%zmm1, %%zmm1\n\t"
        "vpshufd $0x1b, %%zmm1, %%zmm2\n\t"
        "vmovdqu32 %%zmm2, %0\n\t"
        "vzeroupper"
        : "=m"(w)
        : "m"(v)
        : "xmm1", "xmm2");
    if (w[0] != 6) return 43;
  }
  return 0;
}

static int Jit(void) {
  /* mov $42,%eax; ret   then   mov $7,%eax; nop; nop; ret */
  static const unsigned char first[] = {0xB8, 42, 0, 0, 0, 0xC3};
  static const unsigned char second[] = {0xB8, 7, 0, 0, 0, 0x90, 0x90, 0xC3};
  unsigned char* code = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (code == MAP_FAILED) return 50;
  memcpy(code, first, sizeof(first));
  if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) return 51;
  if (((int (*)(void))code)() != 42) return 52;
  if (mprotect(code, 4096, PROT_READ | PROT_WRITE) != 0) return 53;
  memset(code, 0xCC, 4096);
  memcpy(code, second, sizeof(second));
  if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) return 54;
  if (((int (*)(void))code)() != 7) return 55;
  munmap(code, 4096);
  unsigned char* rwx = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (rwx == MAP_FAILED) return 56;
  memcpy(rwx, second, sizeof(second));
  if (((int (*)(void))rwx)() != 7) return 57;
  munmap(rwx, 4096);
  return 0;
}

static int NonDeterministic(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 60;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnAlrm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 2000}, {0, 2000}};
  setitimer(ITIMER_REAL, &it, NULL);
  char a[256], b[256];
  memset(a, 1, sizeof(a));
  /* Until 5 timer signals arrived, wherever they land. */
  for (long i = 0; i < 2000000 && alrm_seen < 5; ++i) {
    void* d = b;
    const void* s = a;
    long n = sizeof(a);
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  return alrm_seen >= 5 ? 0 : 61;
}

int main(int argc, char** argv) {
  int rc;
  if ((rc = Strings()) != 0) return rc;
  if ((rc = Syscalls()) != 0) return rc;
  if ((rc = Signals()) != 0) return rc;
  if ((rc = Indirect()) != 0) return rc;
  if ((rc = Special()) != 0) return rc;
  if ((rc = Jit()) != 0) return rc;
  if (argc > 1 && strcmp(argv[1], "nondet") == 0 &&
      (rc = NonDeterministic()) != 0)
    return rc;
  return 0;
}
