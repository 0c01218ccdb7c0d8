"""data/demo.jsonl is exactly what data/make_demo.py writes (the generator and the file move
together), and every sample trains a DFlash drafter: it has valid anchors under the anchor rule
(src/model/README.md: loss_mask[p] = loss_mask[p+1] = 1 and p + B <= len) at block size 8 (the
demo's) and 16 (DFlash's default)."""
import json
import os
import subprocess
import sys

root = os.environ["HSRING_SOURCE_ROOT"]
for extra in ([], ["--heldout"]):
    r = subprocess.run([sys.executable, os.path.join(root, "data", "make_demo.py"), "--check", *extra])
    if r.returncode != 0:
        sys.exit(r.returncode)

with open(os.path.join(root, "data", "demo.jsonl")) as f:
    for line_no, line in enumerate(f, 1):
        m = json.loads(line)["loss_mask"]
        for block in (8, 16):
            valid = sum(1 for p in range(len(m) - block + 1) if m[p] and m[p + 1])
            if valid < 8:
                print(f"data/demo.jsonl:{line_no}: {valid} valid DFlash anchors at block size {block} (want >= 8)")
                sys.exit(1)
