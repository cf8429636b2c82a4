// Buffered streams over real TCP connections on 127.0.0.1, on every engine variant: lines and
// frames across the kernel's own splits, a timeout in the middle of a line that loses nothing,
// the end of stream inside a line, and copy_bidirectional's half-close both ways. Every
// connection is made and closed by its test; synchronisation is by the data itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "arbor/arbor.hpp"
#include "runtime_support.hpp"
#include "scripted_stream.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using test::as_bytes;
using test::as_string;

using test::connected_pair;
using test::Pair;

class BufferedTcp : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  template <class T>
  T run(Task<T> task) {
    return rt_->block_on(std::move(task));
  }
  std::unique_ptr<Runtime> rt_;
};

std::string line_number(int i) {
  return "line " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 37), '.');
}

// Writes `count` lines through a small BufferedWriter (many flushes, lines split across them),
// then ends the stream.
Task<bool> write_lines(TcpStream& out, int count) {
  BufferedWriter writer(out, 100);
  for (int i = 0; i < count; ++i)
    if (!co_await write_line(writer, line_number(i), i % 2 ? "\r\n" : "\n")) co_return false;
  if (!co_await writer.flush()) co_return false;
  co_return out.shutdown_write().has_value();
}

TEST_P(BufferedTcp, ManyLinesArriveWholeWhateverTheKernelSplits) {
  constexpr int kLines = 3000;
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    auto writer = rt.spawn(write_lines(pair->client, kLines));
    BufferedReader reader(pair->server, 256);
    int i = 0;
    std::string failure;
    for (;; ++i) {
      auto line = co_await reader.read_line();
      if (!line) {
        if (line.error() != Errc::end_of_stream) failure = line.error().message();
        break;
      }
      if (*line != line_number(i)) {
        failure = "line " + std::to_string(i) + ": " + std::string(*line);
        break;
      }
    }
    if (!co_await std::move(writer)) co_return "writer failed";
    if (!failure.empty()) co_return failure;
    co_return i == kLines ? "ok" : "lines: " + std::to_string(i);
  };
  EXPECT_EQ(run(body(*rt_)), "ok");
}

TEST_P(BufferedTcp, ATimeoutInTheMiddleOfALineLosesNothing) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    BufferedReader reader(pair->server);
    if (!co_await pair->client.write_all(as_bytes("half a"))) co_return "write";
    auto some = co_await reader.fill();  // the first bytes are in before the timed read
    if (!some || some->empty()) co_return "fill";
    auto cut = co_await with_timeout(20ms, reader.read_line());
    if (cut || cut.error() != std::errc::timed_out) co_return "not timed_out";
    if (!as_string(reader.buffered()).starts_with(as_string(*some)))
      co_return "buffered bytes lost";
    if (!co_await pair->client.write_all(as_bytes(" line\r\n"))) co_return "write rest";
    auto line = co_await reader.read_line();
    co_return line ? std::string(*line) : line.error().message();
  };
  EXPECT_EQ(run(body(*rt_)), "half a line");
}

TEST_P(BufferedTcp, EndOfStreamInsideALineIsReportedApartFromACleanEnd) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    if (!co_await pair->client.write_all(as_bytes("one\npartial"))) co_return "write";
    if (!pair->client.shutdown_write()) co_return "shutdown";
    BufferedReader reader(pair->server);
    auto one = co_await reader.read_line();
    if (!one || *one != "one") co_return "first line";
    auto partial = co_await reader.read_line();
    if (partial || partial.error() != Errc::incomplete_frame) co_return "not incomplete_frame";
    co_return as_string(reader.buffered());
  };
  EXPECT_EQ(run(body(*rt_)), "partial");
}

Task<bool> write_frames(TcpStream& out) {
  BufferedWriter writer(out, 64);
  const std::string big(1000, 'B');
  for (std::string_view p :
       {std::string_view("small"), std::string_view(big), std::string_view("after the big one")})
    if (!co_await write_frame(writer, as_bytes(p))) co_return false;
  if (!co_await writer.flush()) co_return false;
  co_return out.shutdown_write().has_value();
}

TEST_P(BufferedTcp, FramesOverTheMaximumFailCleanlyAndTheNextOnesStillRead) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto pair = co_await connected_pair(rt);
    if (!pair) co_return "pair: " + pair.error().message();
    auto writer = rt.spawn(write_frames(pair->client));
    BufferedReader reader(pair->server, 128);
    std::string seen;
    for (;;) {
      auto frame = co_await read_frame(reader, 100);
      if (frame) {
        seen += as_string(*frame) + "|";
        continue;
      }
      if (frame.error() != Errc::frame_too_long) {
        if (frame.error() != Errc::end_of_stream) seen += frame.error().message();
        break;
      }
      // Over the maximum: its header is still first; skip it and its 1000 bytes.
      seen += "<too long>|";
      reader.consume(kFrameHeaderBytes);
      std::vector<std::byte> skip(1000);
      if (!co_await reader.read_exact(skip)) co_return "skip";
    }
    if (!co_await std::move(writer)) co_return "writer failed";
    co_return seen;
  };
  EXPECT_EQ(run(body(*rt_)), "small|<too long>|after the big one|");
}

// Reads `stream` to its end.
Task<Result<std::string>> read_to_end(TcpStream& stream) {
  std::string all;
  std::byte buffer[256];
  for (;;) {
    auto n = co_await stream.read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return all;
    all += as_string(std::span<const std::byte>(buffer, *n));
  }
}

TEST_P(BufferedTcp, CopyBidirectionalPassesEachEndOnAndCountsBothWays) {
  // x <-> p1 ==copy_bidirectional== p2 <-> y
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto left = co_await connected_pair(rt);
    auto right = co_await connected_pair(rt);
    if (!left || !right) co_return "pairs";
    TcpStream& x = left->client;
    TcpStream& y = right->server;
    auto relay = rt.spawn(copy_bidirectional(left->server, right->client, 64));
    // x says its piece and ends its side; y must see the end (the relay's half-close) while
    // its own side is still open, and then answers through the same relay.
    const std::string request(1000, 'q');
    if (!co_await x.write_all(as_bytes(request))) co_return "x write";
    if (!x.shutdown_write()) co_return "x shutdown";
    auto at_y = co_await read_to_end(y);
    if (!at_y || *at_y != request) co_return "y read";
    if (!co_await y.write_all(as_bytes("the answer"))) co_return "y write";
    if (!y.shutdown_write()) co_return "y shutdown";
    auto at_x = co_await read_to_end(x);
    if (!at_x || *at_x != "the answer") co_return "x read";
    auto counts = co_await std::move(relay);
    if (!counts) co_return "relay: " + counts.error().message();
    co_return std::to_string(counts->a_to_b) + " " + std::to_string(counts->b_to_a);
  };
  EXPECT_EQ(run(body(*rt_)), "1000 10");
}

TEST_P(BufferedTcp, CopyBidirectionalEndsWithItsCallersTimeout) {
  auto body = [](Runtime& rt) -> Task<std::string> {
    auto left = co_await connected_pair(rt);
    auto right = co_await connected_pair(rt);
    if (!left || !right) co_return "pairs";
    auto quiet = co_await with_timeout(20ms, copy_bidirectional(left->server, right->client));
    co_return quiet ? "no timeout" : quiet.error().message();
  };
  EXPECT_EQ(run(body(*rt_)), std::make_error_code(std::errc::timed_out).message());
}

INSTANTIATE_TEST_SUITE_P(Engines, BufferedTcp, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
