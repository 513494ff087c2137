// The kernel lock: the one lock around the arbitration core (kernel/).
//
// Rules (the Kernel facade, kernel/pfm_kernel.h, asserts them):
//   1. Every call into the Kernel (a verb or a CoreHooks hook) is made with
//      the lock held; each entry point calls AssertHeld(), in the spirit of
//      Linux's lockdep_assert_held().
//   2. The sim driver runs under the lock (SimMachine::Run is called with it
//      held, so its hooks run with it held).
//   3. Drivers that run on threads of their own (the soft-BTS tracer
//      processes' readers in pfmd) take it per report.
//   4. Nothing that waits (I/O, sleeps, process exits, other threads'
//      work) happens with it held; the kernel core never blocks. One
//      bounded exception: session creation runs single system calls
//      (perf_event_open, the ptrace access probe) on a short-lived thread
//      that holds the client's credentials (kernel/drivers/credentials.h),
//      created and joined with the lock held; it waits for nothing else.
//   5. It is a leaf: no other lock is taken while it is held, except leaf
//      locks of a single object (a tracer's stats).
//
// A std::mutex (pthreads, which ThreadSanitizer intercepts) rather than
// absl::Mutex: Debian's absl is not built with TSan, so TSan could not see
// absl's ordering and would report false races. Annotated for clang's
// -Wthread-safety (the `thread_safety` config, tools/copts.bzl) as
// absl::Mutex is. AssertHeld() checks the owner in builds without NDEBUG
// (tests); in optimized builds it only informs the analysis.
#ifndef PFM_KERNEL_KERNEL_LOCK_H_
#define PFM_KERNEL_KERNEL_LOCK_H_

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace pfm {

class ABSL_LOCKABLE KernelLock {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    m_.lock();
#ifndef NDEBUG
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
#endif
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
#ifndef NDEBUG
    owner_.store(std::thread::id(), std::memory_order_relaxed);
#endif
    m_.unlock();
  }
  // Aborts (in builds without NDEBUG) unless the calling thread holds the
  // lock.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {
#ifndef NDEBUG
    if (owner_.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      std::fputs("pfm: kernel lock not held by the calling thread\n", stderr);
      std::abort();
    }
#endif
  }

 private:
  std::mutex m_;
#ifndef NDEBUG
  std::atomic<std::thread::id> owner_{};
#endif
};

class ABSL_SCOPED_LOCKABLE KernelLockGuard {
 public:
  explicit KernelLockGuard(KernelLock* l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) {
    l_->Lock();
  }
  ~KernelLockGuard() ABSL_UNLOCK_FUNCTION() { l_->Unlock(); }
  KernelLockGuard(const KernelLockGuard&) = delete;
  KernelLockGuard& operator=(const KernelLockGuard&) = delete;

 private:
  KernelLock* l_;
};

}  // namespace pfm

#endif  // PFM_KERNEL_KERNEL_LOCK_H_
