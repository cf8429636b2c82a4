// BufferedReader, BufferedWriter and the framing helpers over a scripted in-memory stream,
// which decides exactly where each read splits: every offset of a line or frame, delimiters on
// the buffer's boundary, limits, the two kinds of end of stream. The socket-level behaviour
// (timeouts, half-close, every engine) is buffered_tcp_test.cpp's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "arbor/arbor.hpp"
#include "runtime_support.hpp"
#include "scripted_stream.hpp"

namespace arbor {
namespace {

using test::as_bytes;
using test::as_string;
using test::ScriptedStream;

class BufferedScripted : public ::testing::Test {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(test::engine_variants().front(), 1);
    ASSERT_TRUE(rt_);
  }
  template <class T>
  T run(Task<T> task) {
    return rt_->block_on(std::move(task));
  }
  std::unique_ptr<Runtime> rt_;
};

// Every line read_line gives until it fails, then the failure's name ("<eos>", "<incomplete>",
// "<too long>" or the message).
Task<std::vector<std::string>> all_lines(
    BufferedReader<ScriptedStream>& reader,
    std::size_t max = BufferedReader<ScriptedStream>::kNoLimit) {
  std::vector<std::string> lines;
  for (;;) {
    auto line = co_await reader.read_line(max);
    if (line) {
      lines.emplace_back(*line);
      continue;
    }
    if (line.error() == Errc::end_of_stream)
      lines.emplace_back("<eos>");
    else if (line.error() == Errc::incomplete_frame)
      lines.emplace_back("<incomplete>");
    else if (line.error() == Errc::frame_too_long)
      lines.emplace_back("<too long>");
    else
      lines.emplace_back(line.error().message());
    co_return lines;
  }
}

using Lines = std::vector<std::string>;

TEST_F(BufferedScripted, LinesSplitAcrossReadsAtEveryOffset) {
  const std::string text = "alpha\nbeta\r\n\ngamma delta\n";
  const Lines expected = {"alpha", "beta", "", "gamma delta", "<eos>"};
  for (std::size_t i = 0; i <= text.size(); ++i)
    for (std::size_t j = i; j <= text.size(); ++j) {
      auto stream = ScriptedStream::split(text, {i, j});
      BufferedReader reader(stream, 64);
      EXPECT_EQ(run(all_lines(reader)), expected) << "cuts at " << i << " and " << j;
    }
  for (std::size_t size = 1; size <= text.size(); ++size) {  // every read the same size
    std::vector<std::size_t> cuts;
    for (std::size_t at = size; at < text.size(); at += size)
      cuts.push_back(at);
    auto stream = ScriptedStream::split(text, cuts);
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_lines(reader)), expected) << "reads of " << size;
  }
}

TEST_F(BufferedScripted, DelimiterOnTheBufferBoundary) {
  // Capacity 8: each 8-byte line fills the buffer exactly, its '\n' the buffer's last byte;
  // after a short line, the next one is moved to the front to fit.
  const std::string text = "1234567\nabcdefg\nxy\nABCDEFG\n";
  const Lines expected = {"1234567", "abcdefg", "xy", "ABCDEFG", "<eos>"};
  for (std::size_t size = 1; size <= text.size(); ++size) {
    std::vector<std::size_t> cuts;
    for (std::size_t at = size; at < text.size(); at += size)
      cuts.push_back(at);
    auto stream = ScriptedStream::split(text, cuts);
    BufferedReader reader(stream, 8);
    EXPECT_EQ(run(all_lines(reader)), expected) << "reads of " << size;
  }
}

TEST_F(BufferedScripted, ALineLongerThanTheBufferFailsAndTheRestStaysReadable) {
  const std::string longer(40, 'x');
  auto stream = ScriptedStream::split(longer + "\nok\n", {7, 30});
  BufferedReader reader(stream, 16);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto line = co_await r.read_line();
    if (line || line.error() != Errc::frame_too_long) co_return "not frame_too_long";
    if (as_string(r.buffered()) != std::string(16, 'x')) co_return "lost buffered bytes";
    auto again = co_await r.read_line();  // fails the same way: nothing moved
    if (again || again.error() != Errc::frame_too_long) co_return "second try differs";
    auto skipped = co_await r.skip_until('\n');
    if (!skipped || *skipped != 41) co_return "skip_until";
    auto ok = co_await r.read_line();
    co_return ok ? std::string(*ok) : "after: " + ok.error().message();
  };
  EXPECT_EQ(run(body(reader)), "ok");
}

