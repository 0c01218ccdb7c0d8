// Precompiled header for the LibTorch worker programs (hsring-target, hsring-drafter).
#pragma once
#include <ATen/ATen.h>
#include <torch/torch.h>
