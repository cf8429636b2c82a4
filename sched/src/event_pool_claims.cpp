#include "event_pool_claims.hpp"

#include <new>

#if defined(_WIN32)
#include <windows.h>
#endif

namespace arbor::sched::detail {
namespace {

// Set once the calling thread's table has been destroyed: a release() that runs later in the
// thread's teardown (another thread_local's destructor) must use the shared list, not a table
// that no longer exists. Trivially destructible, so it outlives every destructor.
constinit thread_local bool t_table_gone = false;

#if defined(_WIN32)
// Not a thread_local table: mingw-w64 keeps thread_local objects in emutls storage, which libgcc
// frees at thread exit from a winpthreads key destructor that runs before the one libstdc++
// registered for the object's destructor, so ~PoolClaimTable walked freed memory (a heap
// corruption under wine when an EventPool test's thread exited). A fiber-local slot's callback
// runs at thread exit before either of them, with the table itself as its argument.
void WINAPI delete_table(void* table) noexcept {
  delete static_cast<PoolClaimTable*>(table);
}

// The calling thread's table, or nullptr if none can be had (its claims then fail, and the
// pool's shared list serves it).
PoolClaimTable* table() noexcept {
  static const DWORD slot = ::FlsAlloc(&delete_table);
  if (slot == FLS_OUT_OF_INDEXES) return nullptr;
  if (auto* t = static_cast<PoolClaimTable*>(::FlsGetValue(slot))) return t;
  auto* t = new (std::nothrow) PoolClaimTable;
  if (t != nullptr && !::FlsSetValue(slot, t)) {
    delete t;
    return nullptr;
  }
  return t;
}
#else
PoolClaimTable* table() noexcept {
  thread_local PoolClaimTable instance;  // destroyed at thread exit: returns the caches
  return &instance;
}
#endif

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
