#!/usr/bin/env python3
"""Checks that every module under src/ includes only headers of the modules it declares.

The modules and their dependencies are read from CMakeLists.txt (`keel_module(NAME
DEP...)`) and src/exec/cuda/CMakeLists.txt (keel_cuda's link line), so the declared
graph is the one place the layering lives. A module may include its own headers and
those of its dependencies, transitively; src/cli (the binary) may include anything.
Run by the build before any module compiles, and by ctest. Exit 1 lists each violation.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
src = root / "src"

deps = {}
for m in re.finditer(r"^keel_module\((\w+)([^)]*)\)", (root / "CMakeLists.txt").read_text(), re.M):
    deps[m.group(1)] = m.group(2).split()
cuda_cmake = src / "exec" / "cuda" / "CMakeLists.txt"
if cuda_cmake.exists():
    link = re.search(r"target_link_libraries\(keel_cuda\s+PUBLIC([^)]*)\)", cuda_cmake.read_text())
    deps["cuda"] = re.findall(r"keel_(\w+)", link.group(1)) if link else []

# Modules that live inside another's folder (longest prefix first).
nested = {"text/jinja": "jinja", "exec/cuda": "cuda", "engine/ipc": "ipc", "engine/tp": "tp"}


def module_of(rel: str):
    for prefix, name in nested.items():
        if rel.startswith(prefix + "/"):
            return name
    head = rel.split("/", 1)[0]
    return head if (head in deps or head == "cli") else None


def closure(name):
    seen, todo = set(), list(deps.get(name, []))
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(deps.get(d, []))
    return seen


include_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
violations = []
for path in sorted(src.rglob("*")):
    if path.suffix not in {".h", ".cpp", ".cu", ".cuh"}:
        continue
    rel = path.relative_to(src).as_posix()
    mod = module_of(rel)
    if mod is None or mod == "cli":
        continue
    allowed = closure(mod) | {mod}
    for inc in include_re.findall(path.read_text(errors="replace")):
        target = module_of(inc) if "/" in inc else None
        if target is not None and target not in allowed:
            violations.append(
                f"src/{rel}: includes {inc}, but module '{mod}' does not depend on '{target}' "
                f"(declared: {' '.join(deps.get(mod, [])) or 'nothing'})")

for v in violations:
    print(v)
if violations:
    print(f"layering: {len(violations)} include(s) cross the declared module graph", file=sys.stderr)
    sys.exit(1)
print(f"layering: ok ({len(deps)} modules)")
