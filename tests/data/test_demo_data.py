"""data/demo.jsonl is exactly what data/make_demo.py writes (the generator and the file move together)."""
import os
import subprocess
import sys

root = os.environ["HSRING_SOURCE_ROOT"]
r = subprocess.run([sys.executable, os.path.join(root, "data", "make_demo.py"), "--check"])
sys.exit(r.returncode)
