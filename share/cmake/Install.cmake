# Installation: the program, the plugins, and a CMake package (find_package(superoffload))
# with the model library and headers, so that plugins can be built out of tree.
include(CMakePackageConfigHelpers)

# Installed binaries find our libraries relative to themselves, and LibTorch (and the NCCL
# of its wheel) where they were at build time. MPI, HDF5 … are added by
# CMAKE_INSTALL_RPATH_USE_LINK_PATH; LibTorch is named explicitly because a project-local
# .venv lies inside the source tree, which that mechanism skips.
set(_external_rpath "${SUPEROFFLOAD_TORCH_LIB_DIR}")
if(SUPEROFFLOAD_NCCL_LIBRARY)
  get_filename_component(_nccl_dir "${SUPEROFFLOAD_NCCL_LIBRARY}" DIRECTORY)
  list(APPEND _external_rpath "${_nccl_dir}")
endif()
set_target_properties(superoffload PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR};${_external_rpath}")
set_target_properties(superoffload_base superoffload_model PROPERTIES INSTALL_RPATH "$ORIGIN;${_external_rpath}")
foreach(plugin llama gpt2 moe)
  set_target_properties(superoffload_plugin_${plugin} PROPERTIES INSTALL_RPATH "$ORIGIN/../..;${_external_rpath}")
  install(TARGETS superoffload_plugin_${plugin} LIBRARY DESTINATION ${SUPEROFFLOAD_INSTALL_PLUGIN_DIR})
endforeach()

# superoffload_torch: what the model library links for LibTorch (share/cmake/modules/SuperoffloadTorch.cmake).
set(_exported superoffload_base superoffload_model)
if(TARGET superoffload_torch)
  list(APPEND _exported superoffload_torch)
  set_target_properties(superoffload_torch PROPERTIES EXPORT_NAME torch)
endif()
install(TARGETS ${_exported} EXPORT superoffloadTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/superoffload)
set_target_properties(superoffload_base PROPERTIES EXPORT_NAME base)
set_target_properties(superoffload_model PROPERTIES EXPORT_NAME model)

# The headers a plugin includes: include/superoffload/ is exactly the installed set (the
# plugin ABI; its hash is the ABI tag, see share/cmake/SuperoffloadPluginAbiTag.cmake).
install(DIRECTORY include/superoffload DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_package_dir ${CMAKE_INSTALL_LIBDIR}/cmake/superoffload)
install(EXPORT superoffloadTargets NAMESPACE superoffload:: DESTINATION ${_package_dir})
configure_package_config_file(share/cmake/superoffloadConfig.cmake.in
  "${PROJECT_BINARY_DIR}/superoffloadConfig.cmake"
  INSTALL_DESTINATION ${_package_dir}
  PATH_VARS SUPEROFFLOAD_INSTALL_PLUGIN_DIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/superoffloadConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/superoffloadConfig.cmake" "${PROJECT_BINARY_DIR}/superoffloadConfigVersion.cmake"
  share/cmake/SuperoffloadPlugin.cmake share/cmake/SuperoffloadPluginAbiTag.cmake DESTINATION ${_package_dir})
