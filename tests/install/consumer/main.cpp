// A downstream program using the installed arbor: runs a task that sleeps and returns 42.
#include <arbor/arbor.hpp>
#include <chrono>
#include <cstdio>

namespace {
arbor::Task<int> answer() {
  auto slept = co_await arbor::sleep_for(std::chrono::milliseconds(1));
  co_return slept ? 42 : 1;
}
}  // namespace

int main() {
  arbor::Runtime rt;
  const int value = rt.block_on(answer());
  std::printf("%d\n", value);
  return value == 42 ? 0 : 1;
}
