#!/usr/bin/env python3
"""src/'s libraries and src/model's rooms, and their one-way dependencies.

The libraries of src/ (src/meson.build builds them bottom up), each with the ones it may include:

    common <- data, shm, kernels, tensorboard <- metrics
    shm <- ring;  shm + data <- ledger          (the floor: none of them includes the config)
    config (over the floor's types) <- transport, distributed, model, plan, supervisor <- drill, cli
    worker: model + ledger + transport + distributed

The public headers in include/hsring/ belong to the library that owns them (HEADER_OWNER below).
src/model's rooms (src/model/meson.build draws the picture):

    io <- ops <- target <- drafter/dflash <- decode <- tools

Fails, naming file:line and the fix, when
  - a file of a library (or a public header it owns) includes a library it may not use: one above
    it, or a sibling (LAYERS), or a public header no library owns,
  - code outside a drafter type's places tests the type's name ("dflash", "eagle3" in a string
    literal, comments aside): ask its DrafterKind, DrafterPlan or the registry instead (TYPE_NAME_PLACES),
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

# src/ library -> the libraries its files may include (besides its own). src/model/shape is compiled
# into hsring_config and counts as config.
LAYERS = {
    "common": set(),
    "tensorboard": {"common"},
    "metrics": {"common", "tensorboard"},
    "data": {"common"},
    "shm": {"common"},
    "ring": {"common", "shm"},
    "ledger": {"common", "shm", "data"},
    "config": {"common", "data", "shm", "ring"},  # the floor's types (derive fills the ring geometry)
    "transport": {"common", "shm", "ring", "config"},
    "kernels": {"common"},
    "model": {"common", "config", "data", "kernels"},
    "distributed": {"common", "config"},
    "plan": {"common", "config", "data", "shm", "ring", "ledger"},
    "supervisor": {"common", "config", "data", "shm", "ring", "ledger", "metrics"},
    "drill": {"common", "config", "data", "shm", "ring", "ledger", "metrics", "supervisor"},
    "worker": {"common", "config", "data", "shm", "ring", "ledger", "metrics", "transport", "kernels", "model",
               "distributed"},
    "cli": {"common", "config", "data", "shm", "ring", "ledger", "metrics", "plan", "supervisor", "drill"},
}
# include/hsring/<header> -> the library that owns it (its code, or the layer of what it declares).
HEADER_OWNER = {
    "acceptance.hpp": "common", "attention_keys.hpp": "common", "error.hpp": "common", "fault.hpp": "common",
    "free_port.hpp": "common", "log.hpp": "common", "programs.hpp": "common", "safe_file.hpp": "common",
    "units.hpp": "common", "wall_clock.hpp": "common", "worker_contract.hpp": "common",
    "dataset.hpp": "data", "on_bad_line.hpp": "data", "slot_plan.hpp": "data",
    "huge_pages.hpp": "shm", "liveness.hpp": "shm", "region_info.hpp": "shm", "run_tag.hpp": "shm",
    "ring.hpp": "ring", "ring_geometry.hpp": "ring",
    "ledger.hpp": "ledger", "train_log.hpp": "ledger", "status_board.hpp": "ledger", "eval_board.hpp": "ledger",
    "config.hpp": "config", "config_rewrite.hpp": "config", "dataset_options.hpp": "config", "drafter_kind.hpp": "config",
    "model_shape.hpp": "config", "rope_scaling_json.hpp": "config", "run_identity.hpp": "config",
    "stop_tokens.hpp": "config",
    "metrics_file.hpp": "metrics",
    "cuda_util.hpp": "transport", "slot_rows.hpp": "transport", "transport.hpp": "transport",
}

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


# Where a drafter type's name may stand in code, besides its own folder src/model/drafter/<type>/:
# the tables that list the types, the planner's part of each type, and the defaults. Debt, each to
# go: check_drafter.cpp picks DFlash's own checks by name.
TYPE_NAME_PLACES = {
    "src/model/drafter/registry/registry.cpp", "src/model/drafter/registry/registry.hpp",
    "src/config/drafter_kinds.cpp", "src/plan/drafter_plans.cpp",
    "src/plan/dflash_memory.cpp", "src/plan/eagle3_memory.cpp",
    "include/hsring/config.hpp", "src/model/drafter/interface/trainable_drafter.hpp",
    "src/model/tools/check_drafter.cpp",
}


def check_type_names(root: pathlib.Path, errors: list):
    drafters = root / "src" / "model" / "drafter"
    types = sorted(d.name for d in drafters.iterdir() if d.is_dir() and d.name not in ("interface", "registry")) \
        if drafters.is_dir() else []
    files = [p for p in sorted((root / "src").rglob("*")) if p.is_file() and p.suffix in (".cpp", ".hpp", ".h", ".cu")]
    files += sorted((root / "include" / "hsring").glob("*.hpp"))
    for path in files:
        where = path.relative_to(root).as_posix()
        if where in TYPE_NAME_PLACES or any(where.startswith(f"src/model/drafter/{t}/") for t in types):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("//", 1)[0]
            for t in types:
                if f'"{t}"' in code:
                    errors.append(f"{where}:{n}: tests the drafter type's name \"{t}\": ask its DrafterKind "
                                  f"(hsring/drafter_kind.hpp), DrafterPlan (src/plan/drafter_plan.hpp) or the registry "
                                  f"(src/model/drafter/registry) instead")


def is_kind(rel: str) -> bool:
    """A drafter type's torch-free half (src/model/drafter/<type>/kind.cpp), compiled into hsring_config."""
    parts = rel.split("/")
    return len(parts) == 5 and parts[:3] == ["src", "model", "drafter"] and parts[4] == "kind.cpp"


