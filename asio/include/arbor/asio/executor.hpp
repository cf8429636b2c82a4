// basic_executor: an Asio standard executor whose handlers run on an arbor Runtime's workers.
//
//   boost::asio::post(ctx.get_executor(), handler);   // queued on the workers, never inline
//   boost::asio::dispatch(ctx.get_executor(), handler); // inline if already on a worker
//
// Properties (Asio's executor properties, all queryable, requirable and preferable):
//   blocking      possibly (default): execute() runs the function at once when called on one
//                 of the runtime's workers, else queues it; never: always queues.
//   relationship  fork (default) queues on the global queue; continuation (what defer() asks
//                 for) queues on the calling worker's own deque, to run after the current item.
//   outstanding_work  tracked: the executor counts as work for Context::wait_idle() while it
//                 exists (a work guard); untracked (default) does not.
//   allocator     what a queued function's node comes from; the default recycles nodes per
//                 thread (arbor's frame pool), so a steady stream of posts does not allocate.
//   context       the arbor::asio::Context; mapping is thread.
// Ownership: a queued function is owned by its node until it runs; one that never runs (the
// runtime stops first, or the Context is gone) is destroyed without being called. Every
// queued function counts as outstanding work until it has run or been destroyed. A function
// that throws terminates the program: there is no run() call for the exception to leave by.
#pragma once

#include <boost/asio/execution.hpp>
#include <boost/asio/execution_context.hpp>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "arbor/asio/detail/context_state.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/runtime/frame_pool.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/sched/scheduler.hpp"
#include "arbor/sched/work_item.hpp"

namespace arbor::asio {

class Context;

namespace detail {

// One queued function: the node the scheduler runs or drops exactly once.
template <class F, class Allocator>
struct QueuedFunction : sched::WorkItem {
  using Alloc = typename std::allocator_traits<Allocator>::template rebind_alloc<QueuedFunction>;
  static constexpr bool kPooled = std::is_same_v<Allocator, std::allocator<void>>;

  template <class G>
  QueuedFunction(G&& g, const Allocator& a, ContextState* s)
      : sched::WorkItem(&run), function(std::forward<G>(g)), allocator(a), state(s) {}

  template <class G>
  static QueuedFunction* make(G&& g, const Allocator& a, ContextState* s) {
    if constexpr (kPooled) {
      void* memory = frame_pool::allocate(sizeof(QueuedFunction));
      try {
        return new (memory) QueuedFunction(std::forward<G>(g), a, s);
      } catch (...) {
        frame_pool::deallocate(memory, sizeof(QueuedFunction));
        throw;
      }
    } else {
      Alloc alloc(a);
      QueuedFunction* p = std::allocator_traits<Alloc>::allocate(alloc, 1);
      try {
        return new (p) QueuedFunction(std::forward<G>(g), a, s);
      } catch (...) {
        std::allocator_traits<Alloc>::deallocate(alloc, p, 1);
        throw;
      }
    }
  }

  // Asio's rule: the node's memory is released before the function is called, so the
  // function may queue the next one into the same memory.
  static void run(sched::WorkItem* self, sched::Disposition disposition) noexcept {
    auto* node = static_cast<QueuedFunction*>(self);
    ContextState* s = node->state;
    {
      F f(std::move(node->function));
      Alloc alloc(node->allocator);
      node->~QueuedFunction();
      if constexpr (kPooled)
        frame_pool::deallocate(node, sizeof(QueuedFunction));
      else
        std::allocator_traits<Alloc>::deallocate(alloc, node, 1);
      if (disposition == sched::Disposition::run && !s->closed()) {
        io::SubmitBatch batch;  // the reads and writes it starts leave in one hand-off
        std::move(f)();
      }
    }  // f destroyed here, called or not
    s->work_finished();
  }

  F function;
  Allocator allocator;
  ContextState* state;
};

enum : unsigned {
  kBlockingNever = 1,
  kContinuation = 2,
  kTracked = 4,
};

}  // namespace detail

template <class Allocator = std::allocator<void>>
class basic_executor {
 public:
  basic_executor(const basic_executor& other) noexcept
      : context_(other.context_),
        state_(other.state_),
        allocator_(other.allocator_),
        bits_(other.bits_) {
    if (bits_ & detail::kTracked) state_->work_started();
  }
  basic_executor(basic_executor&& other) noexcept
      : context_(other.context_),
        state_(other.state_),
        allocator_(std::move(other.allocator_)),
        bits_(other.bits_) {
    other.bits_ &= ~detail::kTracked;  // the work moves with it
  }
  basic_executor& operator=(basic_executor other) noexcept {
    std::swap(context_, other.context_);
    std::swap(state_, other.state_);
    std::swap(allocator_, other.allocator_);
    std::swap(bits_, other.bits_);
    return *this;
  }
  ~basic_executor() {
    if (bits_ & detail::kTracked) state_->work_finished();
  }