TEST_F(BufferedScripted, AMaximumBelowTheCapacityIsEnforcedAndConsumesNothing) {
  auto stream = ScriptedStream::split("toolong\nok\n", {3});
  BufferedReader reader(stream, 64);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto line = co_await r.read_line(5);  // "toolong\n" is 8 bytes with its ending
    if (line || line.error() != Errc::frame_too_long) co_return "not frame_too_long";
    // The bytes are all still there, for fill/consume or a larger limit.
    auto peek = co_await r.fill();
    if (!peek || !as_string(*peek).starts_with("toolo")) co_return "peek";
    auto same = co_await r.read_line(8);
    if (!same || *same != "toolong") co_return "with a larger limit";
    auto ok = co_await r.read_line(3);  // "ok\n": exactly the limit
    co_return ok ? std::string(*ok) : ok.error().message();
  };
  EXPECT_EQ(run(body(reader)), "ok");
}

TEST_F(BufferedScripted, EndOfStreamMidLineIsNotACleanEnd) {
  {
    auto stream = ScriptedStream::split("one\npart", {2, 6});
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_lines(reader)), (Lines{"one", "<incomplete>"}));
    EXPECT_EQ(as_string(reader.buffered()), "part");  // the partial line stays readable
  }
  {
    auto stream = ScriptedStream::split("one\n", {});
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_lines(reader)), (Lines{"one", "<eos>"}));
  }
  {
    ScriptedStream stream;  // nothing at all
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_lines(reader)), (Lines{"<eos>"}));
  }
}

TEST_F(BufferedScripted, ReadLineStripsCrLfAndLfButKeepsOtherCarriageReturns) {
  const std::string text = "a\r\nb\nc\r\r\n\r\nx\ry\n\r";
  const Lines expected = {"a", "b", "c\r", "", "x\ry", "<incomplete>"};
  for (std::size_t i = 0; i <= text.size(); ++i) {  // CR and LF split apart too
    auto stream = ScriptedStream::split(text, {i});
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_lines(reader)), expected) << "cut at " << i;
  }
}

TEST_F(BufferedScripted, ALineAwaitableIsLazyAndTheFastPathMakesNoTask) {
  auto stream = ScriptedStream::split("one\ntwo\nthree\n", {});
  BufferedReader reader(stream, 64);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto first = co_await r.read_line();  // one read of the stream, all three lines in
    if (!first || *first != "one") co_return "first";
    { auto dropped = r.read_line(); }  // made, never awaited: consumes nothing
    auto pending = r.read_line();
    auto second = co_await std::move(pending);  // awaited later: reads then, from the buffer
    if (!second || *second != "two") co_return "second";
    auto third = co_await r.read_line();
    if (!third || *third != "three" || r.stream().reads != 1) co_return "third";
    co_return "ok";
  };
  EXPECT_EQ(run(body(reader)), "ok");
}

TEST_F(BufferedScripted, AStreamErrorKeepsWhatWasBuffered) {
  auto stream = ScriptedStream::split("par", {});
  stream.error = std::make_error_code(std::errc::connection_reset);
  BufferedReader reader(stream, 64);
  auto read = [](BufferedReader<ScriptedStream>& r) -> Task<Result<std::string_view>> {
    co_return co_await r.read_line();
  };
  auto line = run(read(reader));
  ASSERT_FALSE(line);
  EXPECT_EQ(line.error(), std::errc::connection_reset);
  EXPECT_EQ(as_string(reader.buffered()), "par");
}

TEST_F(BufferedScripted, FillPeeksAndConsumeDrops) {
  auto stream = ScriptedStream::split("hello world", {5});
  BufferedReader reader(stream, 64);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto first = co_await r.fill();  // one read: "hello"
    if (!first || as_string(*first) != "hello") co_return "fill";
    auto same = co_await r.fill();  // bytes buffered: no read
    if (!same || same->size() != 5 || r.stream().reads != 1) co_return "fill read again";
    r.consume(2);
    auto more = co_await r.fill(9);  // "llo" + " world"
    if (!more || as_string(*more) != "llo world") co_return "fill(n)";
    r.consume(9);
    auto end = co_await r.fill();
    if (!end || !end->empty()) co_return "fill at the end";
    auto past = co_await r.fill(1);
    if (past || past.error() != Errc::end_of_stream) co_return "fill(1) at the end";
    auto huge = co_await r.fill(65);
    co_return huge.error() == Errc::frame_too_long ? "ok" : "fill beyond the capacity";
  };
  EXPECT_EQ(run(body(reader)), "ok");
}

