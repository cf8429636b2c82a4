// examples/chat/chat_server.cpp end to end: the real binary on an ephemeral 127.0.0.1 port,
// driven by raw sockets, stopped with a signal. Each test checks the exit status is 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "example_process.hpp"

namespace {

using namespace arbor::example_test;

// A chat client: reads its welcome line ("*** welcome, you are client N") on joining, which
// also means its session is subscribed to the room. Server notices ("*** ...") met while
// reading chat lines are kept in `notices`.
struct ChatClient {
  Socket socket;
  int id = 0;
  std::vector<std::string> notices;

  static ChatClient join(int port, int receive_buffer = 0) {
    ChatClient c{Socket::connect(port, receive_buffer), 0, {}};
    const auto welcome = c.socket.read_line();
    const std::string prefix = "*** welcome, you are client ";
    if (welcome && welcome->rfind(prefix, 0) == 0) c.id = std::stoi(welcome->substr(prefix.size()));
    return c;
  }
  bool say(const std::string& line) { return socket.send(line + "\n"); }
  std::optional<std::string> next_chat() {
    while (auto line = socket.read_line()) {
      if (line->rfind("*** ", 0) != 0) return line;
      notices.push_back(*line);
    }
    return std::nullopt;
  }
  bool saw(const std::string& notice) const {
    return std::find(notices.begin(), notices.end(), notice) != notices.end();
  }
  std::string name() const { return "client " + std::to_string(id); }
  // Everything up to the end of the stream: the last line must be `last`, then EOF.
  void expect_last_line_then_eof(const std::string& last) {
    std::string rest;
    EXPECT_EQ(socket.read_to_end(10s, &rest), End::eof);
    ASSERT_GE(rest.size(), last.size() + 1) << rest;
    EXPECT_EQ(rest.substr(rest.size() - last.size() - 1), last + "\n");
  }
};

struct ChatServer : ExampleProcess {
  ChatServer() : ExampleProcess(command()) {}
  static std::vector<std::string> command() {
    auto argv = arbor::test::example_command(CHAT_SERVER);
    argv.push_back("127.0.0.1:0");
    return argv;
  }
};

TEST(ChatExample, ClientsSeeEachOthersLinesButNotTheirOwn) {
  ChatServer chat;
  ASSERT_NE(chat.port(), 0);
  auto a = ChatClient::join(chat.port());
  auto b = ChatClient::join(chat.port());
  auto c = ChatClient::join(chat.port());
  ASSERT_TRUE(a.id > 0 && b.id > 0 && c.id > 0);
  ASSERT_TRUE(a.id != b.id && b.id != c.id && a.id != c.id);

  ASSERT_TRUE(a.say("hello from a"));
  EXPECT_EQ(b.next_chat(), a.name() + ": hello from a");
  EXPECT_EQ(c.next_chat(), a.name() + ": hello from a");
  ASSERT_TRUE(c.say("hi from c\r"));  // CRLF ends a line too
  // Were a's own line sent back to it, it would come first: the room has one order.
  EXPECT_EQ(a.next_chat(), c.name() + ": hi from c");
  EXPECT_EQ(b.next_chat(), c.name() + ": hi from c");
  ASSERT_TRUE(b.say("two\nlines"));  // "lines" ends with the newline say() adds
  for (auto* other : {&a, &c}) {
    EXPECT_EQ(other->next_chat(), b.name() + ": two");
    EXPECT_EQ(other->next_chat(), b.name() + ": lines");
  }
  EXPECT_TRUE(a.saw("*** " + b.name() + " joined"));
  EXPECT_TRUE(a.saw("*** " + c.name() + " joined"));

  // Ctrl-C: every client gets the goodbye line, then the end of the stream; exit status 0.
  chat.send_signal(SIGINT);
  for (auto* client : {&a, &b, &c})
    client->expect_last_line_then_eof("*** server shutting down");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatExample, ASlowClientIsDisconnectedAndTheOthersGetEverything) {
  ChatServer chat;
  ASSERT_NE(chat.port(), 0);
  auto a = ChatClient::join(chat.port());
  auto b = ChatClient::join(chat.port());
  auto slow = ChatClient::join(chat.port(), 4096);  // never reads again: a small window fills
  ASSERT_TRUE(a.id > 0 && b.id > 0 && slow.id > 0);
  const std::string kicked = "*** " + slow.name() + " left: too slow, disconnected";

  // a talks, b reads each line as it comes; the slow client's kernel buffers fill, then its
  // queue (256 lines), and it is dropped. Nobody else waits for it: b gets every line.
  const std::string filler(4000, 'x');
  int sent = 0;
  for (; sent < 20000 && !b.saw(kicked); ++sent) {
    const std::string line = std::to_string(sent) + " " + filler;
    ASSERT_TRUE(a.say(line));
    ASSERT_EQ(b.next_chat(), a.name() + ": " + line) << "line " << sent;
  }
  ASSERT_TRUE(b.saw(kicked)) << "after " << sent << " lines of 4000 bytes";
  EXPECT_GT(sent, 256);  // its queue held 256 lines before it was full

  ASSERT_TRUE(a.say("still here"));
  EXPECT_EQ(b.next_chat(), a.name() + ": still here");
  const End end = slow.socket.read_to_end();  // what was buffered for it, then the end
  EXPECT_TRUE(end == End::eof || end == End::reset) << static_cast<int>(end);

  chat.send_signal(SIGINT);
  a.expect_last_line_then_eof("*** server shutting down");
  b.expect_last_line_then_eof("*** server shutting down");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatExample, OverlongLinesAreRejected) {
  ChatServer chat;
  ASSERT_NE(chat.port(), 0);
  auto a = ChatClient::join(chat.port());
  auto b = ChatClient::join(chat.port());
  ASSERT_TRUE(a.id > 0 && b.id > 0);
  const std::string longest(4096, 'm');  // the bound itself is fine
  ASSERT_TRUE(a.say(longest));
  EXPECT_EQ(b.next_chat(), a.name() + ": " + longest);

  ASSERT_TRUE(a.say(std::string(4097, 'L')));
  a.expect_last_line_then_eof("*** line too long (max 4096 bytes)");
  // 256 KiB with no newline at all: rejected as soon as it passes the bound.
  auto c = ChatClient::join(chat.port());
  ASSERT_GT(c.id, 0);
  (void)c.socket.send(std::string(256 * 1024, 'n'));  // the server reads (and drops) the rest
  c.socket.shutdown_write();
  c.expect_last_line_then_eof("*** line too long (max 4096 bytes)");

  // b saw neither line (it would come before d's), only that a and c left.
  auto d = ChatClient::join(chat.port());
  ASSERT_TRUE(d.say("anyone?"));
  EXPECT_EQ(b.next_chat(), d.name() + ": anyone?");
  EXPECT_TRUE(b.saw("*** " + a.name() + " left: line too long (max 4096 bytes)"));
  EXPECT_TRUE(b.saw("*** " + c.name() + " left: line too long (max 4096 bytes)"));

  chat.send_signal(SIGINT);
  b.expect_last_line_then_eof("*** server shutting down");
  d.expect_last_line_then_eof("*** server shutting down");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatExample, SigtermAlsoSaysGoodbye) {
  if (arbor::test::under_wine())
    GTEST_SKIP() << "Windows has no SIGTERM: wine ends the program on it";
  ChatServer chat;
  ASSERT_NE(chat.port(), 0);
  auto a = ChatClient::join(chat.port());
  ASSERT_GT(a.id, 0);
  chat.send_signal(SIGTERM);
  a.expect_last_line_then_eof("*** server shutting down");
  EXPECT_EQ(chat.wait_exit(), 0);
}

TEST(ChatExample, ExitsAtOnceWithNoClients) {
  ChatServer chat;
  ASSERT_NE(chat.port(), 0);
  EXPECT_EQ(chat.stop(SIGINT, 10s), 0);
}

}  // namespace
