// ThreadGate: holds plain threads (blocking jobs, pool threads) until opened, and counts those
// that have reached it, so a test waits for "n threads are in there" instead of sleeping.
// (gate.hpp's Gate is its counterpart for tasks.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace arbor::test {

class ThreadGate {
 public:
  ThreadGate() = default;
  ThreadGate(const ThreadGate&) = delete;
  ThreadGate& operator=(const ThreadGate&) = delete;
  /// Opens the gate and waits until every thread that reached it is out of pass(): a gate
  /// declared after the runtime whose blocking job waits in it goes first, and the job, woken
  /// by open(), must not touch it after that (ASan: stack-use-after-scope in
  /// Resolve.ATimeoutEndsTheWaitWhileTheLookupWaitsForAThread). Opening it also lets a test that
  /// failed before its open() end instead of hanging.
  ~ThreadGate() {
    std::unique_lock lock(mutex_);
    open_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return left_ == arrived_; });
  }
  void pass() {
    std::unique_lock lock(mutex_);
    ++arrived_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
    ++left_;
    changed_.notify_all();  // under the lock: the destructor's wait sees it only once we unlock
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  bool wait_arrived(int n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return arrived_ >= n; });
  }
  int arrived() {
    std::lock_guard lock(mutex_);
    return arrived_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int left_ = 0;  // threads out of pass()
  bool open_ = false;
};

}  // namespace arbor::test
