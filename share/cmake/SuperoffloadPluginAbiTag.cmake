# superoffload_plugin_abi_tag(<include_dir> <out_var>)
#
# The plugin ABI tag: the first 16 hex digits of a SHA-256 over every header under
# <include_dir>/superoffload (relative path and bytes, in sorted order). The host computes it
# from the headers it is built with; superoffload_add_plugin() computes it again from the
# headers the plugin is built against and compiles it into the plugin's descriptor, so a
# plugin built against any other version of the installed headers is refused at load time
# with both tags named. Any byte changes the tag, comments included: rebuilding plugins is
# the safe answer to an edited contract. Used by the build and by the installed package.
function(superoffload_plugin_abi_tag include_dir out_var)
  file(GLOB_RECURSE headers RELATIVE "${include_dir}" "${include_dir}/superoffload/*.h" "${include_dir}/superoffload/*.hpp")
  list(SORT headers)
  if(NOT headers)
    message(FATAL_ERROR "superoffload_plugin_abi_tag: no headers under ${include_dir}/superoffload")
  endif()
  set(text "")
  foreach(header IN LISTS headers)
    file(READ "${include_dir}/${header}" content)
    string(APPEND text "${header}\n${content}\n")
    # A changed header must re-run the configure step that computed the tag.
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${include_dir}/${header}")
  endforeach()
  string(SHA256 hash "${text}")
  string(SUBSTRING "${hash}" 0 16 tag)
  set(${out_var} "${tag}" PARENT_SCOPE)
endfunction()