def library_of(path: pathlib.Path, root: pathlib.Path):
    """The src/ library of a source file or public header (None: a public header no one owns)."""
    rel = path.relative_to(root).as_posix()
    if rel.startswith("include/hsring/"):
        return HEADER_OWNER.get(rel[len("include/hsring/"):])
    parts = rel.split("/")
    if parts[1] == "model" and len(parts) > 2 and (parts[2] == "shape" or is_kind(rel)):
        return "config"
    return parts[1]


def included_library(header: str, here: str):
    """The library an #include "..." names: hsring/X -> its owner, lib/... -> lib, a bare name -> here."""
    if header.startswith("hsring/"):
        return HEADER_OWNER.get(header[len("hsring/"):], "?")
    if header.startswith("model/shape/"):
        return "config"
    head = header.split("/")[0]
    return head if "/" in header and head in LAYERS else here


def check_layers(root: pathlib.Path, errors: list):
    files = [p for p in sorted((root / "src").rglob("*")) if p.is_file() and p.suffix in (".cpp", ".hpp", ".h", ".cu", ".cuh")]
    files += sorted((root / "include" / "hsring").glob("*.hpp"))
    for path in files:
        where = path.relative_to(root).as_posix()
        lib = library_of(path, root)
        if lib is None:
            errors.append(f"{where}: a public header that no library owns: add it to HEADER_OWNER in "
                          f"tests/model/check_rooms.py (the lowest library whose code it declares)")
            continue
        if lib not in LAYERS:
            errors.append(f"{where}: src/{lib}/ is no library of LAYERS in tests/model/check_rooms.py: add it with "
                          f"the libraries it may use")
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or not line.lstrip().startswith("#") or '"' not in line:
                continue
            inc = m.group(1)
            target = included_library(inc, lib)
            if target == lib:
                continue
            if target == "?":
                errors.append(f"{where}:{n}: {inc}: a public header that no library owns (HEADER_OWNER)")
            elif target not in LAYERS[lib]:
                may = ", ".join(sorted(LAYERS[lib])) or "nothing below it"
                errors.append(f"{where}:{n}: {lib} may not include {inc} ({target}: above it or beside it): {lib} "
                              f"uses {may}; move what it needs down into a header of a library it may use")


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    model = root / "src" / "model"
    errors = []
    check_layers(root, errors)
    check_type_names(root, errors)
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
        torch_free = room == "shape" or is_kind(where)
        if path.suffix == ".cpp" and room not in ("tools", "pch"):
            name = rel.as_posix() if not torch_free else "../model/" + rel.as_posix()
            if f"'{name}'" not in built:
                errors.append(f"{where}: not built: name '{name}' in "
                              f"{'src/config/meson.build' if torch_free else 'src/model/meson.build'}")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if torch_free and (inc.startswith(("torch/", "ATen/", "c10/")) or inc.startswith("model/")):
                errors.append(f"{where}:{n}: {'shape/' if room == 'shape' else 'a drafter kind'} is compiled without "
                              f"torch into hsring_config: it may not include {inc}")
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
        print(f"check_rooms: {len(errors)} problem(s); the libraries and rooms and what each may use: "
              f"tests/model/check_rooms.py LAYERS and ALLOWED, src/model/meson.build", file=sys.stderr)
        return 1
    print("check_rooms: src/'s libraries and src/model's rooms depend one way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
