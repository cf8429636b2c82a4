// examples/kv/kv_server.cpp end to end: the real binary on an ephemeral 127.0.0.1 port, driven
// by raw sockets, stopped with a signal. Each test that stops it checks the exit status is 0.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "example_process.hpp"

namespace {

using namespace arbor::example_test;

struct KvServer : ExampleProcess {
  explicit KvServer(std::vector<std::string> flags = {}) : ExampleProcess(command(flags)) {}
  static std::vector<std::string> command(const std::vector<std::string>& flags) {
    auto argv = arbor::test::example_command(KV_SERVER);
    argv.push_back("127.0.0.1:0");
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }
};

// One command, one reply line.
std::optional<std::string> ask(Socket& s, const std::string& command) {
  if (!s.send(command + "\n")) return std::nullopt;
  return s.read_line();
}

TEST(KvExample, AnswersEveryCommand) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ask(c, "PING"), "PONG");
  EXPECT_EQ(ask(c, "GET greeting"), "NIL");
  EXPECT_EQ(ask(c, "SET greeting hello,  wide world "), "OK");
  EXPECT_EQ(ask(c, "GET greeting"), "VALUE hello,  wide world ");  // the rest of the line
  EXPECT_EQ(ask(c, "SET greeting"), "OK");                         // an empty value
  EXPECT_EQ(ask(c, "GET greeting"), "VALUE ");
  EXPECT_EQ(ask(c, "COUNT"), "INT 1");
  EXPECT_EQ(ask(c, "DEL greeting"), "DELETED");
  EXPECT_EQ(ask(c, "DEL greeting"), "NIL");
  EXPECT_EQ(ask(c, "INCR n"), "INT 1");
  EXPECT_EQ(ask(c, "INCR n 41"), "INT 42");
  EXPECT_EQ(ask(c, "INCR n -50"), "INT -8");
  EXPECT_EQ(ask(c, "INCR n x"), "ERR not an integer");
  EXPECT_EQ(ask(c, "SET s text"), "OK");
  EXPECT_EQ(ask(c, "INCR s"), "ERR not an integer");
  EXPECT_EQ(ask(c, "SET big 9223372036854775807"), "OK");
  EXPECT_EQ(ask(c, "INCR big"), "ERR overflow");
  EXPECT_EQ(ask(c, "GET big"), "VALUE 9223372036854775807");  // unchanged
  EXPECT_EQ(ask(c, "PING\r"), "PONG");                        // CRLF ends a line too
  EXPECT_EQ(ask(c, "FLY away"), "ERR unknown command");
  EXPECT_EQ(ask(c, "GET"), "ERR wrong arguments for GET");
  EXPECT_EQ(ask(c, "GET a b"), "ERR wrong arguments for GET");
  EXPECT_EQ(ask(c, ""), "ERR unknown command");
  EXPECT_EQ(ask(c, "GET " + std::string(251, 'k')), "ERR key too long (max 250 bytes)");
  EXPECT_EQ(ask(c, "QUIT"), "BYE");
  EXPECT_EQ(c.read_to_end(), End::eof);
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, PipelinedCommandsGetTheirRepliesInOrder) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  constexpr int kCommands = 5000;
  std::string batch;
  for (int i = 0; i < kCommands; ++i)
    batch += (i % 2 == 0 ? "SET k" + std::to_string(i) + " v" + std::to_string(i)
                         : "GET k" + std::to_string(i - 1)) +
             "\n";
  // Sent from another thread: the server's replies may fill the window before the last
  // command is sent, and this thread must be reading them by then.
  std::thread sender([&] { EXPECT_TRUE(c.send(batch)); });
  for (int i = 0; i < kCommands; ++i) {
    const auto reply = c.read_line();
    ASSERT_TRUE(reply) << "reply " << i;
    ASSERT_EQ(*reply, i % 2 == 0 ? "OK" : "VALUE v" + std::to_string(i - 1)) << "reply " << i;
  }
  sender.join();
  EXPECT_EQ(ask(c, "COUNT"), "INT " + std::to_string(kCommands / 2));
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, ALineTooLongIsRefusedAndTheNextLineIsServed) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  // 100 KB: far past the 4 KiB line and the reader's buffer, so it must be skipped in pieces.
  ASSERT_TRUE(c.send("SET k " + std::string(100'000, 'x') + "\nPING\n"));
  EXPECT_EQ(c.read_line(), "ERR line too long (max 4096 bytes)");
  EXPECT_EQ(c.read_line(), "PONG");
  EXPECT_EQ(ask(c, "COUNT"), "INT 0");  // nothing of the long line was taken as a command
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, TheStoreIsBounded) {
  KvServer kv({"--max-keys", "2"});
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ask(c, "SET a 1"), "OK");
  EXPECT_EQ(ask(c, "SET b 2"), "OK");
  EXPECT_EQ(ask(c, "SET c 3"), "ERR store full");
  EXPECT_EQ(ask(c, "INCR c"), "ERR store full");
  EXPECT_EQ(ask(c, "SET a 10"), "OK");  // replacing takes no room
  EXPECT_EQ(ask(c, "DEL b"), "DELETED");
  EXPECT_EQ(ask(c, "INCR c"), "INT 1");
  EXPECT_EQ(ask(c, "COUNT"), "INT 2");
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, ConcurrentClientsShareOneStore) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  constexpr int kClients = 8;
  constexpr int kIncrements = 300;
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t)
    clients.emplace_back([&] {
      auto c = Socket::connect(kv.port());
      ASSERT_TRUE(c.ok());
      for (int i = 0; i < kIncrements; ++i)
        ASSERT_TRUE(ask(c, "INCR counter").has_value());
    });
  for (auto& t : clients)
    t.join();
  auto c = Socket::connect(kv.port());
  EXPECT_EQ(ask(c, "GET counter"), "VALUE " + std::to_string(kClients * kIncrements));
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, AClientThatLeavesMidLineLeavesTheOthersServed) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  {
    auto gone = Socket::connect(kv.port());
    ASSERT_TRUE(gone.ok());
    ASSERT_TRUE(gone.send("SET half"));  // no newline, then the connection ends
  }
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ask(c, "GET half"), "NIL");
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, AnIdleClientIsToldAndCut) {
  KvServer kv({"--idle-timeout", "1"});
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ask(c, "PING"), "PONG");
  EXPECT_EQ(c.read_line(), "ERR idle timeout");  // read_line waits up to 10 s
  EXPECT_EQ(c.read_to_end(), End::eof);
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

