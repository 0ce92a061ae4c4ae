# Build-tree binaries that find their libraries relative to themselves ($ORIGIN), so that a
# build copied elsewhere (bench/gpu_bundle.sh's bundle on a lent GPU machine, a tree moved on
# a cluster's shared file system) runs without its original absolute paths.
#
# Libraries inside the build tree are made relative by CMAKE_BUILD_RPATH_USE_ORIGIN. LibTorch
# and the NCCL of its wheel usually live in the project's .venv/, inside the source tree: for
# those, each binary gets an $ORIGIN-relative entry first in its run path, computed from its
# output directory, so the tree's own .venv (or a link standing in for it) wins wherever the
# tree sits. The absolute entries CMake adds from the link line stay behind them.
#
#   superoffload_origin_rpath()   after every target is defined: applies to all binaries
set(CMAKE_BUILD_RPATH_USE_ORIGIN ON)

function(_so_collect_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _so_collect_targets("${sub}" more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(superoffload_origin_rpath)
  set(external "${SUPEROFFLOAD_TORCH_LIB_DIR}")
  if(SUPEROFFLOAD_NCCL_LIBRARY)
    get_filename_component(nccl_dir "${SUPEROFFLOAD_NCCL_LIBRARY}" DIRECTORY)
    list(APPEND external "${nccl_dir}")
  endif()
  # Only directories that move with the tree: inside the source tree (a project-local .venv).
  set(inside "")
  foreach(dir IN LISTS external)
    get_filename_component(real "${dir}" REALPATH)
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${real}" NORMALIZE under_source)
    if(under_source)
      list(APPEND inside "${real}")
    endif()
  endforeach()
  if(NOT inside)
    return()
  endif()
  _so_collect_targets("${PROJECT_SOURCE_DIR}" targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      get_target_property(output ${target} RUNTIME_OUTPUT_DIRECTORY)
    elseif(type STREQUAL "SHARED_LIBRARY" OR type STREQUAL "MODULE_LIBRARY")
      get_target_property(output ${target} LIBRARY_OUTPUT_DIRECTORY)
    else()
      continue()
    endif()
    if(NOT output)
      continue()
    endif()
    set(entries "")
    foreach(dir IN LISTS inside)
      file(RELATIVE_PATH relative "${output}" "${dir}")
      list(APPEND entries "$ORIGIN/${relative}")
    endforeach()
    get_target_property(existing ${target} BUILD_RPATH)
    if(existing)
      list(APPEND entries ${existing})
    endif()
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${entries}")
  endforeach()
endfunction()
