#!/usr/bin/env python3
"""Sums the GPU kernels of a Kineto trace (`hsring-bench drafter --trace FILE`) by kind.

Usage: trace_summary.py TRACE.json [--steps N] [--top K] [--host] [--json] [--last-graph | --graph I | --graphs]

Prints, per step (the trace holds N steps, 2 by default), the milliseconds of GPU kernel time by
kind (GEMM, attention forward/backward, elementwise, reductions, copies, optimizer, other) and the
K kernels that took the most time. Kernel time, not wall time: gaps between kernels (host launch
overhead, syncs) show as the difference between the step's wall time and the kernel sum.
--host adds the host side: CUDA runtime calls (launches, copies, syncs) and the ATen ops with the
most time of their own, so a host-bound loop (decoding: ~1,000 small ops per token) shows where
its wall time goes.
--last-graph: only the kernels of the trace's last CUDA graph launch (the decode engine's last
plain step in `spec-decode --trace`): their count, GPU span and sum, and per kernel name.
--graph I: the same for graph launch I (0 the first, -1 the last).
--graphs: every graph launch in order, one line each: its kernels, GPU span, the GPU idle time
before it (since the previous launch's last kernel) and its host launch time; in a
`spec-decode --trace` a verify step shows as draft, verify and extend launches, told apart by
their kernel counts.
"""
import argparse
import collections
import json
import re
import sys

