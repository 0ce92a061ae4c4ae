# Script mode (cmake -DSOURCE_DIR=... -DOUTPUT=... -P GitRevision.cmake): writes the git
# revision function, touching OUTPUT only when the revision changed so builds stay quick.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=10 HEAD
  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR revision STREQUAL "")
  set(revision "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND revision "-dirty")
  endif()
endif()
set(content "// Generated at build time by share/cmake/modules/GitRevision.cmake.\n#include <string>\nstd::string superoffload_git_revision() { return \"${revision}\"; }\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUTPUT}" "${content}")
endif()
