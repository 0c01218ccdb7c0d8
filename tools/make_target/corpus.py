"""The corpus: real Python code that a Debian package ships (the CPython 3.11 standard library and
its test suite, PSF License 2.0), split by file into the target's training, validation and
held-out parts.

A source is a directory: either .deb files (extracted here with `dpkg-deb -x`, so the package
versions are known and recorded) or a tree of .py files. `fetch_debs` downloads the packages with
`apt-get download` (Debian's registry; no hub)."""
import hashlib
import os
import shutil
import subprocess
import tempfile

PACKAGES = ["libpython3.11-minimal", "libpython3.11-stdlib", "libpython3.11-testsuite"]
LICENCE = "PSF-2.0 (Python Software Foundation License Version 2; /usr/share/doc/libpython3.11-stdlib/copyright)"
MAX_FILE_BYTES = 400_000  # a few generated tables (unicode data) would dominate otherwise

# Each file goes to one part by a hash of its path inside the package (stable across machines):
# the target never sees val, prompts or eval; the drafter's prompts and its held-out (tau)
# prompts come from files of their own. The shares (percent) are --split's.
PART_NAMES = ("train", "val", "prompts", "eval")
DEFAULT_SPLIT = (85, 3, 9, 3)


def parse_split(text):
    """'85,3,9,3' -> (85, 3, 9, 3): train, val, prompts, eval percentages adding up to 100."""
    try:
        shares = tuple(int(x) for x in text.split(","))
    except ValueError:
        shares = ()
    if len(shares) != 4 or sum(shares) != 100 or min(shares) < 1:
        raise SystemExit(f"make-target: --split {text}: give four whole percentages TRAIN,VAL,PROMPTS,EVAL, each "
                         "at least 1, adding up to 100 (default 85,3,9,3)")
    return shares


def part_of(relpath, split):
    bucket = int(hashlib.sha1(relpath.encode()).hexdigest()[:8], 16) % 100
    for name, share in zip(PART_NAMES, split):
        if bucket < share:
            return name
        bucket -= share
    raise AssertionError("the split must add up to 100")


def fetch_debs(dest):
    """Downloads PACKAGES into dest (once) and returns dest."""
    os.makedirs(dest, exist_ok=True)
    if not any(f.endswith(".deb") for f in os.listdir(dest)):
        r = subprocess.run(["apt-get", "download", *PACKAGES], cwd=dest, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"make-target: `apt-get download {' '.join(PACKAGES)}` failed in {dest}: {r.stderr.strip()}\n"
                             "run `apt-get update` first, or give --source a directory of .py files "
                             "(e.g. /usr/lib/python3.11)")
    return dest


def _extract(source, work):
    """Returns (tree root, [{package, version}])."""
    debs = sorted(f for f in os.listdir(source) if f.endswith(".deb"))
    if not debs:
        return source, []
    root = os.path.join(work, "corpus-tree")
    os.makedirs(root)
    packages = []
    for d in debs:
        path = os.path.join(source, d)
        subprocess.run(["dpkg-deb", "-x", path, root], check=True)
        fields = subprocess.run(["dpkg-deb", "-f", path, "Package", "Version"], check=True, capture_output=True,
                                text=True).stdout.split("\n")
        info = dict(line.split(": ", 1) for line in fields if ": " in line)
        packages.append({"package": info.get("Package", d), "version": info.get("Version", "?"), "file": d})
    return root, packages


def collect(source, split=DEFAULT_SPLIT):
    """The corpus's documents by part: {part: [(relpath, text)]} sorted by path, and a manifest."""
    if not os.path.isdir(source):
        raise SystemExit(f"make-target: --source {source}: no such directory")
    work = tempfile.mkdtemp(prefix="make-target-")
    try:
        return _collect(source, work, split)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _collect(source, work, split):
    root, packages = _extract(source, work)
    files = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py") and not os.path.islink(os.path.join(d, n)):  # a link points outside the package
                files.append(os.path.relpath(os.path.join(d, n), root))
    files.sort()
    parts = {name: [] for name in PART_NAMES}
    skipped = 0
    digest = hashlib.sha256()
    for rel in files:
        with open(os.path.join(root, rel), "rb") as f:
            raw = f.read()
        if len(raw) > MAX_FILE_BYTES or not raw.strip():
            skipped += 1
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped += 1
            continue
        digest.update(rel.encode() + b"\0" + raw)
        parts[part_of(rel, split)].append((rel, text))
    if not parts["train"] or not parts["eval"] or not parts["prompts"]:
        raise SystemExit(f"make-target: {source} holds too few .py files for a corpus ({len(files)} found)")
    manifest = {
        "what": "Python source code: the CPython 3.11 standard library and its test suite",
        "licence": LICENCE,
        "source": os.path.abspath(source),
        "packages": packages,
        "files": {p: len(v) for p, v in parts.items()},
        "bytes": {p: sum(len(t) for _, t in v) for p, v in parts.items()},
        "skipped_files": skipped,
        "sha256": digest.hexdigest(),
        "split": dict(zip(PART_NAMES, split)),
        "split_rule": "sha1(path inside the package) % 100, parts in the order train, val, prompts, eval",
    }
    return parts, manifest