KINDS = [
    ("attention backward", re.compile(r"(fmha|attention|flash|sdpa|cudnn).*(bwd|bprop|backward|dq|dkdv|grad)", re.I)),
    ("attention forward", re.compile(r"fmha|attention|flash|sdpa|cudnn_generated|cudnn::fusion", re.I)),
    ("gemm", re.compile(r"gemm|sm90_xmma|cutlass.*(wgmma|tensorop)|nvjet|cublas|matmul|s16816|_mma_", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copy / cast", re.compile(r"copy|memcpy|memset|cat_|CatArray|to_copy|direct_copy|index|gather|scatter", re.I)),
    ("reduction / norm / softmax", re.compile(r"reduce|norm|softmax|logsumexp|sum_|max_|welford", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|silu|mul|add|where|fill", re.I)),
]


def kind_of(name):
    for kind, rx in KINDS:
        if rx.search(name):
            return kind
    return "other"


def short(name, n=110):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= n else name[: n - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--last-graph", action="store_true")
    ap.add_argument("--graph", type=int)
    ap.add_argument("--graphs", action="store_true")
    a = ap.parse_args()
    with open(a.trace) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    if a.graphs:
        return graph_list(events)
    if a.last_graph or a.graph is not None:
        return one_graph(events, a.top, -1 if a.graph is None else a.graph)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    if not kernels:
        print(f"{a.trace}: no GPU kernels in the trace (a CPU run, or CUPTI unavailable)", file=sys.stderr)
        return 1
    steps = max(1, a.steps)
    by_kind = collections.defaultdict(float)
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        ms = e["dur"] / 1e3 / steps
        by_kind[kind_of(e["name"])] += ms
        by_name[e["name"]][0] += ms
        by_name[e["name"]][1] += 1
    total = sum(by_kind.values())
    begin = min(e["ts"] for e in kernels)
    end = max(e["ts"] + e["dur"] for e in kernels)
    span_ms = (end - begin) / 1e3 / steps
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[: a.top]
    if a.json:
        print(json.dumps({
            "kernel_ms_per_step": total, "gpu_span_ms_per_step": span_ms,
            "by_kind_ms": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top": [{"name": n, "ms_per_step": v[0], "calls_per_step": v[1] / steps} for n, v in top],
        }))
        return 0
    print(f"{a.trace}: {len(kernels)} kernels over {steps} steps; per step: kernels {total:.1f} ms, "
          f"first kernel start to last kernel end {span_ms:.1f} ms (idle GPU: {span_ms - total:.1f} ms)")
    for kind, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:28s} {ms:8.1f} ms  {100 * ms / total:5.1f}%")
    print(f"top {len(top)} kernels (ms per step, calls per step):")
    for name, (ms, calls) in top:
        print(f"  {ms:8.2f} ms {calls / steps:6.0f}x  {short(name)}")
    if a.host:
        host(events, steps, a.top)
    return 0


def graph_launches(events):
    """Every cudaGraphLaunch in time order, each with the kernels it ran (by correlation id)."""
    launches = sorted((e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"),
                      key=lambda e: e["ts"])
    by_corr = collections.defaultdict(list)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
            by_corr[e.get("args", {}).get("correlation")].append(e)
    return [(l, sorted(by_corr.get(l.get("args", {}).get("correlation"), []), key=lambda e: e["ts"]))
            for l in launches]


def graph_list(events):
    launches = graph_launches(events)
    if not launches:
        print("no cudaGraphLaunch in the trace (run without graphs?)", file=sys.stderr)
        return 1
    prev_end = None
    print(" #  kernels  span ms  kernel sum ms  GPU idle before ms  host launch ms")
    for i, (launch, ks) in enumerate(launches):
        if not ks:
            print(f"{i:3d}  (no kernels in the trace)")
            continue
        span = (ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]) / 1e3
        total = sum(e["dur"] for e in ks) / 1e3
        idle = "" if prev_end is None else f"{(ks[0]['ts'] - prev_end) / 1e3:.3f}"
        print(f"{i:3d} {len(ks):8d} {span:8.3f} {total:14.3f} {idle:>19s} {launch['dur'] / 1e3:15.3f}")
        prev_end = ks[-1]["ts"] + ks[-1]["dur"]
    return 0


def one_graph(events, top, index):
    """The kernels one CUDA graph launch ran (matched by the launch's correlation id)."""
    launches = graph_launches(events)
    if not launches:
        print("no cudaGraphLaunch in the trace (run without graphs?)", file=sys.stderr)
        return 1
    launch, ks = launches[index]
    if not ks:
        print(f"graph launch {index} has no kernels in the trace", file=sys.stderr)
        return 1
    span = (ks[-1]["ts"] + ks[-1]["dur"] - ks[0]["ts"]) / 1e3
    total = sum(e["dur"] for e in ks) / 1e3
    print(f"graph launch {index} of {len(launches)}: {len(ks)} kernels, GPU span {span:.2f} ms, kernel sum "
          f"{total:.2f} ms (gaps {span - total:.2f} ms); host cudaGraphLaunch {launch['dur'] / 1e3:.2f} ms")
    by_name = collections.defaultdict(lambda: [0.0, 0])
    for e in ks:
        by_name[e["name"]][0] += e["dur"] / 1e3
        by_name[e["name"]][1] += 1
    for name, (ms, calls) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {ms:8.3f} ms {calls:5d}x {1e3 * ms / calls:7.1f} us  {short(name)}")
    return 0


def host(events, steps, top):
    """Host time per step: runtime calls by name, and ATen ops by self time (their duration minus
    the ATen ops nested in them on the same thread)."""
    runtime = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") == "cuda_runtime" and "dur" in e:
            runtime[e["name"]][0] += e["dur"] / 1e3 / steps
            runtime[e["name"]][1] += 1
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and "dur" in e), key=lambda e: (e["tid"], e["ts"]))
    own = collections.defaultdict(lambda: [0.0, 0])
    stack = []  # (end, name, [self us]) of the enclosing ops on this thread
    tid = None
    for e in ops:
        if e["tid"] != tid:
            stack, tid = [], e["tid"]
        while stack and stack[-1][0] <= e["ts"]:
            _, name, me = stack.pop()
            own[name][0] += me[0] / 1e3 / steps
        if stack:
            stack[-1][2][0] -= e["dur"]
        own[e["name"]][1] += 1
        stack.append((e["ts"] + e["dur"], e["name"], [e["dur"]]))
    for _, name, me in stack:
        own[name][0] += me[0] / 1e3 / steps
    if ops:
        span = (max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)) / 1e3 / steps
        print(f"host: {len(ops) / steps:.0f} ATen ops per step over {span:.1f} ms "
              f"({1e3 * span / max(1, len(ops) / steps):.1f} us per op)")
    print("CUDA runtime calls (ms per step, calls per step):")
    for name, (ms, calls) in sorted(runtime.items(), key=lambda kv: -kv[1][0])[:10]:
        print(f"  {ms:8.2f} ms {calls / steps:6.0f}x  {name}")
    print(f"top {top} ATen ops by own time (ms per step, calls per step):")
    for name, (ms, calls) in sorted(own.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {ms:8.2f} ms {calls / steps:6.0f}x  {name}")


if __name__ == "__main__":
    sys.exit(main())
