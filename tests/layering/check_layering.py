#!/usr/bin/env python3
"""The layering rule of src/ and include/superoffload/: each folder is one library and may
include headers only from itself and the folders below it, as listed in ALLOWED. Reads every
#include "folder/..." of every source and header and fails naming each include that breaks
the rule, and any folder the table does not know (a new folder must be placed in it).

    check_layering.py SOURCE_DIR
    check_layering.py --self-test   (the check finds a planted upward include)
"""
import pathlib
import re
import sys

# folder -> folders it may include (besides itself). Lower layers first.
ALLOWED = {
    "base": set(),
    "config": {"base"},
    "cluster": {"base"},
    "resctrl": {"base"},
    "io": {"base", "cluster"},
    "model": {"base"},
    # Chat templates: torch-free, below data (which renders them).
    "jinja": {"base"},
    # Labels are written by the data pipeline and skipped by the model: model/labels.hpp.
    "data": {"base", "config", "cluster", "io", "model", "jinja"},
    "model_io": {"base", "config", "cluster", "io", "model"},
    "comm": {"base", "cluster"},
    # The engine's communicator follows [runtime] comm_backend (config/choices.hpp).
    "zero": {"base", "config", "cluster", "comm", "model"},
    "optim": {"base", "config", "cluster", "comm", "model", "zero"},
    "train": {"base", "config", "cluster", "resctrl", "io", "model", "jinja", "data", "model_io", "comm", "zero", "optim"},
    "app": {"base", "config", "cluster", "resctrl", "io", "model", "jinja", "data", "model_io", "comm", "zero", "optim", "train"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:superoffload/)?([a-z_0-9]+)/[^">]+[">]', re.M)


def folders(root: pathlib.Path):
    """(folder name, path) of every library folder: src/<folder> and include/superoffload/<folder>."""
    for parent in (p for p in (root / "src", root / "include" / "superoffload") if p.is_dir()):
        for path in sorted(p for p in parent.iterdir() if p.is_dir()):
            yield path.name, path


def check(root: pathlib.Path):
    problems, checked = [], 0
    for name, path in folders(root):
        if name not in ALLOWED:
            problems.append(f"{path.relative_to(root)}: folder not in the layering table of {__file__}")
            continue
        for source in sorted(path.rglob("*")):
            if source.suffix not in {".h", ".hpp", ".cpp", ".in"}:
                continue
            for match in INCLUDE.finditer(source.read_text(errors="replace")):
                checked += 1
                target = match.group(1)
                if target == name or target not in ALLOWED:  # system and library headers
                    continue
                if target not in ALLOWED[name]:
                    line = source.read_text(errors="replace")[: match.start()].count("\n") + 1
                    problems.append(f"{source.relative_to(root)}:{line}: {name}/ must not include {target}/ "
                                    f"({match.group(0).strip()})")
    return problems, checked


def self_test() -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "include" / "superoffload" / "base").mkdir(parents=True)
        (root / "src" / "zero").mkdir(parents=True)
        (root / "src" / "unknown").mkdir(parents=True)
        (root / "src" / "zero" / "engine.cpp").write_text('#include "zero/engine.hpp"\n#include <ATen/ATen.h>\n'
                                                          '#include "optim/optimizer.hpp"\n')
        (root / "include" / "superoffload" / "base" / "error.hpp").write_text('#include "train/step.hpp"\n')
        problems, _ = check(root)
    expected = ["zero/ must not include optim/", "base/ must not include train/", "src/unknown: folder not in"]
    missing = [e for e in expected if not any(e in p for p in problems)]
    print("\n".join(problems))
    print("self-test:", "missed " + ", ".join(missing) if missing else "every planted problem found")
    return 1 if missing or len(problems) != len(expected) else 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    problems, checked = check(pathlib.Path(sys.argv[1]).resolve())
    for problem in problems:
        print(problem)
    print(f"layering: {checked} includes checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
