# Sourced: machine_line prints the CPU model, core count and widest SIMD extension, the line
# every test run and benchmark starts with (a speed or round-off figure holds for a machine).
machine_line() {
  local simd=none flag
  for flag in sve asimd avx2 avx512f amx_tile; do grep -qw "$flag" /proc/cpuinfo && simd=$flag; done
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, widest SIMD: $simd"
}
