// SubmitBatch: coalesces the submissions made while a completion runs into one system call.
//
// Completion-based engines submit through a shared queue (the io_uring SQ). Inside a
// SubmitBatch scope, start() only queues; when the outermost scope on the thread ends, every
// engine touched in it submits once. The engines open a scope around each completion they
// deliver, so a coroutine that resumes, writes a reply and starts the next read costs one
// io_uring_enter, not two. Outside any scope, start() submits at once.
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
