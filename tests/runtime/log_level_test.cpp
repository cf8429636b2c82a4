// arbor's log level by default and under ARBOR_LOG: a program that only creates and destroys a
// Runtime (runtime_lifecycle_program.cpp, run as a child with its stderr captured) writes
// nothing on stderr by default, on every engine, and ARBOR_LOG=info or debug brings back the
// start-up lines (the engine it chose). An unknown value is reported, since warnings show by
// default. A library is quiet unless asked.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "arbor/io/engine.hpp"

extern char** environ;

namespace arbor {
namespace {

struct Outcome {
  int status = -1;  // the exit status, or -1 if it did not exit normally
  std::string stderr_text;
};

// Runs the lifecycle program with the test's environment minus any ARBOR_LOG and ARBOR_ENGINE,
// plus `extra` ("NAME=value" each), and collects everything it writes on stderr (stdout is left
// alone: it writes nothing there). Reads to end of file, bounded by a 30 s poll per read.
Outcome run_program(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "ARBOR_LOG=", 10) != 0 && std::strncmp(*e, "ARBOR_ENGINE=", 13) != 0)
      env.emplace_back(*e);
  env.insert(env.end(), extra.begin(), extra.end());
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string path = RUNTIME_LIFECYCLE_PROGRAM;
  char* argv[] = {path.data(), nullptr};

  Outcome outcome;
  int err[2];
  if (::pipe(err) != 0) return outcome;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[0]);
    ::close(err[1]);
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  ::close(err[1]);
  for (;;) {
    pollfd p{err[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 30'000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;  // timed out: the program hangs; the status below says so
    char buffer[4096];
    const ssize_t n = ::read(err[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    outcome.stderr_text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(err[0]);
  int status = 0;
  ::kill(pid, SIGKILL);  // a no-op once it has exited; ends it if it hung
  ::waitpid(pid, &status, 0);
  outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

class LogLevel : public ::testing::TestWithParam<std::string> {
 protected:
  std::string engine() const { return "ARBOR_ENGINE=" + GetParam(); }
  // How the engine's start-up line names it.
  std::string engine_line() const {
    return "[arbor] [info] engine: " + (GetParam() == "uring" ? "io_uring" : GetParam());
  }
};

TEST_P(LogLevel, ARuntimeCreatedAndDestroyedWritesNothingOnStderrByDefault) {
  const auto outcome = run_program({engine()});
  EXPECT_EQ(outcome.status, 0);
  EXPECT_EQ(outcome.stderr_text, "");
}

TEST_P(LogLevel, WarnIsTheDefaultAndSaysNothingEither) {
  const auto outcome = run_program({engine(), "ARBOR_LOG=warn"});
  EXPECT_EQ(outcome.status, 0);
  EXPECT_EQ(outcome.stderr_text, "");
}

TEST_P(LogLevel, InfoAndDebugWriteTheEngineLine) {
  for (const char* level : {"ARBOR_LOG=info", "ARBOR_LOG=debug"}) {
    const auto outcome = run_program({engine(), level});
    EXPECT_EQ(outcome.status, 0) << level;
    EXPECT_NE(outcome.stderr_text.find(engine_line()), std::string::npos) << level << ":\n"
                                                                          << outcome.stderr_text;
  }
}

TEST_P(LogLevel, AnUnknownLevelIsReportedAndTheDefaultKept) {
  const auto outcome = run_program({engine(), "ARBOR_LOG=loud"});
  EXPECT_EQ(outcome.status, 0);
  EXPECT_NE(outcome.stderr_text.find("[warning] ARBOR_LOG='loud' is not one of"), std::string::npos)
      << outcome.stderr_text;
  EXPECT_EQ(outcome.stderr_text.find("[info]"), std::string::npos) << outcome.stderr_text;
}

INSTANTIATE_TEST_SUITE_P(Engines, LogLevel, ::testing::ValuesIn(io::Engine::available()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace arbor
