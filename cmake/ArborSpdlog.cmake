# arbor_find_spdlog(): makes target spdlog::spdlog available to the whole build (called from the
# top-level CMakeLists.txt): to arbor's logging facade (log/) and the layers that log through it,
# and to the example HTTP server, which logs through spdlog itself.
#
# Native builds (and cross builds whose sysroot has a spdlog package) use the compiled spdlog
# that find_package finds. Debian has no mingw-w64 build of spdlog or of fmt, and the host's
# libspdlog.so cannot be linked into a Windows program, so the Windows cross build compiles
# both from the host's headers instead: spdlog and fmt are header-only libraries by design
# (SPDLOG_HEADER_ONLY, FMT_HEADER_ONLY), their headers are portable C++ with Windows branches
# of their own, and Debian's spdlog headers are configured for Debian's fmt (SPDLOG_FMT_EXTERNAL
# in its tweakme.h), so the two match.
#
# The host's headers live in the same directory as its C library's, and a mingw compile must
# never see glibc headers (they would shadow mingw's). So the cross build adds one directory of
# its own, in the build tree, holding nothing but two symlinks: spdlog/ and fmt/.
function(arbor_find_spdlog)
  find_package(spdlog QUIET)
  if(spdlog_FOUND)
    return()
  endif()
  if(NOT (WIN32 AND CMAKE_CROSSCOMPILING))
    find_package(spdlog REQUIRED)  # fails with CMake's own message
  endif()

  # NO_CMAKE_FIND_ROOT_PATH: look on the host, not in the mingw sysroot.
  find_path(ARBOR_HOST_SPDLOG_DIR spdlog/spdlog.h NO_CMAKE_FIND_ROOT_PATH
            DOC "host directory holding spdlog/ (header-only use in the Windows cross build)")
  find_path(ARBOR_HOST_FMT_DIR fmt/format-inl.h NO_CMAKE_FIND_ROOT_PATH
            DOC "host directory holding fmt/ (header-only use in the Windows cross build)")
  if(NOT ARBOR_HOST_SPDLOG_DIR OR NOT ARBOR_HOST_FMT_DIR)
    message(FATAL_ERROR "the Windows cross build needs the host's spdlog and fmt headers "
                        "(Debian: libspdlog-dev, libfmt-dev)")
  endif()

  set(dir ${CMAKE_BINARY_DIR}/spdlog-header-only)
  file(MAKE_DIRECTORY ${dir})
  file(CREATE_LINK ${ARBOR_HOST_SPDLOG_DIR}/spdlog ${dir}/spdlog SYMBOLIC)
  file(CREATE_LINK ${ARBOR_HOST_FMT_DIR}/fmt ${dir}/fmt SYMBOLIC)

  # Imported, so its headers are system headers: arbor's warnings stay on arbor's code.
  add_library(spdlog::spdlog INTERFACE IMPORTED GLOBAL)
  set_target_properties(spdlog::spdlog PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${dir}
    INTERFACE_COMPILE_DEFINITIONS "SPDLOG_HEADER_ONLY;FMT_HEADER_ONLY")
  message(STATUS "arbor: spdlog and fmt header-only from the host's headers (cross build)")
endfunction()