// A client that pipelines commands and never reads a reply: once the server's writes stop
// making progress for the idle timeout it ends the session, and this side's sends fail with a
// reset or a broken pipe (a send timeout of 10 s would end the loop instead, and fail the test).
// Each reply is a value of 4,000 bytes for a command of 8, so the server's send buffer (up to
// 4 MiB, tcp_wmem) fills after about a thousand commands. With short replies ("NIL", 4 bytes) it
// took millions: seconds on Linux, over a minute under TSan, and under wine, where the server
// reads more slowly, more than three minutes of writes that kept making progress.
TEST(KvExample, AClientThatNeverReadsIsCut) {
  KvServer kv({"--idle-timeout", "1"});
  ASSERT_NE(kv.port(), 0);
  auto c = Socket::connect(kv.port(), /*receive_buffer=*/4096);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ask(c, "SET big " + std::string(4000, 'x')), "OK");
  timeval limit{10, 0};
  ::setsockopt(c.fd(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  std::string commands;
  for (int i = 0; i < 10'000; ++i)
    commands += "GET big\n";
  int error = 0;
  for (int round = 0; round < 10'000 && error == 0; ++round)
    if (!c.send(commands)) error = errno;
  EXPECT_TRUE(error == ECONNRESET || error == EPIPE) << "send ended with errno " << error;
  EXPECT_EQ(kv.stop(SIGINT), 0);
}

TEST(KvExample, ASignalEndsConnectedSessionsAndExitsZero) {
  KvServer kv;
  ASSERT_NE(kv.port(), 0);
  auto a = Socket::connect(kv.port());
  auto b = Socket::connect(kv.port());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ask(a, "PING"), "PONG");  // both sessions are running
  EXPECT_EQ(ask(b, "PING"), "PONG");
  ASSERT_TRUE(b.send("SET partial"));  // one waits in the middle of a line
  EXPECT_EQ(kv.stop(SIGINT), 0);
  EXPECT_NE(a.read_to_end(), End::timeout);
  EXPECT_NE(b.read_to_end(), End::timeout);
}

TEST(KvExample, BadArgumentsAreRefused) {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--max-keys", "0"},
                                                {"--max-keys"},
                                                {"--idle-timeout", "x"},
                                                {"--idle-timeout", "100000"},
                                                {"--frobnicate"}}) {
    KvServer kv(flags);
    EXPECT_EQ(kv.port(), 0);
    EXPECT_EQ(kv.wait_exit(), 2) << flags[0];
  }
}

}  // namespace
