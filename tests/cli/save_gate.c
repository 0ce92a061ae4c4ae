// A gate for fault tests, loaded with LD_PRELOAD: it holds a process at a chosen moment of a
// checkpoint save until the test says go, so that a saboteur (the test script) can fill the disk
// at exactly that moment. It only pauses; the failure the program then meets is the real one of
// the real file system (ENOSPC from a full tmpfs).
//
// SO_SAVE_GATES  comma-separated STEP_DIR:MOMENT, e.g. "step_00000001:A,step_00000004:B":
//                A  the first write to STEP_DIR/rank_00000.h5.partial (rank files being written)
//                B  the first write to STEP_DIR/manifest.json.tmp (every rank file in place, no
//                   manifest yet)
// SO_SAVE_GATE_DIR  where a gate reached writes STEP_DIR.MOMENT.reached and then waits (at most
//                   20 s, well below the test's collective_timeout_s) for STEP_DIR.MOMENT.go;
//                   once the write it held has returned, it writes STEP_DIR.MOMENT.done, so the
//                   test can free the disk before any later write.
// Each gate opens once per process. Without SO_SAVE_GATES the shim does nothing.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum { kMaxGates = 16 };

static struct {
  char step[64];
  char moment;
  int passed;
} gates[kMaxGates];
static int gate_count = -1;  // -1: not parsed yet

static void parse_gates(void) {
  if (gate_count >= 0) return;
  gate_count = 0;
  const char* spec = getenv("SO_SAVE_GATES");
  if (!spec) return;
  char copy[1024];
  snprintf(copy, sizeof copy, "%s", spec);
  for (char* save = NULL, *item = strtok_r(copy, ",", &save); item && gate_count < kMaxGates;
       item = strtok_r(NULL, ",", &save)) {
    char* colon = strchr(item, ':');
    if (!colon || (colon[1] != 'A' && colon[1] != 'B')) continue;
    *colon = '\0';
    snprintf(gates[gate_count].step, sizeof gates[gate_count].step, "%s", item);
    gates[gate_count].moment = colon[1];
    gates[gate_count].passed = 0;
    ++gate_count;
  }
}

static void touch(const char* dir, int g, const char* what) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.%c.%s", dir, gates[g].step, gates[g].moment, what);
  FILE* marker = fopen(path, "w");
  if (marker) fclose(marker);
}

// Holds the caller at gate `g` until the test writes its .go file.
static void hold(int g) {
  gates[g].passed = 1;
  const char* dir = getenv("SO_SAVE_GATE_DIR");
  if (!dir) return;
  char go[PATH_MAX];
  snprintf(go, sizeof go, "%s/%s.%c.go", dir, gates[g].step, gates[g].moment);
  touch(dir, g, "reached");
  const struct timespec tick = {0, 1000000};  // 1 ms
  for (int waited = 0; waited < 20000 && access(go, F_OK) != 0; ++waited) nanosleep(&tick, NULL);
}

static void done(int g) {
  const char* dir = getenv("SO_SAVE_GATE_DIR");
  if (dir) touch(dir, g, "done");
}

// The gate `fd` is a write of, or -1: A on STEP_DIR/rank_00000.h5.partial, B on
// STEP_DIR/manifest.json.tmp.
static int gate_of(int fd) {
  parse_gates();
  if (gate_count == 0) return -1;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return -1;
  path[n] = '\0';
  for (int g = 0; g < gate_count; ++g) {
    if (gates[g].passed) continue;
    const char* at = strstr(path, gates[g].step);
    if (!at) continue;
    const char* file = at + strlen(gates[g].step);
    if (gates[g].moment == 'A' && strcmp(file, "/rank_00000.h5.partial") == 0) return g;
    if (gates[g].moment == 'B' && strcmp(file, "/manifest.json.tmp") == 0) return g;
  }
  return -1;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

// Every write call the program and HDF5 use: held at a gate, then marked done.
#define GATED(call)              \
  const int g = gate_of(fd);     \
  if (g >= 0) hold(g);           \
  const ssize_t result = (call); \
  if (g >= 0) done(g);           \
  return result;

ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) { GATED(NEXT(pwrite)(fd, data, size, offset)) }
ssize_t pwrite64(int fd, const void* data, size_t size, off64_t offset) { GATED(NEXT(pwrite64)(fd, data, size, offset)) }
ssize_t write(int fd, const void* data, size_t size) { GATED(NEXT(write)(fd, data, size)) }
