// Helpers for runtime tests: a runtime per engine, and the engine list to parameterise over.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "arbor/arbor.hpp"

namespace arbor::test {

/// The engine variants to parameterise over: every engine available here, plus io_uring with
/// single-shot operations only ("uring-single"), which machines without multishot get.
inline std::vector<std::string> engine_variants() {
  auto names = io::Engine::available();
  for (std::size_t i = 0, n = names.size(); i < n; ++i)
    if (names[i] == "uring") names.push_back("uring-single");
  return names;
}

/// `o` aimed at the engine variant `engine` (a name from engine_variants()).
inline io::EngineOptions engine_options(const std::string& engine, io::EngineOptions o = {}) {
  o.kind = engine == "uring-single" ? "uring" : engine;
  o.multishot = engine != "uring-single";
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

inline std::string engine_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace arbor::test
