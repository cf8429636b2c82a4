// Helpers for runtime tests: a runtime per engine, and the engine list to parameterise over.
#pragma once

#include <gtest/gtest.h>

#if defined(_WIN32)
// winsock2.h first: windows.h alone brings in the old winsock.h, which clashes with it.
// clang-format off
#include <winsock2.h>
#include <windows.h>
// clang-format on
#endif

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "arbor/arbor.hpp"

namespace arbor::test {

/// The engine variants to parameterise over: every engine available here polled by the
/// workers (the default), the same polled by a dedicated poller thread ("<engine>-pollers"),
/// io_uring with a ring per worker ("uring-rings"),
/// and io_uring with single-shot operations only ("uring-single"), which machines without
/// multishot get.
inline std::vector<std::string> engine_variants() {
  const auto available = io::Engine::available();
  std::vector<std::string> names = available;
  for (const auto& name : available)
    names.push_back(name + "-pollers");
  for (const auto& name : available)
    if (name == "uring") {
      names.push_back("uring-single");
      names.push_back("uring-rings");
    }
  return names;
}

/// `o` aimed at the engine variant `engine` (a name from engine_variants()).
inline io::EngineOptions engine_options(const std::string& engine, io::EngineOptions o = {}) {
  constexpr std::string_view kPollers = "-pollers";
  constexpr std::string_view kRings = "-rings";
  std::string kind = engine;
  o.io_mode = io::IoMode::workers;
  if (kind.ends_with(kPollers)) {
    kind.resize(kind.size() - kPollers.size());
    o.io_mode = io::IoMode::pollers;
  } else if (kind.ends_with(kRings)) {
    kind.resize(kind.size() - kRings.size());
    o.io_mode = io::IoMode::rings;
  }
  o.multishot = kind != "uring-single";
  o.kind = kind == "uring-single" ? "uring" : kind;
  return o;
}

/// Scheduler options for an engine variant: the rings variant needs per-worker parking.
inline sched::SchedulerOptions scheduler_options(const std::string& engine,
                                                 sched::SchedulerOptions o = {}) {
  o.per_worker_parking = engine.ends_with("-rings");
  return o;
}

/// A runtime on `engine` (a name from engine_variants()).
inline std::unique_ptr<Runtime> make_runtime(const std::string& engine, int workers = 2) {
  RuntimeOptions o;
  o.engine = engine_options(engine);
  o.scheduler.workers = workers;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt) << rt.error().message();
  return rt ? std::move(*rt) : nullptr;
}

/// Whether this Windows program runs under wine (its ntdll exports wine_get_version), for the
/// tests that skip what wine does differently from Windows and say which wine limitation it is.
inline bool under_wine() {
#if defined(_WIN32)
  const HMODULE ntdll = ::GetModuleHandleW(L"ntdll.dll");
  return ntdll != nullptr && ::GetProcAddress(ntdll, "wine_get_version") != nullptr;
#else
  return false;
#endif
}

inline std::string engine_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

/// Both ends of a TCP connection on loopback.
struct Pair {
  TcpStream client;
  TcpStream server;
};

/// A connected pair over a fresh listener on 127.0.0.1:0.
inline Task<Result<Pair>> connected_pair(Runtime& rt) {
  auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
  if (!listener) co_return listener.error();
  auto accepted = rt.spawn(listener->accept());
  auto client = co_await TcpStream::connect(rt, *listener->local_address());
  auto server = co_await std::move(accepted);
  if (!client) co_return client.error();
  if (!server) co_return server.error();
  co_return Pair{std::move(*client), std::move(*server)};
}

}  // namespace arbor::test
