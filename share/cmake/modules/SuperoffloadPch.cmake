# Precompiled LibTorch headers. Parsing <ATen/ATen.h> and the module headers takes about
# 11 of the ~16 s a LibTorch translation unit needs on one core; with the headers
# precompiled once and reused, such a unit compiles in ~5 s. GCC accepts a precompiled header
# only where the code-generation flags match: libraries and plugins are compiled with -fPIC,
# and so are the executables' LibTorch units (instead of -fPIE: PIC code links into a PIE
# executable), so that one header serves all. Other flags (defines, warnings, visibility)
# may differ.
#
#   superoffload_use_torch_pch(<target>...)   reuse the header in the sources that include
#                                             LibTorch (no-op when off)
#
# SUPEROFFLOAD_PCH=OFF compiles without it (e.g. to check that every file includes what it uses).
option(SUPEROFFLOAD_PCH "Precompile the LibTorch headers once and reuse them in every target that uses LibTorch" ON)
set(SUPEROFFLOAD_TORCH_PCH_HEADERS <ATen/ATen.h> <torch/nn/module.h> <torch/autograd.h>)
# Where the project's "quoted" includes are found, for the scan below.
set(SUPEROFFLOAD_INCLUDE_ROOTS "${PROJECT_SOURCE_DIR}/include/superoffload" "${PROJECT_SOURCE_DIR}/include"
  "${PROJECT_SOURCE_DIR}/src")

if(SUPEROFFLOAD_PCH)
  add_library(superoffload_torch_pch STATIC "${PROJECT_SOURCE_DIR}/share/cmake/pch/torch_pch.cpp")
  set_target_properties(superoffload_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(superoffload_torch_pch PRIVATE ${SUPEROFFLOAD_TORCH_TARGETS})
  target_compile_features(superoffload_torch_pch PRIVATE cxx_std_20)
  target_precompile_headers(superoffload_torch_pch PRIVATE ${SUPEROFFLOAD_TORCH_PCH_HEADERS})
endif()

# Whether <file> includes LibTorch, directly or through the project's own headers (followed
# through "quoted" includes found in SUPEROFFLOAD_INCLUDE_ROOTS; memoised per configure).
function(_superoffload_includes_torch file out_var)
  get_property(known GLOBAL PROPERTY "_so_torch_${file}" SET)
  if(known)
    get_property(answer GLOBAL PROPERTY "_so_torch_${file}")
    set(${out_var} ${answer} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "_so_torch_${file}" FALSE)  # guards include cycles
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include")
  set(answer FALSE)
  foreach(line IN LISTS lines)
    if(line MATCHES "<(ATen|torch)/" AND NOT line MATCHES "<torch/version.h>")  # the version header is tiny
      set(answer TRUE)
      break()
    endif()
    if(line MATCHES "\"([^\"]+)\"")
      set(header "${CMAKE_MATCH_1}")
      get_filename_component(here "${file}" DIRECTORY)
      foreach(root IN ITEMS "${here}" ${SUPEROFFLOAD_INCLUDE_ROOTS})
        if(EXISTS "${root}/${header}")
          _superoffload_includes_torch("${root}/${header}" nested)
          if(nested)
            set(answer TRUE)
          endif()
          break()
        endif()
      endforeach()
      if(answer)
        break()
      endif()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "_so_torch_${file}" ${answer})
  set(${out_var} ${answer} PARENT_SCOPE)
endfunction()

# Reuses the precompiled LibTorch headers in the sources of <target>s that include LibTorch;
# the others skip them (loading the ~600 MB header costs ~4 s, more than a small unit).
function(superoffload_use_torch_pch)
  if(NOT SUPEROFFLOAD_PCH)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    target_precompile_headers(${target} REUSE_FROM superoffload_torch_pch)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      # -fPIC like the header (CMake would give executables -fPIE); still linked as PIE.
      set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
    get_target_property(sources ${target} SOURCES)
    get_target_property(source_dir ${target} SOURCE_DIR)
    foreach(source IN LISTS sources)
      get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${source_dir}")
      if(NOT path MATCHES "\\.(cpp|cc|cxx)$")
        continue()
      endif()
      set(uses_torch FALSE)  # generated sources (the git revision) are plain
      if(EXISTS "${path}")
        _superoffload_includes_torch("${path}" uses_torch)
      endif()
      # GCC 12 for aarch64 crashes (internal compiler error) on arm_sve.h's
      # `#pragma GCC aarch64 "arm_sve.h"` in a unit that loaded a precompiled header: Highway's
      # SVE targets include it, so such units compile without the header there.
      if(uses_torch AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
        file(STRINGS "${path}" hwy_includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]hwy/")
        if(hwy_includes)
          set(uses_torch FALSE)
        endif()
      endif()
      if(NOT uses_torch)
        set_source_files_properties("${path}" TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endforeach()
endfunction()
