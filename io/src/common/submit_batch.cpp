#include "arbor/io/submit_batch.hpp"

#include <cstddef>
#include <iterator>

namespace arbor::io {
namespace {

struct Pending {
  void (*flush)(void*) noexcept;
  void* context;
};

// Per thread: scope depth and the distinct flushes owed. A thread touches few rings (one per
// poller), so a small array searched linearly beats anything cleverer; if it ever fills, the
// newcomer is told to submit at once.
struct BatchState {
  int depth = 0;
  std::size_t count = 0;
  Pending pending[8];
};
thread_local BatchState state;

}  // namespace

SubmitBatch::SubmitBatch() noexcept {
  ++state.depth;
}

SubmitBatch::~SubmitBatch() {
  if (--state.depth != 0) return;
  // A flush may run completions (io_uring in workers mode looks into the engine, and what it
  // reaps runs here when the event pool cannot grow), so take the list first.
  while (state.count > 0) {
    const Pending p = state.pending[--state.count];
    p.flush(p.context);
  }
}

bool SubmitBatch::defer(void (*flush)(void*) noexcept, void* context) noexcept {
  if (state.depth == 0) return false;
  for (std::size_t i = 0; i < state.count; ++i)
    if (state.pending[i].context == context) return true;
  if (state.count == std::size(state.pending)) return false;
  state.pending[state.count++] = {flush, context};
  return true;
}

}  // namespace arbor::io
