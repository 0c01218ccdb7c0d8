// First in test_model's sources: torch (whose c10 logging defines a one-argument CHECK) before
// doctest (whose CHECK the tests use), so each later file's includes are no-ops in a unity build
// and the macro that wins is doctest's. In a file-by-file build the precompiled header does the same.
#include <ATen/ATen.h>
#include <torch/torch.h>
#include <doctest/doctest.h>
