# Helpers for the command-line tests. Environment from CTest: SO_BIN (build/bin/superoffload),
# SO_SOURCE_DIR, MPIEXEC; mpirun's run-as-root variables are set by CTest too.
set -uo pipefail

fail() {
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# expect_contains "haystack" "needle" "what"
expect_contains() {
  [[ $1 == *"$2"* ]] || fail "$3: expected to find '$2' in:
$1"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
