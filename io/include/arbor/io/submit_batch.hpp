// SubmitBatch: coalesces the hand-offs made while a completion runs into one.
//
// An engine whose starts are handed to another thread (io_uring's poller, which owns the ring)
// must tell that thread there is work: a wake, a system call. Inside a SubmitBatch scope the
// engine only queues the request and defers the wake; when the outermost scope on the thread
// ends, each engine touched in it flushes once. The engines open a scope around each completion
// they deliver, so a coroutine that resumes, writes a reply and starts the next read costs at
// most one wake, not two. Outside any scope, the wake happens at once.
#pragma once

namespace arbor::io {

class SubmitBatch {
 public:
  SubmitBatch() noexcept;
  ~SubmitBatch();
  SubmitBatch(const SubmitBatch&) = delete;
  SubmitBatch& operator=(const SubmitBatch&) = delete;

  /// Engine side: whether the calling thread is inside a scope; if it is, `flush(context)` is
  /// called once when the outermost scope ends.
  static bool defer(void (*flush)(void* context) noexcept, void* context) noexcept;
};

}  // namespace arbor::io
