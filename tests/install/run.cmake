# Installs the build tree into a scratch prefix, then configures, builds and runs a tiny
# downstream project that finds arbor with find_package(arbor) and links arbor::sched.
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
run_step(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build"
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
run_step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("${WORK_DIR}/build/consumer")
message(STATUS "downstream consumer built and ran against ${prefix}")
