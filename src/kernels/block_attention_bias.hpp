#pragma once
// The block attention's additive masks, every group's in one launch
// (src/kernels/block_attention_bias.cu; the layout is model/ops/attention.hpp's BlockAttention).
//
// Group g's bias is a contiguous [rows_g, key_len_g] matrix at out + offset_g. Its row r is mask
// row mask_row_g + r, which sees key columns [0, ctx_end) and [own_begin, own_begin + block):
//   bias[r][c] = 0 where c < ctx_end[row] or own_begin[row] <= c < own_begin[row] + block, else -inf
// (ATen built each group's mask with ~10 small kernels: 320 launches per step, most of the host
// time the GPU waited for at the start of a step).
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

#include <cstdint>

namespace hsring::kernels {

struct BlockBiasArgs {
    void* out = nullptr;                   // every group's bias, dtype `dtype`
    const std::int64_t* groups = nullptr;  // device, per group {offset, mask_row, rows, key_len}
    std::int64_t num_groups = 0;
    std::int64_t max_elements = 0;         // the largest rows * key_len of a group
    const std::int64_t* ctx_end = nullptr;    // device, per mask row
    const std::int64_t* own_begin = nullptr;  // device, per mask row
    std::int64_t block_size = 0;
    bool vectorized = false;  // every key_len and offset a multiple of 16 bytes of elements, out 16-byte aligned
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;   // cudaStream_t
};

// Enqueues the masks on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus block_attention_bias(const BlockBiasArgs& args);

// Elements per 16-byte access for `dtype`: what `vectorized` needs key lengths and offsets to be
// multiples of.
int block_bias_vector_width(Dtype dtype);

} // namespace hsring::kernels
