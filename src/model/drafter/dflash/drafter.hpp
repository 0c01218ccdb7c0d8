#pragma once
// The DFlash drafter (z-lab's DFlashDraftModel), a torch::nn module whose parameter names are
// the public checkpoint names: layers.{i}.self_attn.{q,k,v,o}_proj.weight,
// layers.{i}.self_attn.{q,k}_norm.weight, layers.{i}.mlp.{gate,up,down}_proj.weight,
// layers.{i}.{input,post_attention}_layernorm.weight, fc.weight, hidden_norm.weight, norm.weight.
//
//   context = hidden_norm(fc(concat of the L captured target layers))   [T, H]
//   x       = embed(block tokens)                                       [blocks*B, H]
//   each layer (Qwen3): q from the block only; k/v = k/v_proj of [context rows | block rows]
//                       (same projections), k_norm and RoPE at true positions; block i attends
//                       to context < anchor_i and its own block, non-causally
//   out     = norm(x)                           (logits = target LM head(out), outside)
//
// Precision: parameters are fp32 master weights; forward casts them to the compute dtype
// (bf16 on GPU, fp32 on CPU) differentiably, so gradients land in fp32 on the parameters.
#include "model/ops/attention.hpp"
#include "model/drafter/dflash/blocks.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/interface/modules.hpp"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace hsring::model {

class DFlashAttentionImpl : public torch::nn::Module {
public:
    DFlashAttentionImpl(const DFlashConfig& c, at::Device device);
    Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
    RMSNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(DFlashAttention);

class DFlashMLPImpl : public torch::nn::Module {
public:
    DFlashMLPImpl(const DFlashConfig& c, at::Device device);
    at::Tensor forward(const at::Tensor& x) const;
    Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(DFlashMLP);

class DFlashLayerImpl : public torch::nn::Module {
public:
    DFlashLayerImpl(const DFlashConfig& c, at::Device device);
    // The parameters the layer's forward reads, in the order drafter/dflash/drafter.cpp's LayerWeight names.
    std::vector<at::Tensor> weights() const;
    DFlashAttention self_attn{nullptr};
    DFlashMLP mlp{nullptr};
    RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DFlashLayer);

// Everything a drafter forward needs besides its weights, computed once per batch.
struct DFlashInputs {
    at::Tensor context;        // [L, T, H] captured target layers, layer-major (any float dtype)
    at::Tensor block_embeds;   // [blocks * B, H] target embedding of the block tokens
    const DFlashBlocks* blocks = nullptr;
    at::ScalarType compute_dtype = at::kFloat;
    BlockAttentionLayout attention;  // kernel calls of the block attention (see attention.hpp)
    // Activation checkpointing per decoder layer (recompute.hpp): a layer keeps only its inputs
    // and runs its forward again in backward. Same loss and gradients, less activation memory,
    // ~1/3 more layer compute.
    bool recompute_layers = false;
    // The decoder layers' projections (q/k/v/o, gate/up/down; block and context rows) in FP8,
    // forward and backward (fp8_linear.hpp). fc, attention, norms and the LM head stay in the
    // compute dtype.
    bool fp8_matmul = false;
};

class DFlashDrafterImpl : public torch::nn::Module {
public:
    // Parameters on `device` in fp32: linear weights ~ N(0, 0.02^2) drawn with
    // seeded_generator(seed, parameter name, device), norms = 1 (transformers' Qwen3 init).
    DFlashDrafterImpl(DFlashConfig config, std::uint64_t seed, at::Device device = at::kCPU);

    // Drafter output after the final norm: [blocks * B, H] in the compute dtype.
    at::Tensor forward(const DFlashInputs& in);
    // hidden_norm(fc(context)) for context [L, T, H]: [T, H] in `dtype`, computed as a sum of
    // per-layer matmuls (no [T, L*H] concatenation).
    at::Tensor fuse_context(const at::Tensor& context, at::ScalarType dtype);

    const DFlashConfig& config() const { return config_; }
    // Rotary frequencies [head_dim/2] fp32 on the drafter's device (drafter/dflash/decode.hpp reuses them).
    const at::Tensor& inv_freq() const { return inv_freq_; }

    torch::nn::ModuleList layers{nullptr};
    Projection fc{nullptr};
    RMSNorm hidden_norm{nullptr}, norm{nullptr};

private:
    DFlashConfig config_;
    at::Tensor inv_freq_;
};
TORCH_MODULE(DFlashDrafter);

} // namespace hsring::model
