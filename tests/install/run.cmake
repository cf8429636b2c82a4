# Installs the build tree into a scratch prefix and checks what it holds (the users' headers,
# whole, and nothing of arbor's internals), then configures, builds and runs a tiny downstream
# project that finds arbor with find_package(arbor) and links arbor::runtime, and the same
# program by the README's pkg-config recipe, in the prefix and once more after moving the tree.
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

# The same program built without CMake, from the installed pkg-config file, by the README's
# recipe as a user types it: PKG_CONFIG_PATH and nothing else (no --define-variable: the file
# must be right for wherever the tree was installed). Then again after the tree is moved, which
# only a relocatable file survives. A .pc naming the configure-time prefix (/usr/local) fails
# both: its -I and -L point where arbor is not.
file(GLOB_RECURSE pc_files "${prefix}/*/arbor.pc")
list(LENGTH pc_files pc_count)
if(NOT pc_count EQUAL 1)
  message(FATAL_ERROR "expected one installed arbor.pc, found: ${pc_files}")
endif()
file(RELATIVE_PATH pc_subdir "${prefix}" "${pc_files}")
get_filename_component(pc_subdir "${pc_subdir}" DIRECTORY)

function(build_with_pkg_config root name)
  # The variable pkg-config resolves must be this tree, not merely some arbor on the machine.
  execute_process(
    COMMAND env PKG_CONFIG_PATH=${root}/${pc_subdir} pkg-config --variable=includedir arbor
    RESULT_VARIABLE rc OUTPUT_VARIABLE includedir ERROR_VARIABLE err
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config arbor failed: ${err}")
  endif()
  file(REAL_PATH "${includedir}" includedir)
  file(REAL_PATH "${root}/include" expected)
  if(NOT includedir STREQUAL expected)
    message(FATAL_ERROR "arbor.pc in ${root} gives includedir ${includedir}, not ${expected}")
  endif()
  run_step(sh -c "PKG_CONFIG_PATH='${root}/${pc_subdir}' '${CXX}' -std=c++20 \
'${SOURCE_DIR}/tests/install/consumer/main.cpp' -o '${WORK_DIR}/${name}' \
$(PKG_CONFIG_PATH='${root}/${pc_subdir}' pkg-config --cflags --libs --static arbor)")
  run_step("${WORK_DIR}/${name}")
endfunction()

build_with_pkg_config("${prefix}" consumer_pc)
set(moved "${WORK_DIR}/moved")
file(RENAME "${prefix}" "${moved}")
build_with_pkg_config("${moved}" consumer_pc_moved)
message(STATUS "downstream consumer built and ran against ${prefix} (CMake and pkg-config), "
               "and by pkg-config again once the tree moved to ${moved}")
