#!/usr/bin/env python3
"""Calls in src/, include/ and plugins/ that compile but do not do what they say in this project,
each with what to use instead. Fails naming the file, line and rule.

- ATen's at::parallel_for / at::parallel_reduce: their parallel body is a `#pragma omp parallel`
  inlined from LibTorch's headers, and our sources are built without -fopenmp, so they run on
  the calling thread alone (random initialisation ran at one core's rate for rounds).

    check_source_rules.py SOURCE_DIR
    check_source_rules.py --self-test   (the check finds planted calls, and not a comment)
"""
import pathlib
import re
import sys

RULES = [
    (re.compile(r"\bat::parallel_(?:for|reduce)\s*[(<]"),
     "at::parallel_for/parallel_reduce run serially here (no -fopenmp): use base::parallel_ranges or "
     "base::parallel_sum (base/parallel_ranges.hpp), or the optimizer's ThreadPool"),
]
FOLDERS = ("src", "include", "plugins")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def check(root: pathlib.Path):
    problems, files = [], 0
    for folder in FOLDERS:
        for source in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if source.suffix not in {".h", ".hpp", ".cpp", ".cu", ".cuh"}:
                continue
            files += 1
            text = source.read_text(errors="replace")
            # Comments may name the calls (as this rule's own header does): blank them, keeping lines.
            code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
            for pattern, advice in RULES:
                for match in pattern.finditer(code):
                    line = code[: match.start()].count("\n") + 1
                    problems.append(f"{source.relative_to(root)}:{line}: {match.group(0).rstrip('(<').strip()}: {advice}")
    return problems, files


def self_test() -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "src" / "model").mkdir(parents=True)
        (root / "plugins" / "moe").mkdir(parents=True)
        (root / "src" / "model" / "a.cpp").write_text(
            "// at::parallel_for( in a comment is fine\nvoid f() {\n  at::parallel_for(0, n, 1, g);\n}\n")
        (root / "plugins" / "moe" / "b.cpp").write_text("auto s = at::parallel_reduce<double>(0, n, 1, 0.0, f, g);\n")
        problems, _ = check(root)
    expected = ["src/model/a.cpp:3: at::parallel_for", "plugins/moe/b.cpp:1: at::parallel_reduce"]
    missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
    print("\n".join(problems))
    print("self-test:", "missed " + ", ".join(missing) if missing else "every planted call found")
    return 1 if missing or len(problems) != len(expected) else 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    problems, files = check(pathlib.Path(sys.argv[1]).resolve())
    for problem in problems:
        print(problem)
    print(f"source rules: {files} files checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