TEST_F(BufferedScripted, ReadSomeAndReadExactTakeTheBufferFirstAndLargeReadsBypassIt) {
  auto stream = ScriptedStream::split("head\n" + std::string(100, 'b'), {});
  BufferedReader reader(stream, 16);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto head = co_await r.read_line();
    if (!head || *head != "head") co_return "head";
    std::byte out[64];
    auto n = co_await r.read_some(out);  // what the buffer has: 11 bytes after the line
    if (!n || *n != 11) co_return "read_some took " + std::to_string(n ? *n : 0);
    auto direct = co_await r.read_some(out);  // empty buffer, large read: straight through
    if (!direct || *direct != 64 || r.stream().last_read_size != 64) co_return "no bypass";
    std::byte rest[25];
    if (!co_await r.read_exact(rest)) co_return "read_exact";
    auto end = co_await r.read_exact(std::span<std::byte>(out, 1));
    co_return end.error() == Errc::end_of_stream ? "ok" : "end";
  };
  EXPECT_EQ(run(body(reader)), "ok");
}

TEST_F(BufferedScripted, WriterGathersSmallWritesAndSendsLargeOnesDirectly) {
  ScriptedStream stream;
  BufferedWriter writer(stream, 16);
  auto body = [](BufferedWriter<ScriptedStream>& w) -> Task<std::string> {
    for (const char* s : {"abc", "def", "ghi"})
      if (!co_await w.write(s)) co_return "write";
    if (!w.stream().writes.empty() || w.buffered() != 9) co_return "sent too early";
    if (!co_await w.write("0123456789")) co_return "overflow";  // does not fit: flush, buffer
    if (w.stream().writes != std::vector<std::string>{"abcdefghi"}) co_return "first flush";
    const std::string big(40, 'L');
    if (!co_await w.write(big)) co_return "large";  // buffered bytes first, then the write
    if (w.stream().written() != "abcdefghi0123456789" + big || w.buffered() != 0)
      co_return "large write order";
    if (!co_await write_line(w, "end", "\r\n")) co_return "write_line";
    if (!co_await w.flush()) co_return "flush";
    co_return w.stream().written() == "abcdefghi0123456789" + big + "end\r\n" ? "ok" : "final";
  };
  EXPECT_EQ(run(body(writer)), "ok");
}

TEST_F(BufferedScripted, WriterSurvivesShortWritesAndKeepsUnsentBytesOnError) {
  ScriptedStream stream;
  stream.write_limit = 3;
  BufferedWriter writer(stream, 8);
  auto body = [](BufferedWriter<ScriptedStream>& w) -> Task<std::string> {
    const std::vector<std::string> parts = {"hello ", "short ", "writes", std::string(20, 'z')};
    for (const auto& part : parts)
      if (!co_await w.write(part)) co_return "write";
    if (!co_await w.flush()) co_return "flush";
    if (w.stream().written() != "hello short writes" + std::string(20, 'z')) co_return "bytes";
    if (!co_await w.write("keep")) co_return "buffer";
    w.stream().write_error = std::make_error_code(std::errc::broken_pipe);
    auto failed = co_await w.flush();
    if (failed || w.buffered() != 4) co_return "unsent bytes dropped";
    w.stream().write_error = {};
    if (!co_await w.flush()) co_return "retry";
    co_return w.stream().written().ends_with("zkeep") ? "ok" : "retry bytes";
  };
  EXPECT_EQ(run(body(writer)), "ok");
}

std::string frames_text(const std::vector<std::string>& payloads) {
  std::string out;
  for (const auto& p : payloads) {
    const auto n = static_cast<std::uint32_t>(p.size());
    out += static_cast<char>(n >> 24);
    out += static_cast<char>(n >> 16);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(n);
    out += p;
  }
  return out;
}

