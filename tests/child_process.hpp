// A test's server in a child process: started with fork/exec, it tells where it listens on its
// first stdout line ("... listening on ADDR:PORT", on 127.0.0.1 port 0), and is stopped with a
// signal. Every wait has an upper bound, so a broken program fails a test instead of hanging
// it; EINTR is retried (a test process stopped and continued sees it even without handlers).
// Killed (SIGKILL) by the destructor if it is still running. POSIX only (the tests' side: the
// program may be a Windows build under wine, see wine_examples()).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace arbor::test {

/// What a shell command writes to stdout (its exit status ignored; "" if it cannot start).
inline std::string output_of(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    out.append(buf, n);
  ::pclose(pipe);
  return out;
}

/// Under wine: ARBOR_TEST_WINE_EXAMPLES holds "<wine-run> <wine64> <dir>", where dir holds the
/// Windows build of the examples (scripts/wine-e2e sets it). The end-to-end tests then start
/// the Windows programs under wine, on the IOCP engine, and talk to them from Linux exactly as
/// to the Linux builds. Windows has no POSIX signals: wine hands a program SIGINT as Ctrl-C,
/// which stops the examples as SIGINT does on Linux, and ends it on the others.
inline std::vector<std::string> wine_examples() {
  std::vector<std::string> words;
  const char* value = std::getenv("ARBOR_TEST_WINE_EXAMPLES");
  if (value == nullptr) return words;
  std::istringstream in(value);
  for (std::string word; in >> word;)
    words.push_back(word);
  if (words.size() != 3) {  // never fall back to the Linux builds: that would pass unseen
    std::fprintf(stderr,
                 "ARBOR_TEST_WINE_EXAMPLES must be three words (no spaces in the paths): "
                 "<wine-run> <wine64> <dir>, not \"%s\"\n",
                 value);
    std::abort();
  }
  return words;
}
inline bool under_wine() {
  return !wine_examples().empty();
}

/// The command line that runs the example built at `linux_path`: that path, or under wine the
/// Windows build of the same program (the same file name, with .exe) through wine-run.
inline std::vector<std::string> example_command(const std::string& linux_path) {
  auto wine = wine_examples();
  if (wine.empty()) return {linux_path};
  const std::string name = linux_path.substr(linux_path.find_last_of('/') + 1);
  return {wine[0], wine[1], wine[2] + "/" + name + ".exe"};
}

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
