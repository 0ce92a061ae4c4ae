// The translation unit that owns the precompiled LibTorch headers of executables (compiled
// position-independent for executables, which the libraries' header cannot serve).
int main() { return 0; }
