// Precompiled header of the model test executable (torch + doctest compiled once for all files).
#pragma once
#include <ATen/ATen.h>
#include <doctest/doctest.h>
#include <torch/torch.h>
