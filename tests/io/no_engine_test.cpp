// A platform whose IO engine is still to come (Windows until the IOCP engine lands): the engine
// table is empty, and asking for an engine, or a Runtime that needs one, is a clear error value,
// never a crash. Built only where CMake compiles no engine.
#include <gtest/gtest.h>

#include "arbor/io/engine.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor::io {
namespace {

TEST(NoEngine, NoneIsBuiltOrAvailable) {
  EXPECT_TRUE(Engine::names().empty());
  EXPECT_TRUE(Engine::available().empty());
}

TEST(NoEngine, AutoIsNotSupported) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  auto engine = Engine::create(scheduler, {});
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error(), std::errc::function_not_supported);
  scheduler.stop();
}

TEST(NoEngine, ALinuxEngineIsAnUnknownName) {
  sched::Scheduler scheduler(sched::SchedulerOptions{.workers = 1});
  EngineOptions options;
  options.kind = "epoll";
  auto engine = Engine::create(scheduler, options);
  ASSERT_FALSE(engine);
  EXPECT_EQ(engine.error(), std::errc::invalid_argument);
  scheduler.stop();
}

TEST(NoEngine, ARuntimeCannotBeCreated) {
  auto runtime = Runtime::create(RuntimeOptions{});
  ASSERT_FALSE(runtime);
  EXPECT_EQ(runtime.error(), std::errc::function_not_supported);
}

}  // namespace
}  // namespace arbor::io
