"""The drafter's data: prompts cut from the corpus's held-out files (parts `prompts` and `eval`,
which the target never trained on), as hsring's pre-tokenized JSONL with no loss mask: the whole
line is the prompt, and the target writes the response (`[data] responses = "target"`)."""
import json

import numpy as np


def make(tok, docs, count, min_len, max_len, seed):
    """`count` prompts of min_len..max_len tokens, each starting at the beginning of a non-blank
    line of a document (documents visited in a seeded order, several prompts per document when
    count is larger than the part)."""
    rng = np.random.default_rng(seed)
    out = []
    order = rng.permutation(len(docs))
    tries = 0
    while len(out) < count:
        if tries > 50 * count:
            raise SystemExit(f"make-target: cannot cut {count} prompts of {min_len}+ tokens from {len(docs)} files")
        _, text = docs[order[tries % len(docs)]]
        tries += 1
        lines = text.split("\n")
        starts = [i for i, line in enumerate(lines) if line.strip()]
        if not starts:
            continue
        first = starts[int(rng.integers(len(starts)))]
        want = int(rng.integers(min_len, max_len + 1))
        ids = _first_ids("\n".join(lines[first:]), tok, want)
        if len(ids) < want:
            continue
        out.append(ids)
    return out


def _first_ids(text, tok, want):
    """The first `want` ids of tok.encode(text) (fewer if it has fewer), encoding a prefix only:
    files reach megabytes, and encoding each one whole per prompt took minutes for 40,000
    prompts. A token that ends before the prefix's last line is the whole text's token too
    (pre-tokens never reach back over a complete line), so only those are kept."""
    cut = text.rfind("\n", 0, 16 * want)
    if len(text) > 16 * want and cut > 0:
        last_line = text.rfind("\n", 0, cut) + 1
        enc = tok.encode(text[:cut])
        safe = [i for i, (_, end) in zip(enc.ids, enc.offsets) if end <= last_line]
        if len(safe) >= want:
            return safe[:want]
    return tok.encode(text).ids[:want]


def write(path, prompts):
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"input_ids": p}, separators=(",", ":")) + "\n")
