// A program that asks nothing of arbor's logger: it creates a Runtime from the environment
// (ARBOR_ENGINE, ARBOR_LOG, ...), runs one task that sleeps on a timer, and destroys it. What
// it writes on stderr is what arbor itself writes for any program; log_level_test.cpp reads it.
#include <arbor/arbor.hpp>
#include <chrono>

namespace {
arbor::Task<int> sleep_once() {
  auto slept = co_await arbor::sleep_for(std::chrono::milliseconds(1));
  co_return slept ? 0 : 1;
}
}  // namespace

int main() {
  arbor::Runtime rt;
  return rt.block_on(sleep_once());
}
