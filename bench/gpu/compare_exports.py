"""Compares two exported drafters (HF directories) tensor by tensor: both finite, and how far apart.

    python3 bench/gpu/compare_exports.py DIR_A DIR_B

Prints, over every tensor: the largest absolute difference, the largest relative one
(|a - b| / max(|a|, |b|), over elements with max(|a|, |b|) > 1e-6), the relative Frobenius
distance ||a - b|| / ||a|| of the worst tensor, and whether the files are equal byte for byte.
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file


def load(d: Path):
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def main() -> int:
    a_dir, b_dir = Path(sys.argv[1]), Path(sys.argv[2])
    a, b = load(a_dir), load(b_dir)
    if a.keys() != b.keys():
        print(f"   exports {a_dir} and {b_dir} hold different tensors")
        return 1
    same_bytes = all((a_dir / f.name).read_bytes() == (b_dir / f.name).read_bytes() for f in a_dir.glob("*.safetensors"))
    max_abs = max_rel = worst_fro = 0.0
    worst = ""
    finite = True
    for k in a:
        x, y = a[k].double(), b[k].double()
        finite = finite and bool(torch.isfinite(x).all()) and bool(torch.isfinite(y).all())
        d = (x - y).abs()
        max_abs = max(max_abs, float(d.max()))
        m = torch.maximum(x.abs(), y.abs())
        sel = m > 1e-6
        if sel.any():
            max_rel = max(max_rel, float((d[sel] / m[sel]).max()))
        fro = float(torch.linalg.norm(x - y) / max(float(torch.linalg.norm(x)), 1e-30))
        if fro > worst_fro:
            worst_fro, worst = fro, k
    print(f"   {a_dir} vs {b_dir}: {'equal byte for byte' if same_bytes else 'differ'}; all finite: {finite}; "
          f"max |a-b| {max_abs:.3g}, max relative {max_rel:.3g}, worst ||a-b||/||a|| {worst_fro:.3g} ({worst})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
