# arbor_add_layer(<layer> SOURCES <file>... [PUBLIC <target>...] [PRIVATE <target>...])
#
# One arbor layer as a library: target arbor_<layer>, alias arbor::<layer>, exported as
# arbor::<layer>, its public headers in <layer>/include, arbor's warnings on its own sources.
function(arbor_add_layer layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
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
endfunction()
