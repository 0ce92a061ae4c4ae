// The translation unit that owns the precompiled LibTorch headers of libraries and plugins
// (share/cmake/modules/SuperoffloadPch.cmake). It has no code of its own.