  // --- properties ---
  basic_executor require(boost::asio::execution::blocking_t::possibly_t) const {
    return with(bits_ & ~detail::kBlockingNever);
  }
  basic_executor require(boost::asio::execution::blocking_t::never_t) const {
    return with(bits_ | detail::kBlockingNever);
  }
  basic_executor require(boost::asio::execution::relationship_t::fork_t) const {
    return with(bits_ & ~detail::kContinuation);
  }
  basic_executor require(boost::asio::execution::relationship_t::continuation_t) const {
    return with(bits_ | detail::kContinuation);
  }
  basic_executor require(boost::asio::execution::outstanding_work_t::tracked_t) const {
    return with(bits_ | detail::kTracked);
  }
  basic_executor require(boost::asio::execution::outstanding_work_t::untracked_t) const {
    return with(bits_ & ~detail::kTracked);
  }
  template <class Other>
  basic_executor<Other> require(boost::asio::execution::allocator_t<Other> a) const {
    return basic_executor<Other>(context_, state_, a.value(), bits_);
  }
  basic_executor<std::allocator<void>> require(boost::asio::execution::allocator_t<void>) const {
    return basic_executor<std::allocator<void>>(context_, state_, {}, bits_);
  }

  static constexpr boost::asio::execution::mapping_t query(
      boost::asio::execution::mapping_t) noexcept {
    return boost::asio::execution::mapping.thread;
  }
  Context& query(boost::asio::execution::context_t) const noexcept { return *context_; }
  constexpr boost::asio::execution::blocking_t query(
      boost::asio::execution::blocking_t) const noexcept {
    return (bits_ & detail::kBlockingNever)
               ? boost::asio::execution::blocking_t(boost::asio::execution::blocking.never)
               : boost::asio::execution::blocking_t(boost::asio::execution::blocking.possibly);
  }
  constexpr boost::asio::execution::relationship_t query(
      boost::asio::execution::relationship_t) const noexcept {
    return (bits_ & detail::kContinuation)
               ? boost::asio::execution::relationship_t(
                     boost::asio::execution::relationship.continuation)
               : boost::asio::execution::relationship_t(boost::asio::execution::relationship.fork);
  }
  constexpr boost::asio::execution::outstanding_work_t query(
      boost::asio::execution::outstanding_work_t) const noexcept {
    return (bits_ & detail::kTracked) ? boost::asio::execution::outstanding_work_t(
                                            boost::asio::execution::outstanding_work.tracked)
                                      : boost::asio::execution::outstanding_work_t(
                                            boost::asio::execution::outstanding_work.untracked);
  }
  template <class Other>
  constexpr Allocator query(boost::asio::execution::allocator_t<Other>) const noexcept {
    return allocator_;
  }
  constexpr Allocator query(boost::asio::execution::allocator_t<void>) const noexcept {
    return allocator_;
  }

  /// Whether the calling thread is one of the runtime's workers.
  bool running_in_this_thread() const noexcept {
    return sched::Scheduler::current() == &state_->runtime().scheduler();
  }

  template <class F>
  void execute(F&& f) const {
    if (!(bits_ & detail::kBlockingNever) && running_in_this_thread()) {
      // The Context is gone (an operation of its that was pending then completes): the
      // function is destroyed uncalled, as a queued one would be.
      if (state_->closed()) return;
      io::SubmitBatch batch;
      std::forward<F>(f)();
      return;
    }
    using Node = detail::QueuedFunction<std::decay_t<F>, Allocator>;
    Node* node = Node::make(std::forward<F>(f), allocator_, state_);
    state_->work_started();
    // A continuation goes to this worker's own deque (it runs after the current item); the
    // rest to the global queue. A refused submit (the runtime is stopping) has already run
    // the node's drop, which destroyed the function and gave the work back.
    state_->runtime().scheduler().submit(*node, (bits_ & detail::kContinuation) != 0);
  }

  friend bool operator==(const basic_executor& a, const basic_executor& b) noexcept {
    return a.context_ == b.context_ && a.allocator_ == b.allocator_ && a.bits_ == b.bits_;
  }
  friend bool operator!=(const basic_executor& a, const basic_executor& b) noexcept {
    return !(a == b);
  }

 private:
  friend class Context;
  template <class>
  friend class basic_executor;

  basic_executor(Context* context, detail::ContextState* state, const Allocator& allocator,
                 unsigned bits) noexcept
      : context_(context), state_(state), allocator_(allocator), bits_(bits) {
    if (bits_ & detail::kTracked) state_->work_started();
  }
  basic_executor with(unsigned bits) const noexcept {
    return basic_executor(context_, state_, allocator_, bits);
  }

  Context* context_;
  detail::ContextState* state_;
  Allocator allocator_;
  unsigned bits_;
};

}  // namespace arbor::asio
