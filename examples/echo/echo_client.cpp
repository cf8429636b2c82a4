// A small echo client: sends each line of stdin to the server and prints what comes back.
//
//   echo_client [HOST:PORT]        (default 127.0.0.1:7000)
#include <cstdio>
#include <string>

#include "arbor/arbor.hpp"

namespace {

arbor::Task<int> run(arbor::Runtime& rt, arbor::Address address) {
  using namespace std::chrono_literals;
  auto stream = co_await arbor::TcpStream::connect(rt, address, 3s);
  if (!stream) {
    std::fprintf(stderr, "echo_client: %s: %s\n", address.to_string().c_str(),
                 stream.error().message().c_str());
    co_return 1;
  }
  char line[4096];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    const auto bytes = std::as_bytes(std::span(line, std::char_traits<char>::length(line)));
    if (auto sent = co_await stream->write_all(bytes); !sent) co_return 1;
    std::string reply(bytes.size(), '\0');
    auto got = co_await stream->read_exact(std::as_writable_bytes(std::span(reply)));
    if (!got) {
      std::fprintf(stderr, "echo_client: %s\n", got.error().message().c_str());
      co_return 1;
    }
    std::fputs(reply.c_str(), stdout);
  }
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:7000");
  if (!address) {
    std::fprintf(stderr, "usage: echo_client [HOST:PORT]\n");
    return 2;
  }
  arbor::Runtime rt;
  return rt.block_on(run(rt, *address));
}
