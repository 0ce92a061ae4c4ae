# superoffload_add_plugin(<name> SOURCES <files...> [VERSION <v>])
#
# Builds a model plugin: a shared module linked against superoffload::model (which brings
# LibTorch), written to the plugin directory the host searches. Used by the plugins in this
# tree and, through find_package(superoffload), by plugins built out of tree.
function(superoffload_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIRECTORY" "SOURCES")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "superoffload_add_plugin(${name}): give SOURCES")
  endif()
  set(target superoffload_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE superoffload::model)
  target_compile_features(${target} PRIVATE cxx_std_20)
  # Only the entry point needs to be visible; keeps plugins from clashing with each other.
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME superoffload_${name}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED SUPEROFFLOAD_BUILD_PLUGIN_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${SUPEROFFLOAD_BUILD_PLUGIN_DIR}")
  endif()
endfunction()
