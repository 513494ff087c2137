#include "userspace/pfmd/accounting.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "libpfm-bts/units.h"

namespace pfm {

MemoryAccountant::MemoryAccountant(uint64_t limit_per_uid, uint64_t limit_total)
    : limit_per_uid_(limit_per_uid), limit_total_(limit_total) {}

std::map<uid_t, uint64_t> MemoryAccountant::Split(
    uint64_t bytes, const std::map<uid_t, int>& members) {
  std::map<uid_t, uint64_t> shares;
  if (members.empty()) return shares;
  const uint64_t k = members.size();
  uint64_t extra = bytes % k;
  for (const auto& [uid, n] : members) {  // ascending uid
    shares[uid] = bytes / k + (extra > 0 ? 1 : 0);
    if (extra > 0) --extra;
  }
  return shares;
}

uint64_t MemoryAccountant::SharesOf(uid_t uid,
                                    const std::map<PoolId, Pool>& pools) const {
  uint64_t sum = 0;
  for (const auto& [id, p] : pools) {
    auto shares = Split(p.bytes, p.members);
    if (auto it = shares.find(uid); it != shares.end()) sum += it->second;
  }
  return sum;
}

uint64_t MemoryAccountant::Charged(uid_t uid) const {
  auto it = private_.find(uid);
  return (it == private_.end() ? 0 : it->second) + SharesOf(uid, pools_);
}

std::vector<std::pair<uid_t, uint64_t>> MemoryAccountant::Charges() const {
  std::map<uid_t, uint64_t> all;
  for (const auto& [uid, b] : private_) all[uid] += b;
  for (const auto& [id, p] : pools_)
    for (const auto& [uid, share] : Split(p.bytes, p.members)) all[uid] += share;
  std::vector<std::pair<uid_t, uint64_t>> out;
  for (const auto& [uid, b] : all)
    if (b > 0) out.emplace_back(uid, b);
  return out;
}

uint64_t MemoryAccountant::Allocated() const {
  uint64_t sum = 0;
  for (const auto& [uid, b] : private_) sum += b;
  for (const auto& [id, p] : pools_) sum += p.bytes;
  return sum;
}

uint64_t MemoryAccountant::PoolBytes(PoolId pool) const {
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.bytes;
}

absl::Status MemoryAccountant::Attach(uid_t uid, uint64_t ring_bytes,
                                      PoolId pool, uint64_t pool_bytes,
                                      uint64_t pool_min,
                                      const std::string& what) {
  // Work on a copy of the pools; commit only if every check passes.
  std::map<PoolId, Pool> pools = pools_;
  uint64_t new_alloc = ring_bytes;
  if (pool != 0) {
    auto [it, created] = pools.try_emplace(pool);
    if (created) {
      it->second.bytes = pool_bytes;
      it->second.min_bytes = std::min(pool_min, pool_bytes);
      new_alloc += pool_bytes;
    }
    ++it->second.members[uid];
  }
  const uint64_t before = Charged(uid);
  auto priv = private_.find(uid);
  const uint64_t after =
      (priv == private_.end() ? 0 : priv->second) + ring_bytes + SharesOf(uid, pools);
  if (after > limit_per_uid_)
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory limit per uid: uid ", uid, " uses ", FormatSize(before), " of ",
        FormatSize(limit_per_uid_), " (--mem-limit-per-uid); ", what, " needs ",
        FormatSize(after - before), " more (ring ", FormatSize(ring_bytes),
        pool != 0 ? absl::StrCat(" + its share of the shared buffer") : "", ")"));
  if (Allocated() + new_alloc > limit_total_)
    return absl::ResourceExhaustedError(absl::StrCat(
        "daemon memory limit: ", FormatSize(Allocated()), " of ",
        FormatSize(limit_total_), " (--mem-limit-total) in use; ", what, " needs ",
        FormatSize(new_alloc), " more"));
  pools_ = std::move(pools);
  if (ring_bytes > 0) private_[uid] += ring_bytes;
  return absl::OkStatus();
}

uint64_t MemoryAccountant::Detach(uid_t uid, uint64_t ring_bytes, PoolId pool) {
  if (auto it = private_.find(uid); it != private_.end()) {
    it->second -= std::min(it->second, ring_bytes);
    if (it->second == 0) private_.erase(it);
  }
  if (pool == 0) return 0;
  auto pit = pools_.find(pool);
  if (pit == pools_.end()) return 0;
  Pool& p = pit->second;
  auto mit = p.members.find(uid);
  if (mit == p.members.end()) return 0;
  if (--mit->second > 0) return 0;  // the uid still has a consumer there
  p.members.erase(mit);
  if (p.members.empty()) {
    pools_.erase(pit);
    return 0;
  }
  // Shrink to fit: the largest size whose split keeps every remaining uid
  // within its limit, found by bisection over [min_bytes, bytes].
  auto fits = [&](uint64_t size) {
    const uint64_t saved = p.bytes;
    p.bytes = size;
    bool ok = true;
    for (const auto& [u, n] : p.members) ok &= Charged(u) <= limit_per_uid_;
    p.bytes = saved;
    return ok;
  };
  if (fits(p.bytes)) return 0;
  uint64_t lo = p.min_bytes, hi = p.bytes;
  if (!fits(lo)) {
    p.bytes = lo;  // leaving never fails: stop at the minimum
    return lo;
  }
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid; else hi = mid - 1;
  }
  p.bytes = lo;
  return lo;
}

bool MemoryAccountant::CheckInvariant(std::string* why) const {
  uint64_t charged = 0;
  for (const auto& [uid, b] : Charges()) charged += b;
  if (charged != Allocated()) {
    *why = absl::StrCat("charges ", charged, " != allocated ", Allocated());
    return false;
  }
  for (const auto& [id, p] : pools_) {
    uint64_t sum = 0;
    for (const auto& [uid, s] : Split(p.bytes, p.members)) sum += s;
    if (sum != p.bytes) {
      *why = absl::StrCat("pool ", id, " shares ", sum, " != ", p.bytes);
      return false;
    }
  }
  return true;
}

uint64_t MemoryAccountant::ShareOf(uid_t uid, PoolId pool) const {
  auto it = pools_.find(pool);
  if (it == pools_.end()) return 0;
  const std::map<uid_t, uint64_t> shares = Split(it->second.bytes, it->second.members);
  auto s = shares.find(uid);
  return s == shares.end() ? 0 : s->second;
}

void MemoryAccountant::ShrinkPool(PoolId pool, uint64_t bytes) {
  auto it = pools_.find(pool);
  if (it == pools_.end() || bytes >= it->second.bytes) return;
  it->second.bytes = bytes;
  it->second.min_bytes = std::min(it->second.min_bytes, bytes);
}

}  // namespace pfm
