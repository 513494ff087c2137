#include "bench/soft_bts_run.h"

#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "bench/bench_util.h"

namespace pfm::bench {

DsArea* DsSink::TaskArea(TaskId task) {
  std::lock_guard<std::mutex> l(mu_);
  return ds_->TaskArea(task.pid);
}

void DsSink::TaskDsInterrupt(TaskId task, int cpu, uint64_t now_ns) {
  std::lock_guard<std::mutex> l(mu_);
  ds_->DrainTask(task, cpu, now_ns);
}

bool DsSink::TaskHeld(TaskId task) {
  std::lock_guard<std::mutex> l(mu_);
  return ds_->Held(task);
}

void DsSink::ContextSwitch(int cpu, uint64_t now_ns, TaskId prev, TaskId next,
                           bool preempt) {
  std::lock_guard<std::mutex> l(mu_);
  ds_->Switch(cpu, now_ns, prev, next, preempt);
}

void DsSink::TaskExit(TaskId task, uint64_t now_ns, int64_t wait_status) {
  std::lock_guard<std::mutex> l(mu_);
  ds_->TaskExit(task, now_ns, wait_status);
  exit_status_ = wait_status;
  exited_ = true;
  exited_cv_.notify_all();
}

bool DsSink::WaitExited(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return exited_cv_.wait_for(l, timeout, [&] { return exited_; });
}

void DsSink::TaskSignaled(TaskId task, uint64_t now_ns, int signo) {
  std::lock_guard<std::mutex> l(mu_);
  ds_->TaskCrashed(task, now_ns, signo);
}

int64_t DsSink::exit_status() const {
  std::lock_guard<std::mutex> l(mu_);
  return exit_status_;
}

int AttachLosslessConsumer(DsAllocator* ds, pid_t pid, const char* who) {
  ConsumerParams p;
  p.req.ctx_kind = PFM_CTX_TASK;
  p.req.pid = pid;
  p.req.bts = PFM_BTS_LOSSLESS;
  p.req.filter = PFM_FILTER_USER;
  p.req.format = PFM_FORMAT_FIXED;
  p.req.ring_bytes = 64ull << 20;
  p.session = 1;
  ErrorDetail d;
  const int rc = ds->Attach(p, 0, &d);
  if (rc <= 0) {
    std::fprintf(stderr, "%s: attach: %s\n", who, d.message);
    return rc < 0 ? rc : -EINVAL;
  }
  return rc;
}

int TraceLossless(const std::vector<std::string>& argv, const SoftBtsOptions& opt,
                  const char* who, SoftBtsRunResult* res, uint64_t* ring_records,
                  uint64_t* lost) {
  DsAllocator ds(static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)), DsLimits{});
  ConsumerId id = 0;
  auto attach = [&](pid_t pid) {
    const int rc = AttachLosslessConsumer(&ds, pid, who);
    if (rc < 0) return rc;
    id = rc;
    return 0;
  };
  if (int rc = TraceProgram(argv, &ds, attach, res, opt); rc != 0) return rc;
  ConsumerStats st;
  ds.Stats(id, &st);
  *ring_records = st.records;
  *lost = st.lost;
  return 0;
}

int BareStepLoop(const std::vector<std::string>& argv, BareStepResult* out,
                 const std::function<int(pid_t)>& at_exec) {
  const pid_t pid = fork();
  if (pid < 0) return -errno;
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) return -ECHILD;
  if (at_exec) {
    if (int rc = at_exec(pid); rc != 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return rc;
    }
  }
  const uint64_t t0 = MonotonicNs();
  uint64_t steps = 0;
  for (;;) {
    int sig = 0;
    if (WIFSTOPPED(status) && WSTOPSIG(status) != SIGTRAP) sig = WSTOPSIG(status);
    if (ptrace(PTRACE_SINGLESTEP, pid, nullptr, reinterpret_cast<void*>(long(sig))) != 0)
      return -errno;
    if (waitpid(pid, &status, 0) != pid) return -ECHILD;
    if (WIFEXITED(status) || WIFSIGNALED(status)) break;
    ++steps;
  }
  out->seconds = (MonotonicNs() - t0) / 1e9;
  out->steps = steps;
  return 0;
}

int SpawnForTrace(const std::vector<std::string>& argv, pid_t* pid) {
  ErrorDetail d;
  if (int rc = SpawnStopped(argv, pid, &d); rc != 0) {
    std::fprintf(stderr, "SpawnStopped: %s\n", d.message);
    return rc;
  }
  return 0;
}

namespace {

// Lets a SpawnStopped child exec and leaves it stopped (SIGSTOP) at its
// program's first instruction, untraced: what pfmctl does before pfmd
// attaches when addresses of the program are given (the filter's ranges
// and the start address are the program's, not the held copy's).
int RunToExec(pid_t pid) {
  ErrorDetail d;
  int status = 0;
  int rc = ReleaseToExecStop(pid, &status, &d);
  if (rc == 0) rc = DetachStopped(pid, &status, &d);
  if (rc != 0) std::fprintf(stderr, "%s\n", d.message);
  return rc;
}

}  // namespace

int TraceSpawned(pid_t pid, DsAllocator* ds, const SoftBtsOptions& opt,
                 SoftBtsRunResult* out) {
  DsSink sink(ds);
  std::unique_ptr<SoftBtsTracer> tracer;
  ErrorDetail d;
  // Addresses of the program: attach after its exec (timed from before it).
  const bool after_exec = opt.start_at != 0 || !opt.filter_ranges.empty();
  const uint64_t t_exec = MonotonicNs();
  if (after_exec) {
    if (int rc = RunToExec(pid); rc != 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return rc;
    }
  }
  if (int rc = SoftBtsTracer::Start(pid, opt, &sink, &tracer, &d); rc != 0) {
    std::fprintf(stderr, "SoftBtsTracer::Start: %s\n", d.message);
    if (after_exec) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    } else {
      Abandon(pid, nullptr);
    }
    return rc;
  }
  const uint64_t t0 = after_exec ? t_exec : MonotonicNs();
  if (after_exec) {
    if (kill(pid, SIGCONT) != 0) {
      std::perror("SIGCONT");
      tracer->Stop();
      return -errno;
    }
  } else if (int rc = Release(pid, &d); rc != 0) {
    std::fprintf(stderr, "Release: %s\n", d.message);
    tracer->Stop();
    return rc;
  }
  // Exited() ends the trace; done() covers a tracer that stops without it.
  while (!sink.WaitExited(std::chrono::milliseconds(100)) && !tracer->done()) {
  }
  out->seconds = (MonotonicNs() - t0) / 1e9;
  tracer->Stop();
  out->stats = tracer->stats();
  out->exit_status = sink.exit_status();
  return 0;
}

}  // namespace pfm::bench
