// A test's server in a child process: started with fork/exec, it tells where it listens on its
// first stdout line ("... listening on ADDR:PORT", on 127.0.0.1 port 0), and is stopped with a
// signal. Every wait has an upper bound, so a broken program fails a test instead of hanging
// it; EINTR is retried (a test process stopped and continued sees it even without handlers).
// Killed (SIGKILL) by the destructor if it is still running. POSIX only.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace arbor::test {

class ChildProcess {
 public:
  using Millis = std::chrono::milliseconds;

  /// Runs argv[0] (a path) with `argv`, and reads its first stdout line (at most 30 s).
  explicit ChildProcess(std::vector<std::string> argv) {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    for (char c; ready(out[0], POLLIN, std::chrono::seconds(30));) {
      const ssize_t n = ::read(out[0], &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || c == '\n') break;
      line += c;
    }
    ::close(out[0]);
    const auto at = line.find("listening on ");
    const auto colon = line.rfind(':');
    if (at != std::string::npos && colon != std::string::npos && colon > at)
      port_ = std::stoi(line.substr(colon + 1));
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int port() const { return port_; }  // 0 if it did not say where it listens
  pid_t pid() const { return pid_; }
  bool exited() const { return exited_; }

  /// Sends `signal` and waits (at most `limit`) for the exit: the exit status (128 + signal if
  /// a signal ended it), or nullopt if it is still running.
  std::optional<int> stop(int signal = SIGINT, Millis limit = std::chrono::seconds(30)) {
    send_signal(signal);
    return wait_exit(limit);
  }
  void send_signal(int signal) { ::kill(pid_, signal); }
  /// The exit status once the process has ended (at most `limit`), or nullopt.
  std::optional<int> wait_exit(Millis limit = std::chrono::seconds(30)) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd < 0) return std::nullopt;
    const bool ended = ready(pidfd, POLLIN, limit);
    ::close(pidfd);
    if (!ended) return std::nullopt;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  /// Waits (at most `limit`) until `fd` has `events`; false on timeout or error.
  static bool ready(int fd, short events, Millis limit) {
    pollfd p{fd, events, 0};
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      const int n = ::poll(&p, 1, static_cast<int>(left.count() > 0 ? left.count() : 0));
      if (n > 0) return true;
      if (n == 0 || errno != EINTR) return false;
    }
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

}  // namespace arbor::test
