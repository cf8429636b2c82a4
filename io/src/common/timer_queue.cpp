#include "common/timer_queue.hpp"

#include <chrono>
#include <limits>

namespace arbor::io {

TimerQueue::Added TimerQueue::add(Timer& timer) {
  std::lock_guard lock(mutex_);
  if (timer.cancelled || closed_) return Added::cancelled;
  heap_.push_back(&timer);
  timer.heap_index = heap_.size() - 1;
  sift_up(timer.heap_index);
  publish_earliest();
  if (timer.deadline_ns >= armed_) return Added::queued;
  armed_ = timer.deadline_ns;  // one wake per earlier deadline, not one per timer
  return Added::queued_earliest;
}

std::int64_t TimerQueue::arm() noexcept {
  std::lock_guard lock(mutex_);
  armed_ = heap_.empty() ? std::numeric_limits<std::int64_t>::max() : heap_.front()->deadline_ns;
  return armed_;
}

void TimerQueue::disarm() noexcept {
  std::lock_guard lock(mutex_);
  armed_ = std::numeric_limits<std::int64_t>::max();  // as if it slept towards no deadline
}

bool TimerQueue::cancel(Timer& timer) noexcept {
  std::lock_guard lock(mutex_);
  timer.cancelled = true;
  const std::size_t i = timer.heap_index;
  if (i == Timer::kNotQueued) return false;
  Timer* last = heap_.back();
  heap_.pop_back();
  timer.heap_index = Timer::kNotQueued;
  if (last != &timer) {
    place(i, last);
    sift_up(i);
    sift_down(last->heap_index);
  }
  publish_earliest();
  return true;
}

void TimerQueue::cancel_all(std::vector<Timer*>& out) {
  std::lock_guard lock(mutex_);
  closed_ = true;
  out.reserve(out.size() + heap_.size());
  for (Timer* t : heap_) {
    t->cancelled = true;
    t->heap_index = Timer::kNotQueued;
    out.push_back(t);
  }
  heap_.clear();
  publish_earliest();
}

std::size_t TimerQueue::pop_expired(std::int64_t now, Timer** out, std::size_t max) noexcept {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  while (n < max && !heap_.empty() && heap_.front()->deadline_ns <= now) {
    Timer* top = heap_.front();
    Timer* last = heap_.back();
    heap_.pop_back();
    top->heap_index = Timer::kNotQueued;
    if (last != top) {
      place(0, last);
      sift_down(0);
    }
    out[n++] = top;
  }
  if (n > 0) publish_earliest();
  return n;
}

std::size_t TimerQueue::size() const noexcept {
  std::lock_guard lock(mutex_);
  return heap_.size();
}

void TimerQueue::sift_up(std::size_t i) noexcept {
  Timer* t = heap_[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (heap_[parent]->deadline_ns <= t->deadline_ns) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, t);
}

void TimerQueue::sift_down(std::size_t i) noexcept {
  Timer* t = heap_[i];
  const std::size_t n = heap_.size();
  for (;;) {
    std::size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1]->deadline_ns < heap_[child]->deadline_ns) ++child;
    if (heap_[child]->deadline_ns >= t->deadline_ns) break;
    place(i, heap_[child]);
    i = child;
  }
  place(i, t);
}

}  // namespace arbor::io
