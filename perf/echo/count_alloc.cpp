// Counts heap allocations made through operator new in the process (perf builds only), so a
// benchmark can report allocations per message. Linked into the arbor and Asio echo servers
// alike. SIGUSR1 prints "allocations <n>" to stdout (async-signal-safe: an atomic load and
// write(2)).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
std::atomic<unsigned long long> allocations{0};

void report(int) {
  char line[64];
  const unsigned long long n = allocations.load(std::memory_order_relaxed);
  // Hand-rolled formatting: snprintf is not async-signal-safe.
  char digits[24];
  int len = 0;
  unsigned long long v = n;
  do {
    digits[len++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  int pos = 0;
  for (const char* p = "allocations "; *p; ++p)
    line[pos++] = *p;
  while (len > 0)
    line[pos++] = digits[--len];
  line[pos++] = '\n';
  [[maybe_unused]] auto r = ::write(1, line, static_cast<std::size_t>(pos));
}

struct Install {
  Install() { ::signal(SIGUSR1, report); }
} install;
}  // namespace

void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  return ::operator new(size);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
