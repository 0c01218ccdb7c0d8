#pragma once
// `hsring-bench drafter --type eagle3`: one EAGLE-3 training step at a target preset's dims next
// to the same step in PyTorch eager (bench/python/eagle3_eager.py), measured in the same run.
#include "bench_common.hpp"

namespace hsring::bench {

// The eagle3 mode of hsring-bench-drafter: prints its lines (stdout, or stderr with --json, whose
// stdout is the result line only); returns the exit status (77: no GPU for --device cuda).
int eagle3_mode(const Options& o);

} // namespace hsring::bench
