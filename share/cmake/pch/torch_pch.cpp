// The translation unit that owns the precompiled LibTorch headers of the libraries, plugins
// and executables (share/cmake/modules/SuperoffloadPch.cmake). It has no code of its own.
