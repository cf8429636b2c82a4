#include "common/engine_table.hpp"

namespace arbor::io {
namespace {

// CMake defines ARBOR_IO_<ENGINE> for each backend it builds on this platform.
constexpr const EngineEntry* kEngines[] = {
#if ARBOR_IO_URING
    &kUringEngine,
#endif
#if ARBOR_IO_EPOLL
    &kEpollEngine,
#endif
#if ARBOR_IO_KQUEUE
    &kKqueueEngine,  // after epoll: on Linux it is libkqueue, an emulation over epoll
#endif
#if ARBOR_IO_IOCP
    &kIocpEngine,
#endif
    nullptr,  // keeps the array non-empty on a platform with no engine yet
};

}  // namespace

std::span<const EngineEntry* const> engine_table() noexcept {
  return {kEngines, std::size(kEngines) - 1};
}

const EngineEntry* find_engine(std::string_view name) noexcept {
  for (const EngineEntry* e : engine_table())
    if (e->name == name) return e;
  return nullptr;
}

}  // namespace arbor::io
