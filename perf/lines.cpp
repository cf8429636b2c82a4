// Lines per second through arbor's BufferedReader::read_line against a hand-written read loop
// (the kind of line reader issue 28's programs wrote: read_some into a buffer, memchr for
// '\n', move the partial line to the front), on one worker; perf/baselines/asio_lines is the
// Boost.Asio twin (async_read_until). Driver and output: lines_common.hpp; perf/compare-lines
// runs them alternately. The engine is ARBOR_ENGINE's (default: the runtime's).
//
//   perf/lines [buffered|hand] [LINES] [LINE_BYTES]
#include <cstring>
#include <string_view>

#include "arbor/arbor.hpp"
#include "lines_common.hpp"

namespace {

constexpr std::size_t kBufferBytes = 8 * 1024;  // BufferedReader's default, and Asio's too

arbor::Task<bool> buffered(arbor::TcpStream& stream, lines::Meter& meter) {
  arbor::BufferedReader reader(stream, kBufferBytes);
  for (;;) {
    auto line = co_await reader.read_line();
    if (!line) co_return line.error() == arbor::Errc::end_of_stream;
    meter.line(line->size());
  }
}

arbor::Task<bool> hand_written(arbor::TcpStream& stream, lines::Meter& meter) {
  char buffer[kBufferBytes];
  std::size_t begin = 0;
  std::size_t end = 0;
  for (;;) {
    if (const void* nl = std::memchr(buffer + begin, '\n', end - begin)) {
      const auto n = static_cast<std::size_t>(static_cast<const char*>(nl) - (buffer + begin));
      meter.line(n);
      begin += n + 1;
      continue;
    }
    if (begin != 0) {
      std::memmove(buffer, buffer + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    auto got = co_await stream.read_some(
        std::as_writable_bytes(std::span<char>(buffer + end, sizeof buffer - end)));
    if (!got) co_return false;
    if (*got == 0) co_return begin == end;
    end += *got;
  }
}

arbor::Task<bool> serve(arbor::Runtime& rt, const lines::Config& config) {
  auto listener = arbor::TcpListener::bind(rt, arbor::Address::loopback_v4(0));
  if (!listener) co_return false;
  lines::Feeder feeder(config, listener->local_address()->port());
  auto stream = co_await listener->accept();
  if (!stream) co_return false;
  lines::Meter meter(config);
  meter.start();
  bool ok = false;  // (not `c ? co_await a : co_await b`: GCC 12 miscompiles that shape)
  if (config.mode == "hand")
    ok = co_await hand_written(*stream, meter);
  else
    ok = co_await buffered(*stream, meter);
  co_return ok&& meter.report("arbor");
}

}  // namespace

int main(int argc, char** argv) {
  const lines::Config config = lines::parse(argc, argv, "buffered");
  if (config.mode != "buffered" && config.mode != "hand") {
    std::fprintf(stderr, "mode: buffered or hand\n");
    return 2;
  }
  auto options = arbor::RuntimeOptions::from_env();
  if (!options) return 2;
  options->scheduler.workers = 1;  // one thread, as the Asio twin's io_context
  auto rt = arbor::Runtime::create(*options);
  if (!rt) return 1;
  return (*rt)->block_on(serve(**rt, config)) ? 0 : 1;
}
