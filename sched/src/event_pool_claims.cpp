#include "event_pool_claims.hpp"

#include "arbor/sync/thread_object.hpp"

namespace arbor::sched::detail {
namespace {

// Set once the calling thread's table has been destroyed: a release() that runs later in the
// thread's teardown (another thread_local's destructor) must use the shared list, not a table
// that no longer exists. Trivially destructible, so it outlives every destructor.
constinit thread_local bool t_table_gone = false;

// The calling thread's table (destroyed at its exit: that returns the caches), or nullptr if
// none can be had (its claims then fail, and the pool's shared list serves it). Not a plain
// thread_local: see sync/thread_object.hpp for why, on Windows.
PoolClaimTable* table() noexcept {
  return sync::this_thread_object<PoolClaimTable>();
}

}  // namespace

constinit thread_local PoolClaimTable* t_pool_claims = nullptr;

PoolClaimTable::~PoolClaimTable() {
  t_pool_claims = nullptr;
  t_table_gone = true;
  for (PoolClaim& claim : claims) {
    if (claim.cache == nullptr) continue;
    // A strong reference for the flush: the pool may be destroyed meanwhile on another thread,
    // and its state then dies here, after the flush, freeing what the flush put back.
    if (std::shared_ptr<EventPool::State> state = claim.state.lock())
      state->flush_and_unclaim(*claim.cache);
  }
}

bool record_pool_claim(const std::shared_ptr<EventPool::State>& state,
                       EventPool::Cache* cache) noexcept {
  if (t_table_gone) return false;
  PoolClaimTable* t = table();
  if (t == nullptr) return false;
  for (PoolClaim& claim : t->claims) {
    // An unused entry, or the claim of a pool that is gone (whose state freed the items of the
    // cache it names: nothing to give back).
    if (claim.pool_id != 0 && !claim.state.expired()) continue;
    claim.pool_id = state->id;
    claim.cache = cache;
    claim.state = state;
    t_pool_claims = t;
    return true;
  }
  return false;
}

}  // namespace arbor::sched::detail
