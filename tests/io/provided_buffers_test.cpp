// ProvidedBuffers: only as many buffers circulate as the load needs (provided_buffers.hpp).
// Driven against the kernel through a ring of the test's own: a multishot receive on a
// datagram socket pair takes one buffer per datagram, as the engine's poller sees them.
#include "linux/uring/provided_buffers.hpp"

#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <vector>

namespace {

using arbor::io::ProvidedBuffers;

constexpr unsigned kCount = 1024;
constexpr unsigned kSize = 4096;

class ProvidedBuffersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(io_uring_queue_init(64, &ring_, 0), 0);
    have_ring_ = true;
    if (auto e = buffers_.init(ring_, kCount, kSize))
      GTEST_SKIP() << "no buffer rings on this kernel: " << e.message();
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fds_), 0);
    int big = 4 << 20;  // room for every datagram the tests queue before they read
    ASSERT_EQ(::setsockopt(fds_[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big), 0);
    ASSERT_EQ(::setsockopt(fds_[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
  }
  void TearDown() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
    if (have_ring_) io_uring_queue_exit(&ring_);
  }

  void send(int datagrams) {
    for (int i = 0; i < datagrams; ++i) {
      const char byte = static_cast<char>('a' + i % 26);
      ASSERT_EQ(::send(fds_[1], &byte, 1, 0), 1);
    }
  }

  // Arms a multishot receive and takes `datagrams` buffer CQEs from it, as the poller does
  // (taken() for each; the ids are held, as sockets hold unread chunks). Returns false if the
  // ring ran dry first (-ENOBUFS, reported with starved()).
  bool receive(int datagrams, std::vector<std::uint16_t>& ids) {
    int got = 0;
    bool armed = false;
    while (got < datagrams) {
      if (!armed) {  // (again, as the engine does, if the kernel ended it with data)
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        io_uring_prep_recv_multishot(sqe, fds_[0], nullptr, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = ProvidedBuffers::kGroup;
        EXPECT_EQ(io_uring_submit(&ring_), 1);
        armed = true;
      }
      io_uring_cqe* cqe = nullptr;
      EXPECT_EQ(io_uring_wait_cqe(&ring_, &cqe), 0);
      if (cqe == nullptr) return false;
      const int res = cqe->res;
      const unsigned flags = cqe->flags;
      io_uring_cqe_seen(&ring_, cqe);
      if (flags & IORING_CQE_F_BUFFER) {
        buffers_.taken();
        ids.push_back(static_cast<std::uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT));
        EXPECT_EQ(res, 1);
        ++got;
      }
      if (!(flags & IORING_CQE_F_MORE)) {
        armed = false;
        if (res == -ENOBUFS) {
          buffers_.starved();
          return false;
        }
        if (res < 0) {
          ADD_FAILURE() << "the receive failed: " << res;
          return false;
        }
      }
    }
    if (armed) {  // stop the multishot; its last CQE ends it
      io_uring_sqe* cancel = io_uring_get_sqe(&ring_);
      io_uring_prep_cancel_fd(cancel, fds_[0], 0);
      EXPECT_EQ(io_uring_submit(&ring_), 1);
      for (int ended = 0; ended < 2;) {  // the receive's end and the cancel's own CQE
        io_uring_cqe* cqe = nullptr;
        EXPECT_EQ(io_uring_wait_cqe(&ring_, &cqe), 0);
        if (cqe == nullptr) break;
        if (cqe->flags & IORING_CQE_F_BUFFER) ADD_FAILURE() << "a buffer after the last datagram";
        if (!(cqe->flags & IORING_CQE_F_MORE)) ++ended;
        io_uring_cqe_seen(&ring_, cqe);
      }
    }
    return true;
  }

  io_uring ring_{};
  bool have_ring_ = false;
  ProvidedBuffers buffers_;
  int fds_[2] = {-1, -1};
};

// Catches: the whole ring handed to the kernel at start (it writes each buffer in turn, so all
// 4 MiB became resident under any load), and a ring that never grows when its buffers are held.
TEST_F(ProvidedBuffersTest, TheRingStartsSmallAndDoublesWhenAQuarterIsLeft) {
  EXPECT_EQ(buffers_.circulating(), ProvidedBuffers::kInitial);
  // Buffers that go back as they are used: the same few circulate, nothing is added.
  for (int round = 0; round < 8; ++round) {
    std::vector<std::uint16_t> ids;
    send(32);
    ASSERT_TRUE(receive(32, ids));
    for (auto id : ids) {
      EXPECT_LT(id, ProvidedBuffers::kInitial);
      buffers_.give_back(id);
    }
    buffers_.publish();
  }
  EXPECT_EQ(buffers_.circulating(), ProvidedBuffers::kInitial);
  // Held (unread chunks): at a quarter left, publish() doubles what circulates, and the kernel
  // is given buffers it never had, none of those still held.
  std::vector<std::uint16_t> held;
  send(3 * ProvidedBuffers::kInitial / 4);
  ASSERT_TRUE(receive(3 * ProvidedBuffers::kInitial / 4, held));
  buffers_.publish();
  EXPECT_EQ(buffers_.circulating(), 2 * ProvidedBuffers::kInitial);
  std::vector<std::uint16_t> next;
  send(ProvidedBuffers::kInitial / 2);
  ASSERT_TRUE(receive(ProvidedBuffers::kInitial / 2, next));
  const std::set<std::uint16_t> old(held.begin(), held.end());
  bool fresh = false;
  for (auto id : next) {
    EXPECT_EQ(old.count(id), 0u) << "buffer " << id << " given to the kernel while held";
    fresh = fresh || id >= ProvidedBuffers::kInitial;
  }
  EXPECT_TRUE(fresh) << "no buffer beyond the first " << ProvidedBuffers::kInitial << " was used";
}

// Catches: a ring that, found empty, stays as small as it was (every later read single-shot),
// and growth past the buffers there are.
TEST_F(ProvidedBuffersTest, AnEmptyRingGrowsUpToEveryBufferAndNoFurther) {
  std::vector<std::uint16_t> held;
  unsigned last = buffers_.circulating();
  for (int round = 0; round < 12; ++round) {
    // More datagrams than circulate: the ring runs dry (-ENOBUFS) with every buffer held.
    const int more = static_cast<int>(buffers_.circulating()) + 1;
    send(more);
    if (buffers_.circulating() < kCount) {
      EXPECT_FALSE(receive(more, held)) << "round " << round << ": the ring did not run dry";
    }
    buffers_.publish();
    EXPECT_EQ(buffers_.circulating(), std::min(2 * last, kCount)) << "round " << round;
    last = buffers_.circulating();
    // Drain what is queued so the next round starts from an empty socket.
    char sink[1];
    while (::recv(fds_[0], sink, 1, MSG_DONTWAIT) == 1) {
    }
    if (last == kCount) break;
  }
  EXPECT_EQ(buffers_.circulating(), kCount);
  const std::set<std::uint16_t> distinct(held.begin(), held.end());
  EXPECT_EQ(distinct.size(), held.size()) << "a buffer was handed out twice";
  buffers_.starved();
  buffers_.publish();
  EXPECT_EQ(buffers_.circulating(), kCount);
}

// Review: a ring with fewer buffers than kInitial puts all of them in at once and never grows
// (not past `count`, nor by wrapping an id), found empty or not.
TEST_F(ProvidedBuffersTest, ARingSmallerThanTheInitialCountCirculatesAllAndNoMore) {
  ProvidedBuffers few;  // outlives the ring, which unregisters it on exit
  struct Ring {
    io_uring ring{};
    bool made = io_uring_queue_init(8, &ring, 0) == 0;
    ~Ring() {
      if (made) io_uring_queue_exit(&ring);
    }
  } small;
  ASSERT_TRUE(small.made);
  // Another buffer group id would be needed for two rings in one io_uring; this is another.
  ASSERT_FALSE(few.init(small.ring, 16, kSize));
  EXPECT_EQ(few.circulating(), 16u);
  few.starved();
  few.publish();
  EXPECT_EQ(few.circulating(), 16u);
  for (int i = 0; i < 16; ++i)
    few.taken();  // as if the kernel had taken every one
  few.publish();
  EXPECT_EQ(few.circulating(), 16u);
}

}  // namespace
