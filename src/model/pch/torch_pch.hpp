// Precompiled header for the LibTorch translation units (src/model, src/worker, model tests):
// <torch/torch.h> costs ~20 s per translation unit on 2 cores; compiled once per target here.
#pragma once
#include <ATen/ATen.h>
#include <torch/torch.h>
