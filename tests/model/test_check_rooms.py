"""check_rooms.py catches what it promises over the whole of src/: a library that includes one above
it or beside it (the ring including the config), and a public header that no library owns, each as
FILE:LINE with the rule; a tree that keeps its layers passes. A small tree of its own, so the real
one's state does not matter."""
import subprocess
import sys
import tempfile
from pathlib import Path

CHECK = Path(__file__).resolve().parent / "check_rooms.py"


def tree(root: Path, ring_includes: str, extra_header: bool):
    for d in ("src/ring", "src/config", "src/model", "src/common", "include/hsring"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "src/model/meson.build").write_text("")
    (root / "src/config/meson.build").write_text("")
    (root / "include/hsring/config.hpp").write_text('#pragma once\n#include "hsring/ring.hpp"\n')
    (root / "include/hsring/ring.hpp").write_text(f'#pragma once\n#include "hsring/units.hpp"\n{ring_includes}')
    (root / "include/hsring/units.hpp").write_text("#pragma once\n")
    (root / "src/ring/layout.cpp").write_text('#include "hsring/ring.hpp"\n#include "shm/region.hpp"\n')
    (root / "src/config/derive.cpp").write_text('#include "hsring/config.hpp"\n')
    if extra_header:
        (root / "include/hsring/orphan.hpp").write_text("#pragma once\n")


def check(ring_includes="", extra_header=False):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        tree(root, ring_includes, extra_header)
        r = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr


def main():
    failed = []
    rc, out = check()
    if rc != 0:
        failed.append(f"a tree that keeps its layers must pass (config over ring, ring over shm):\n{out}")
    rc, out = check('#include "hsring/config.hpp"\n')
    if rc != 1 or "include/hsring/ring.hpp:3: ring may not include hsring/config.hpp (config" not in out:
        failed.append(f"the ring including the config must fail, naming FILE:LINE:\n{out}")
    rc, out = check(extra_header=True)
    if rc != 1 or "include/hsring/orphan.hpp: a public header that no library owns" not in out:
        failed.append(f"a public header no library owns must fail:\n{out}")
    for f in failed:
        print("FAIL", f)
    print("ok" if not failed else f"{len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
