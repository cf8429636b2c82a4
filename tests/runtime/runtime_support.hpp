// Helpers for runtime tests: a runtime per engine, and the engine list to parameterise over.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "arbor/arbor.hpp"

namespace arbor::test {

inline std::unique_ptr<Runtime> make_runtime(const std::string& engine, int workers = 2) {
  RuntimeOptions o;
  o.engine.kind = engine;
  o.scheduler.workers = workers;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt) << rt.error().message();
  return rt ? std::move(*rt) : nullptr;
}

inline std::string engine_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace arbor::test
