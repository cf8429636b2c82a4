// The main of every test program. It is gtest_main's, with one change: stdout is unbuffered.
// Why: under wine (the Windows suite), a program's stdout to ctest's pipe is fully buffered by
// the C runtime, so a test process that died took all its output with it and ctest showed a
// failure with nothing to read. Unbuffered, the output shows how far it got.
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
