#!/usr/bin/env python3
"""src/model's rooms and their one-way dependencies (src/model/meson.build draws the picture).

    io <- ops <- target <- drafter/dflash <- decode <- tools

Fails, naming file:line and the fix, when
  - a file of a room includes a room that it may not use (one above it, or a sibling),
  - shape/ (compiled into hsring_config, no torch) includes torch or any torch room,
  - a source file sits in src/model itself rather than in a room, or in a folder that is no room,
  - a room's .cpp is not built (not named in src/model/meson.build, or src/config/meson.build for
    shape/), so it would be silently left out,
  - a library outside the torch side (common, config, ring, ledger, supervisor, cli, ...) includes
    src/model's torch rooms.
Usage: check_rooms.py SOURCE_ROOT
"""
import pathlib
import re
import sys

# room -> the rooms its files may include (besides their own)
ALLOWED = {
    "shape": set(),
    "io": set(),
    "ops": {"io"},
    "target": {"ops", "io"},
    "drafter/interface": {"target", "ops", "io"},
    "drafter/dflash": {"drafter/interface", "target", "ops", "io"},
    "drafter/eagle3": {"drafter/interface", "target", "ops", "io"},
    "drafter/registry": {"drafter/dflash", "drafter/eagle3", "drafter/interface", "target", "ops", "io"},
    "decode": {"drafter/registry", "drafter/dflash", "drafter/eagle3", "drafter/interface", "target", "ops", "io"},
    "tools": {"decode", "drafter/registry", "drafter/dflash", "drafter/eagle3", "drafter/interface", "target", "ops",
              "io"},
    "pch": set(),
}
TORCH_ROOMS = {"io", "ops", "target", "drafter/interface", "drafter/dflash", "drafter/eagle3", "drafter/registry",
               "decode", "tools"}
# src/ folders that may include the torch rooms (they link torch); every other one may not.
TORCH_USERS = {"model", "worker"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def room_of(rel: pathlib.PurePosixPath):
    """The room of a path relative to src/model (longest room name that is a prefix)."""
    s = rel.as_posix()
    best = None
    for room in ALLOWED:
        if s.startswith(room + "/") and (best is None or len(room) > len(best)):
            best = room
    return best


def included_room(header: str):
    if not header.startswith("model/"):
        return None
    return room_of(pathlib.PurePosixPath(header[len("model/"):])) or "?"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    model = root / "src" / "model"
    errors = []
    built = (model / "meson.build").read_text() + (root / "src" / "config" / "meson.build").read_text()
    for path in sorted(model.rglob("*")):
        if not path.is_file() or path.suffix not in (".cpp", ".hpp", ".h", ".cu"):
            continue
        rel = path.relative_to(model)
        room = room_of(pathlib.PurePosixPath(rel.as_posix()))
        where = f"src/model/{rel.as_posix()}"
        if room is None:
            errors.append(f"{where}: not in a room: move it into one of "
                          f"{', '.join('src/model/' + r + '/' for r in ALLOWED if r != 'pch')}")
            continue
        if path.suffix == ".cpp" and room not in ("tools", "pch"):
            name = rel.as_posix() if room != "shape" else "../model/" + rel.as_posix()
            if f"'{name}'" not in built:
                errors.append(f"{where}: not built: name '{name}' in "
                              f"{'src/config/meson.build' if room == 'shape' else 'src/model/meson.build'}")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if room == "shape" and (inc.startswith(("torch/", "ATen/", "c10/")) or inc.startswith("model/")):
                errors.append(f"{where}:{n}: shape/ is compiled without torch into hsring_config: "
                              f"it may not include {inc}")
                continue
            target = included_room(inc)
            if target is None or target == room:
                continue
            if target == "?":
                errors.append(f"{where}:{n}: {inc} is in no room of src/model")
            elif target not in ALLOWED[room]:
                may = ", ".join(sorted(ALLOWED[room])) or "no other room"
                errors.append(f"{where}:{n}: room {room}/ may not include {inc} (room {target}/): "
                              f"{room}/ uses {may}; move the shared code down into a room both may use")
    for path in sorted((root / "src").rglob("*")):
        if not path.is_file() or path.suffix not in (".cpp", ".hpp", ".h", ".cu"):
            continue
        top = path.relative_to(root / "src").parts[0]
        if top in TORCH_USERS:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and included_room(m.group(1)) in TORCH_ROOMS:
                errors.append(f"{path.relative_to(root).as_posix()}:{n}: src/{top} links no torch: "
                              f"it may not include {m.group(1)}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_rooms: {len(errors)} problem(s); the rooms and what each may use: "
              f"tests/model/check_rooms.py ALLOWED, src/model/meson.build", file=sys.stderr)
        return 1
    print("check_rooms: src/model rooms and their dependencies are one-way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
