# arbor_add_layer(<layer> SOURCES <file>... [PUBLIC <target>...] [PRIVATE <target>...] [LOGS])
#
# One arbor layer as a library: target arbor_<layer>, alias arbor::<layer>, exported as
# arbor::<layer>, its public headers in <layer>/include, arbor's warnings on its own sources.
# LOGS: the layer logs through arbor's logging facade (log/). It links the facade's header only
# in the build tree (the export never names the never-installed arbor_log) and spdlog
# privately: an installed static library still needs spdlog at a consumer's link time, which
# the exported link-only dependency (and arborConfig's find_dependency) provides.
function(arbor_add_layer layer)
  cmake_parse_arguments(ARG "LOGS" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(arbor_${layer} ${ARG_SOURCES})
  add_library(arbor::${layer} ALIAS arbor_${layer})
  set_target_properties(arbor_${layer} PROPERTIES EXPORT_NAME ${layer} OUTPUT_NAME arbor_${layer})
  target_include_directories(arbor_${layer} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(arbor_${layer} PUBLIC cxx_std_20)
  target_link_libraries(arbor_${layer}
    PUBLIC ${ARG_PUBLIC}
    PRIVATE ${ARG_PRIVATE} $<BUILD_INTERFACE:arbor_warnings>)
  if(ARG_LOGS)
    target_link_libraries(arbor_${layer} PRIVATE $<BUILD_INTERFACE:arbor_log> spdlog::spdlog)
  endif()
endfunction()
