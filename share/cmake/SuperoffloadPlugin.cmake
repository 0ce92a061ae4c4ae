# superoffload_add_plugin(<name> SOURCES <files...> [OUTPUT_DIRECTORY <dir>] [INCLUDE_DIR <dir>])
#
# Builds a model plugin: a shared module linked against superoffload::model (which brings
# LibTorch), written to the plugin directory the host searches. Used by the plugins in this
# tree and, through find_package(superoffload), by plugins built out of tree. The plugin ABI
# tag is computed from the headers the plugin is compiled against (SUPEROFFLOAD_PLUGIN_INCLUDE_DIR,
# or INCLUDE_DIR: another copy of them, put first on the include path).
include("${CMAKE_CURRENT_LIST_DIR}/SuperoffloadPluginAbiTag.cmake")

function(superoffload_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIRECTORY;INCLUDE_DIR" "SOURCES")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "superoffload_add_plugin(${name}): give SOURCES")
  endif()
  set(include_dir "${SUPEROFFLOAD_PLUGIN_INCLUDE_DIR}")
  if(ARG_INCLUDE_DIR)
    set(include_dir "${ARG_INCLUDE_DIR}")
  endif()
  superoffload_plugin_abi_tag("${include_dir}" abi_tag)
  set(target superoffload_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE superoffload::model)
  target_compile_definitions(${target} PRIVATE SUPEROFFLOAD_PLUGIN_ABI_TAG="${abi_tag}")
  if(ARG_INCLUDE_DIR)
    target_include_directories(${target} BEFORE PRIVATE "${ARG_INCLUDE_DIR}" "${ARG_INCLUDE_DIR}/superoffload")
  endif()
  target_compile_features(${target} PRIVATE cxx_std_20)
  if(COMMAND superoffload_use_torch_pch)  # in superoffload's own build: its precompiled LibTorch headers
    superoffload_use_torch_pch(${target})
  endif()
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
