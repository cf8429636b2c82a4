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
  void pass() {
    std::unique_lock lock(mutex_);
    ++arrived_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
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
  bool open_ = false;
};

}  // namespace arbor::test
