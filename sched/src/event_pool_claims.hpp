// Which EventPool caches the calling thread owns: a small per-thread table of claims.
//
// Each claim names a pool by its id (never reused, so a new pool at a dead pool's address is
// never mistaken for it), points at the cache the thread owns there (nullptr: none was free),
// and holds a weak reference to the pool's state. When the thread exits, the table returns every
// cache of a pool still alive (EventPool::State::flush_and_unclaim under a strong reference, so
// the pool may be destroyed concurrently) and drops the claims of dead pools without touching
// them. The lookup on the hot path reads one trivially destructible thread_local pointer and
// compares ids; it never dereferences a pool's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "event_pool_state.hpp"

namespace arbor::sched::detail {

struct PoolClaim {
  std::uint64_t pool_id = 0;  // 0: unused entry
  EventPool::Cache* cache = nullptr;
  std::weak_ptr<EventPool::State> state;
};

struct PoolClaimTable {
  // A thread rarely uses more than one or two pools at once; claims of dead pools are reused.
  static constexpr std::size_t kClaims = 4;
  PoolClaim claims[kClaims];
  ~PoolClaimTable();
};

/// The calling thread's table, or nullptr until its first claim (and again once it is exiting).
extern constinit thread_local PoolClaimTable* t_pool_claims;

/// The claim of the calling thread for the pool `pool_id`, or nullptr if it has none.
inline PoolClaim* find_pool_claim(std::uint64_t pool_id) noexcept {
  if (PoolClaimTable* table = t_pool_claims) {
    for (PoolClaim& claim : table->claims)
      if (claim.pool_id == pool_id) return &claim;
  }
  return nullptr;
}

/// Records a claim (cache may be nullptr: "none was free, use the shared list") in the calling
/// thread's table. Returns false if the thread is exiting or its table is full of live pools; a
/// cache the caller claimed must then be given back.
bool record_pool_claim(const std::shared_ptr<EventPool::State>& state,
                       EventPool::Cache* cache) noexcept;

}  // namespace arbor::sched::detail
