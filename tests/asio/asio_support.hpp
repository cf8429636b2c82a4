// What the Asio interop suites share: a runtime on the engine variant of the test's parameter,
// an arbor::asio::Context over it, and a connected loopback pair whose server end is wrapped in
// an arbor::asio::Stream (`stream`) and whose client end stays a plain arbor TcpStream (`peer`).
// TearDown waits for the Context to go idle, so every handler has run: none left over, none lost.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "arbor/asio/asio.hpp"
#include "runtime/runtime_support.hpp"

namespace arbor::test {

class AsioStreamFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt = make_runtime(GetParam());
    ASSERT_NE(rt, nullptr);
    ctx.emplace(*rt);
    auto pair = rt->block_on(connected_pair(*rt));
    ASSERT_TRUE(pair) << pair.error().message();
    stream.emplace(*ctx, std::move(pair->server));
    peer = std::move(pair->client);
  }
  void TearDown() override {
    stream.reset();
    peer = {};
    if (ctx) ctx->wait_idle();
    ctx.reset();
  }
  bool on_worker() const { return sched::Scheduler::current() == &rt->scheduler(); }

  std::unique_ptr<Runtime> rt;
  std::optional<asio::Context> ctx;
  std::optional<asio::Stream> stream;
  TcpStream peer;
};

}  // namespace arbor::test
