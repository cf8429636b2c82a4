# Cross-compiles for 64-bit Windows with Debian's mingw-w64 and runs the results under wine64.
#
# The posix thread model (the `-posix` compiler) is required: the win32 one has no std::thread,
# std::mutex or std::condition_variable in GCC 12.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(_arbor_triple x86_64-w64-mingw32)
find_program(_arbor_mingw_cxx ${_arbor_triple}-g++-posix REQUIRED)
find_program(_arbor_mingw_cc ${_arbor_triple}-gcc-posix REQUIRED)  # googletest enables C
set(CMAKE_CXX_COMPILER ${_arbor_mingw_cxx})
set(CMAKE_C_COMPILER ${_arbor_mingw_cc})
set(CMAKE_RC_COMPILER ${_arbor_triple}-windres)

set(CMAKE_FIND_ROOT_PATH /usr/${_arbor_triple})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Static libstdc++/libgcc/winpthread: the .exe then runs under wine without mingw DLLs on a
# search path.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")

# ctest and gtest_discover_tests start every .exe through this wrapper (prefix creation, quiet
# wine). Debian's wine64 package puts wine64 outside PATH, so look there too.
find_program(ARBOR_WINE64 NAMES wine64 PATHS /usr/lib/wine NO_CMAKE_FIND_ROOT_PATH)
if(ARBOR_WINE64)
  get_filename_component(_arbor_wine_run "${CMAKE_CURRENT_LIST_DIR}/../../scripts/wine-run"
                         ABSOLUTE)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${_arbor_wine_run};${ARBOR_WINE64}")
else()
  message(WARNING "wine64 not found: the Windows tests can be built but not run here")
endif()
