"""check_rooms.py catches what it promises over the whole of src/: a library that includes one above
it or beside it (the ring including the config), a public header that no library owns, and code
outside a drafter type's places that tests the type's name, each as
FILE:LINE with the rule; a tree that keeps its layers passes. A small tree of its own, so the real
one's state does not matter."""
import subprocess
import sys
import tempfile
from pathlib import Path

CHECK = Path(__file__).resolve().parent / "check_rooms.py"


def tree(root: Path, ring_includes: str, extra_header: bool, config_code: str = ""):
    for d in ("src/ring", "src/config", "src/model/drafter/dflash", "src/common", "include/hsring"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "src/model/meson.build").write_text("")
    (root / "src/config/meson.build").write_text("'../model/drafter/dflash/kind.cpp'")
    (root / "include/hsring/config.hpp").write_text('#pragma once\n#include "hsring/ring.hpp"\n')
    (root / "include/hsring/ring.hpp").write_text(f'#pragma once\n#include "hsring/units.hpp"\n{ring_includes}')
    (root / "include/hsring/units.hpp").write_text("#pragma once\n")
    (root / "src/ring/layout.cpp").write_text('#include "hsring/ring.hpp"\n#include "shm/region.hpp"\n')
    (root / "src/config/derive.cpp").write_text(f'#include "hsring/config.hpp"\n// [drafter] type = "dflash"\n{config_code}')
    (root / "src/model/drafter/dflash/kind.cpp").write_text('const char* t = "dflash";\n')
    if extra_header:
        (root / "include/hsring/orphan.hpp").write_text("#pragma once\n")


def check(ring_includes="", extra_header=False, config_code=""):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        tree(root, ring_includes, extra_header, config_code)
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
    rc, out = check(config_code='bool dflash = type == "dflash";\n')
    if rc != 1 or 'src/config/derive.cpp:3: tests the drafter type\'s name "dflash"' not in out:
        failed.append(f"code outside the type's places testing its name must fail (its folder and comments pass):\n{out}")
    for f in failed:
        print("FAIL", f)
    print("ok" if not failed else f"{len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
