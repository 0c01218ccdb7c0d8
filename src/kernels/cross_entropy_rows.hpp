#pragma once
// Softmax cross-entropy of a chunk of logit rows in two reads of the logits
// (src/kernels/cross_entropy_rows.cu): one CUDA block per row.
//
//   read 1  the row's max M, its first argmax, S' = sum over j != label of exp(x_j - M) (fp32,
//           online: rescaled whenever the running max grows)
//           S = S' + exp(x_label - M); loss = (M - x_label) + log S     (= -log p_label)
//   read 2  (write_grad) x_j <- p_j = exp(x_j - M) / S, rounded once, in place; the label entry
//           <- p_label - 1 = -S' / S, so a confident row keeps its small gradient (no 1 - p
//           rounded near 1)
//           or, with grad_fp8, the same fp32 values quantised to e4m3 per row into grad_fp8 (the
//           logits left as they are): amax = max(exp(M' - M) / S, S' / S) with M' the largest
//           logit other than the label's, known after read 1, so no third read; scale = amax / 448
//           and the bytes as model/ops/fp8_weights.cpp rounds them ([train] lm_head = "fp8": the
//           gradient's product with the head takes these bytes; the bf16 g and its two quantising
//           reads are gone)
//
// ATen's composition read the [rows, vocab] logits six times and wrote them once (max, a
// three-pass softmax, the sum of the others); this reads them twice and writes once.
// Plain CUDA C++: no torch types cross this header.
#include "kernels/kernel_types.hpp"

namespace hsring::kernels {

struct CrossEntropyRowsArgs {
    void* logits = nullptr;          // [rows, vocab], last dim contiguous; overwritten when write_grad
    std::int64_t rows = 0, vocab = 0, row_stride = 0;  // stride in elements
    const std::int64_t* labels = nullptr;  // [rows]; a label outside [0, vocab) gives a NaN loss
    float* loss = nullptr;           // [rows]: -log p_label
    std::uint8_t* correct = nullptr; // [rows]: 1 when the first argmax is the label
    bool write_grad = false;
    std::uint8_t* grad_fp8 = nullptr;  // write_grad: [rows, vocab] e4m3, contiguous, 16-byte aligned (or null: in place)
    float* grad_scale = nullptr;       // with grad_fp8: [rows] the row's dequantisation scale
    Dtype dtype = Dtype::BFloat16;
    void* stream = nullptr;          // cudaStream_t
};

// Enqueues the rows on args.stream (kernel_types.hpp: LaunchStatus says whose an error is).
LaunchStatus cross_entropy_rows(const CrossEntropyRowsArgs& args);

} // namespace hsring::kernels
