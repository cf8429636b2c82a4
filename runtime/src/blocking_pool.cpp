#include "blocking_pool.hpp"

#include <algorithm>
#include <exception>
#include <system_error>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "arbor/internal/log.hpp"

namespace arbor::detail {

struct BlockingPool::State {
  explicit State(BlockingPoolOptions o) : options(o) {}
  const BlockingPoolOptions options;
  std::mutex mutex;
  std::condition_variable work;    // a job was queued for an idle thread, or the pool closed
  std::condition_variable exited;  // a thread exited
  // Everything below is guarded by `mutex`.
  BlockingJob* head = nullptr;
  BlockingJob* tail = nullptr;
  int threads = 0;   // alive, busy or idle
  int idle = 0;      // waiting for work and not yet claimed by a submit
  int notified = 0;  // claimed by a submit, not yet awake
  bool closed = false;
  std::vector<std::thread> running;   // joinable handles of live threads
  std::vector<std::thread> finished;  // threads that exited, to join (outside the lock)

  void push(BlockingJob& job) noexcept {
    job.next = nullptr;
    if (tail != nullptr)
      tail->next = &job;
    else
      head = &job;
    tail = &job;
  }
  BlockingJob* pop() noexcept {
    BlockingJob* job = head;
    if (job != nullptr) {
      head = job->next;
      if (head == nullptr) tail = nullptr;
    }
    return job;
  }
};

namespace {

// The pool whose thread this is, if any: a job may shut its own runtime down, and its thread
// must neither wait for itself to exit nor join itself.
thread_local const void* current_pool = nullptr;

// Completes a job without running it: its awaiter gets operation_canceled (ran stays false).
void drop(BlockingJob& job) noexcept {
  complete(job);
  release(job);
}

void join_all(std::vector<std::thread>& threads) noexcept {
  for (auto& t : threads)
    if (t.joinable()) t.join();
  threads.clear();
}

}  // namespace

BlockingPool::BlockingPool(BlockingPoolOptions options)
    : state_(std::make_shared<State>(options)) {}

BlockingPool::~BlockingPool() {
  shutdown(std::chrono::milliseconds(0));
}

int BlockingPool::threads() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->threads;
}

void BlockingPool::submit(BlockingJob& job) noexcept {
  State& s = *state_;
  std::vector<std::thread> reap;
  std::unique_lock lock(s.mutex);
  if (s.closed) {
    lock.unlock();
    drop(job);
    return;
  }
  s.push(job);
  if (s.idle > 0) {
    --s.idle;
    ++s.notified;
    s.work.notify_one();
  } else if (s.threads < s.options.max_threads) {
    try {
      s.running.emplace_back(&thread_main, state_);
      ++s.threads;
    } catch (const std::exception& e) {
      // No thread now. With others alive the job waits for one of them; with none it would
      // wait forever, so every queued job is completed unstarted instead.
      log::error("spawn_blocking: cannot start a pool thread: {}", e.what());
      if (s.threads == 0) {
        BlockingJob* orphans = std::exchange(s.head, nullptr);
        s.tail = nullptr;
        lock.unlock();
        while (orphans != nullptr)
          drop(*std::exchange(orphans, orphans->next));
        return;
      }
    }
  }
  reap.swap(s.finished);
  lock.unlock();
  join_all(reap);  // threads that already exited: joining them is immediate
}

void BlockingPool::thread_main(std::shared_ptr<State> state) noexcept {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), "arbor-blocking");
#endif
  State& s = *state;
  current_pool = &s;
  std::unique_lock lock(s.mutex);
  for (;;) {
    while (BlockingJob* job = s.pop()) {
      lock.unlock();
      job->run(job);
      complete(*job);  // the awaiter resumes on its workers, never here
      release(*job);
      lock.lock();
    }
    if (s.closed) break;
    ++s.idle;
    const auto deadline = std::chrono::steady_clock::now() + s.options.keep_alive;
    bool claimed = false;
    for (;;) {
      const bool timed_out = s.work.wait_until(lock, deadline) == std::cv_status::timeout;
      if (s.notified > 0) {  // a submit claimed an idle thread: it may as well be us
        --s.notified;
        claimed = true;
        break;
      }
      if (s.closed || timed_out) break;  // else a spurious wake-up: wait on
    }
    if (!claimed) {
      --s.idle;
      if (!s.closed && s.head != nullptr) continue;  // work arrived without a claim: take it
      break;
    }
  }
  --s.threads;
  // Hand our own handle to whoever joins next (a submit or shutdown). After an abandoning
  // shutdown the handles were detached and cleared: then there is nothing to hand over.
  auto self = std::find_if(s.running.begin(), s.running.end(), [](const std::thread& t) {
    return t.get_id() == std::this_thread::get_id();
  });
  if (self != s.running.end()) {
    s.finished.push_back(std::move(*self));
    s.running.erase(self);
  }
  s.exited.notify_all();
}

void BlockingPool::shutdown(std::chrono::milliseconds timeout) noexcept {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.closed && s.running.empty() && s.finished.empty()) return;
  s.closed = true;
  BlockingJob* queued = std::exchange(s.head, nullptr);
  s.tail = nullptr;
  s.work.notify_all();
  lock.unlock();
  while (queued != nullptr)
    drop(*std::exchange(queued, queued->next));
  lock.lock();
  // Called from a job (its runtime shut down from a pool thread): that thread is busy until
  // we return, so the others are all there is to wait for, and its own handle is detached (it
  // exits like an abandoned one: the state is its own to keep alive).
  const bool on_pool_thread = current_pool == &s;
  if (on_pool_thread) {
    auto self = std::find_if(s.running.begin(), s.running.end(), [](const std::thread& t) {
      return t.get_id() == std::this_thread::get_id();
    });
    if (self != s.running.end()) {
      self->detach();
      s.running.erase(self);
    }
  }
  const int self_count = on_pool_thread ? 1 : 0;
  if (!s.exited.wait_for(lock, timeout, [&] { return s.threads == self_count; })) {
    log::warn("shutdown: {} blocking job(s) still running after {} ms; abandoning them",
              s.threads - self_count, timeout.count());
    for (auto& t : s.running)
      t.detach();
    s.running.clear();
  }
  std::vector<std::thread> reap;
  reap.swap(s.finished);
  reap.insert(reap.end(), std::make_move_iterator(s.running.begin()),
              std::make_move_iterator(s.running.end()));
  s.running.clear();
  lock.unlock();
  join_all(reap);
}

}  // namespace arbor::detail
