# Installs the build tree into a scratch prefix and checks what it holds (the users' headers,
# whole, and nothing of arbor's internals), then configures, builds and runs a tiny downstream
# project that finds arbor with find_package(arbor) and links arbor::runtime.
# Run by ctest as: cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -DCXX=... -P run.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

run_step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(header arbor/sched/scheduler.hpp arbor/sched/event_tree.hpp arbor/sync/lifo_semaphore.hpp)
  if(NOT EXISTS "${prefix}/include/${header}")
    message(FATAL_ERROR "installed tree lacks include/${header}")
  endif()
endforeach()
# Only what users include is installed: the test hooks, the logging facade and sync's helpers
# for arbor's own layers stay in the build tree.
foreach(header arbor/sched/test_hooks.hpp arbor/internal/log.hpp arbor/sync/timespec.hpp
               arbor/sync/thread_object.hpp)
  if(EXISTS "${prefix}/include/${header}")
    message(FATAL_ERROR "include/${header} is installed; it is not for users")
  endif()
endforeach()
# Consumers need no spdlog headers: no installed header may include one. And the installed
# tree is whole: every arbor header an installed header includes is installed too.
file(GLOB_RECURSE installed_headers "${prefix}/include/arbor/*.hpp")
foreach(header ${installed_headers})
  file(READ "${header}" text)
  if(text MATCHES "spdlog")
    message(FATAL_ERROR "installed header ${header} mentions spdlog")
  endif()
  string(REGEX MATCHALL "#include \"arbor/[^\"]+\"" includes "${text}")
  foreach(line ${includes})
    string(REGEX REPLACE "#include \"(arbor/[^\"]+)\"" "\\1" included "${line}")
    if(NOT EXISTS "${prefix}/include/${included}")
      message(FATAL_ERROR "installed header ${header} includes ${included}, which is not installed")
    endif()
  endforeach()
endforeach()

run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("${WORK_DIR}/build/consumer")

# The same program built without CMake, from the installed pkg-config file.
file(GLOB_RECURSE pc_files "${prefix}/*/arbor.pc")
list(LENGTH pc_files pc_count)
if(NOT pc_count EQUAL 1)
  message(FATAL_ERROR "expected one installed arbor.pc, found: ${pc_files}")
endif()
get_filename_component(pc_dir "${pc_files}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
execute_process(
  COMMAND pkg-config --define-variable=prefix=${prefix} --cflags --libs --static arbor
  RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config arbor failed: ${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run_step(${CXX} "${SOURCE_DIR}/tests/install/consumer/main.cpp" ${flags}
         -o "${WORK_DIR}/consumer_pc")
run_step("${WORK_DIR}/consumer_pc")
message(STATUS "downstream consumer built and ran against ${prefix} (CMake and pkg-config)")
