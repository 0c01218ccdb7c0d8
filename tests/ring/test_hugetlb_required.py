"""ring_hugetlb skips (77) where no huge pages are reserved, but fails where GPU tests are
required (bin/gpu-build sets HSRING_GPU_TESTS=required): there the huge-page path must run."""
import os
import subprocess
import sys

exe = os.path.join(os.environ["HSRING_BUILD_ROOT"], "tests", "ring", "test_ring_hugetlb")
env = dict(os.environ, HSRING_HUGETLBFS="none")
env.pop("HSRING_GPU_TESTS", None)
r = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
ok = r.returncode == 77 and "skipped" in r.stderr
env["HSRING_GPU_TESTS"] = "required"
q = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
ok = ok and q.returncode == 1 and "bin/hugepages" in q.stderr
if not ok:
    print(f"without required: exit {r.returncode}: {r.stderr}\nrequired: exit {q.returncode}: {q.stderr}")
    sys.exit(1)
print("ok: skipped without huge pages; a failure when GPU tests are required")
