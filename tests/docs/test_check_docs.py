"""check_docs.py catches what it promises: a doc or a code comment naming a repository path that does
not exist, and a citation of DESIGN.md (a file outside the repository), each as FILE:LINE; a tree
without them passes. A small tree of its own, so the real one's state does not matter."""
import subprocess
import sys
import tempfile
from pathlib import Path

CHECK = Path(__file__).resolve().parent / "check_docs.py"


def tree(root: Path, doc: str, comment: str):
    (root / "docs").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "src" / "ring").mkdir(parents=True)
    (root / "config" / "reference.toml").write_text('[run]\nname = "x"\n')
    (root / "src" / "ring" / "ring.cpp").write_text(f"// {comment}\nint x;\n")
    (root / "src" / "ring" / "slot.hpp").write_text("#pragma once\n")
    (root / "README.md").write_text("# t\n\nSee `src/ring/ring.cpp`.\n")
    (root / "docs" / "a.md").write_text(f"# a\n\n{doc}\n")


def check(doc, comment):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        tree(root, doc, comment)
        r = subprocess.run([sys.executable, str(CHECK), "--hsring", "/bin/true", "--root", str(root)],
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr


def main():
    failed = []
    rc, out = check("The slot states are in `src/ring/slot` and src/ring/.", "the ring's slots (src/ring/slot.hpp)")
    if rc != 0:
        failed.append(f"a tree whose paths exist must pass:\n{out}")
    rc, out = check("The ledger is in src/ledger/ledger.cpp.", "see src/ring/slots.hpp")
    if rc != 1 or "docs/a.md:3: names src/ledger/ledger.cpp, which does not exist" not in out \
            or "src/ring/ring.cpp:1: names src/ring/slots.hpp, which does not exist" not in out:
        failed.append(f"a missing path in a doc and in a comment must fail, naming FILE:LINE:\n{out}")
    rc, out = check("Placeholders pass: src/model/drafter/<type>/, RUN_DIR, src/X.", "exactly once (DESIGN.md invariant 4)")
    if rc != 1 or "src/ring/ring.cpp:1: cites DESIGN.md" not in out or "<type>" in out:
        failed.append(f"a DESIGN.md citation must fail, placeholders pass:\n{out}")
    for f in failed:
        print("FAIL", f)
    print("ok" if not failed else f"{len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
