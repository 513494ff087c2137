// Fair memory accounting: who pays for trace memory (DESIGN §6).
//
// Every byte of trace memory is charged to some uid, and the charges always
// sum to the bytes allocated (CheckInvariant). Two kinds of memory:
//   - private: a consumer ring, charged wholly to its owner;
//   - shared pools: a context's DS buffer (a task's, or a CPU catch-all's),
//     split equally among the distinct uids that have consumers attached,
//     and re-split whenever a uid joins or leaves. With B bytes and k uids,
//     each pays floor(B/k); the B mod k leftover bytes go one each to the
//     lowest uids, so the split is exact and deterministic.
// Joining is all-or-nothing: the ring and the joiner's new share are checked
// against the per-uid and daemon-wide limits together, and nothing changes
// on refusal. Leaving never fails: if the re-split would push a remaining uid
// over its limit, the pool shrinks to the largest size that fits every
// remaining uid (never below the pool's minimum), and the caller tells the
// pool's consumers (a RESIZED notice).
//
// Not thread-safe; the Service serialises calls.
#ifndef PFM_USERSPACE_PFMD_ACCOUNTING_H_
#define PFM_USERSPACE_PFMD_ACCOUNTING_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pfm {

using PoolId = uint64_t;

class MemoryAccountant {
 public:
  MemoryAccountant(uint64_t limit_per_uid, uint64_t limit_total);

  // Attaches a consumer of `uid` with a private ring of `ring_bytes` to pool
  // `pool` (created with `pool_bytes`, never shrinking below `pool_min`, if it
  // does not exist; pool 0 = no pool). RESOURCE_EXHAUSTED names the limit,
  // the usage and the request; nothing changes then.
  absl::Status Attach(uid_t uid, uint64_t ring_bytes, PoolId pool,
                      uint64_t pool_bytes, uint64_t pool_min,
                      const std::string& what);

  // Detaches what Attach attached. Never fails. Returns the pool's new size
  // if it had to shrink, else 0. A pool with no consumer left is freed.
  uint64_t Detach(uid_t uid, uint64_t ring_bytes, PoolId pool);

  // What `uid` pays now, and the whole table (uids with a charge only).
  uint64_t Charged(uid_t uid) const;
  std::vector<std::pair<uid_t, uint64_t>> Charges() const;
  uint64_t Allocated() const;  // rings + pools, in bytes
  uint64_t PoolBytes(PoolId pool) const;
  // The pool's buffer was reallocated smaller than its charge (whole
  // records): charge what it really is. Never grows a pool; never fails.
  void ShrinkPool(PoolId pool, uint64_t bytes);
  // What `uid` pays of `pool` now (the split above); 0 if not a member.
  uint64_t ShareOf(uid_t uid, PoolId pool) const;

  // Charges sum to Allocated(); every pool's shares sum to its size.
  bool CheckInvariant(std::string* why) const;

  uint64_t limit_per_uid() const { return limit_per_uid_; }
  uint64_t limit_total() const { return limit_total_; }

 private:
  struct Pool {
    uint64_t bytes = 0;
    uint64_t min_bytes = 0;
    std::map<uid_t, int> members;  // uid -> consumers attached
  };
  // uid -> share of pool.bytes (exact split, see above).
  static std::map<uid_t, uint64_t> Split(uint64_t bytes,
                                         const std::map<uid_t, int>& members);
  uint64_t SharesOf(uid_t uid, const std::map<PoolId, Pool>& pools) const;

  uint64_t limit_per_uid_;
  uint64_t limit_total_;
  std::map<uid_t, uint64_t> private_;  // uid -> ring bytes
  std::map<PoolId, Pool> pools_;
};

}  // namespace pfm

#endif  // PFM_USERSPACE_PFMD_ACCOUNTING_H_