Task<std::vector<std::string>> all_frames(BufferedReader<ScriptedStream>& reader, std::size_t max) {
  std::vector<std::string> frames;
  for (;;) {
    auto frame = co_await read_frame(reader, max);
    if (frame) {
      frames.push_back(as_string(*frame));
      continue;
    }
    if (frame.error() == Errc::end_of_stream)
      frames.emplace_back("<eos>");
    else if (frame.error() == Errc::incomplete_frame)
      frames.emplace_back("<incomplete>");
    else if (frame.error() == Errc::frame_too_long)
      frames.emplace_back("<too long>");
    else
      frames.emplace_back(frame.error().message());
    co_return frames;
  }
}

TEST_F(BufferedScripted, LengthPrefixedFramesSplitAtEveryOffset) {
  const std::string text = frames_text({"first", "", "third frame"});
  const Lines expected = {"first", "", "third frame", "<eos>"};
  for (std::size_t i = 0; i <= text.size(); ++i) {
    auto stream = ScriptedStream::split(text, {i});
    BufferedReader reader(stream, 16);  // the 15-byte third frame fills it exactly
    EXPECT_EQ(run(all_frames(reader, 1024)), expected) << "cut at " << i;
  }
}

TEST_F(BufferedScripted, AFrameOverTheMaximumFailsWithItsHeaderStillBuffered) {
  const std::string text = frames_text({"ok", std::string(100, 'x'), "after"});
  auto stream = ScriptedStream::split(text, {3});
  BufferedReader reader(stream, 256);
  auto body = [](BufferedReader<ScriptedStream>& r) -> Task<std::string> {
    auto ok = co_await read_frame(r, 64);
    if (!ok || as_string(*ok) != "ok") co_return "first";
    auto big = co_await read_frame(r, 64);
    if (big || big.error() != Errc::frame_too_long) co_return "not frame_too_long";
    auto header = co_await r.fill(kFrameHeaderBytes);  // still there: skip the frame by hand
    if (!header || static_cast<std::uint8_t>((*header)[3]) != 100) co_return "header lost";
    r.consume(kFrameHeaderBytes);
    std::byte skip[100];
    if (!co_await r.read_exact(skip)) co_return "skip";
    auto after = co_await read_frame(r, 64);
    co_return after ? as_string(*after) : after.error().message();
  };
  EXPECT_EQ(run(body(reader)), "after");

  // A frame larger than the reader's buffer can never be returned: frame_too_long too.
  auto small = ScriptedStream::split(frames_text({std::string(20, 'y')}), {});
  BufferedReader tiny(small, 16);
  EXPECT_EQ(run(all_frames(tiny, 1024)), (Lines{"<too long>"}));
}

TEST_F(BufferedScripted, EndOfStreamInsideAFrameIsIncomplete) {
  const std::string text = frames_text({"whole", "cut short"});
  for (std::size_t keep : {text.size() - 1, std::size_t{11}, std::size_t{10}}) {  // payload/header
    auto stream = ScriptedStream::split(text.substr(0, keep), {});
    BufferedReader reader(stream, 64);
    EXPECT_EQ(run(all_frames(reader, 64)), (Lines{"whole", "<incomplete>"})) << keep;
  }
}

TEST_F(BufferedScripted, WriteFrameRoundTrips) {
  ScriptedStream sink;
  sink.write_limit = 5;
  BufferedWriter writer(sink, 16);
  auto body = [](BufferedWriter<ScriptedStream>& w) -> Task<bool> {
    for (std::string_view p : {"a", "", "a frame larger than the writer's buffer"})
      if (!co_await write_frame(w, as_bytes(p))) co_return false;
    co_return (co_await w.flush()).has_value();
  };
  ASSERT_TRUE(run(body(writer)));
  auto source = ScriptedStream::split(sink.written(), {});
  BufferedReader reader(source, 64);
  EXPECT_EQ(run(all_frames(reader, 64)),
            (Lines{"a", "", "a frame larger than the writer's buffer", "<eos>"}));
}

TEST_F(BufferedScripted, CopyDrainsTheReadersBufferThenTheStream) {
  auto source = ScriptedStream::split("HEADER\nbody one, body two", {10, 15});
  ScriptedStream sink;
  BufferedReader reader(source, 8);
  auto body = [](BufferedReader<ScriptedStream>& r, ScriptedStream& out) -> Task<std::string> {
    auto head = co_await r.read_line();
    if (!head || *head != "HEADER") co_return "head";
    auto n = co_await copy(r, out);
    if (!n || *n != 18) co_return "count";
    co_return out.written();
  };
  EXPECT_EQ(run(body(reader, sink)), "body one, body two");
}

}  // namespace
}  // namespace arbor
