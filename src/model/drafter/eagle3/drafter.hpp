#pragma once
// The EAGLE-3 drafter (the original EAGLE-3 model as SGLang, vLLM and vllm-project/speculators run
// it), a torch::nn module whose parameter names are the export's: fc.weight,
// midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight,
// midlayer.self_attn.{q,k,v,o}_proj.weight, midlayer.mlp.{gate,up,down}_proj.weight, norm.weight.
//
//   g      = fc(concat of the 3 fused target layers)                       [R, H]
//   step k (training-time test, k = 0..K-1), row r at position p_r + k:
//     x    = concat(input_layernorm(embed(token)), hidden_norm(h))         [R, 2H]  (h = g at k = 0,
//            else step k-1's output); q/k/v = proj(x), RoPE at p_r + k
//     attn : row r's query sees step 0's keys of rows <= r of its sequence (causal) and, of every
//            later step 1..k, only its own row's key (the draft chain it would have built)
//     h'   = h + o_proj(attn); out_k = h' + mlp(post_attention_layernorm(h'))
//   logits_k = lm_head(norm(out_k))     (lm_head: the target's LM head rows of the draft vocabulary,
//                                        frozen; embed: the target's, frozen)
//
// Precision: fp32 master parameters cast to the compute dtype in forward (bf16 on GPU, fp32 on CPU).
#include "model/drafter/eagle3/config.hpp"
#include "model/drafter/interface/modules.hpp"
#include "model/ops/attention.hpp"

#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

namespace hsring::model {

class Eagle3AttentionImpl : public torch::nn::Module {
public:
    Eagle3AttentionImpl(const Eagle3Config& c, at::Device device);
    Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(Eagle3Attention);

class Eagle3MLPImpl : public torch::nn::Module {
public:
    Eagle3MLPImpl(const Eagle3Config& c, at::Device device);
    Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Eagle3MLP);

class Eagle3LayerImpl : public torch::nn::Module {
public:
    Eagle3LayerImpl(const Eagle3Config& c, at::Device device);
    Eagle3Attention self_attn{nullptr};
    Eagle3MLP mlp{nullptr};
    RMSNorm input_layernorm{nullptr}, hidden_norm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(Eagle3Layer);

// The rows of one training-time-test forward, built by eagle3/loss.cpp from a packed batch.
struct Eagle3Rows {
    at::Tensor fused;      // [3, R, H] the fused layers' rows (any float dtype)
    at::Tensor positions;  // [R] int64: row r's position at step 0
    PackedSequences seqs;  // the rows by sequence (a sequence's rows are consecutive)
    at::Tensor same_seq_causal;  // optional [R, R] bool: row r may attend step 0's row c; undefined:
                                 // seqs' block-diagonal causal mask (built only off the flash path)
    std::vector<at::Tensor> step_tokens;  // K x [R] int64: the token each row embeds at step k
};

class Eagle3DrafterImpl : public torch::nn::Module {
public:
    // Parameters on `device` in fp32: linear weights ~ N(0, 0.02^2) drawn with
    // seeded_generator(seed, parameter name, device), norms = 1.
    Eagle3DrafterImpl(Eagle3Config config, std::uint64_t seed, at::Device device = at::kCPU);

    // Each step's layer output (before the final norm) [R, H] in `dtype`; `embed` the target's
    // embedding (frozen).
    std::vector<at::Tensor> forward_steps(const Eagle3Rows& rows, const at::Tensor& embed, at::ScalarType dtype);
    // lm_head(norm(out)) [R, draft vocab] in `dtype`; `head_rows`: lm_head already cast to `dtype`
    // (the loss casts it once for all steps).
    at::Tensor logits(const at::Tensor& out, at::ScalarType dtype, const at::Tensor& head_rows = {});

    const Eagle3Config& config() const { return config_; }
    // Rotary frequencies [head_dim/2] fp32 on the drafter's device (eagle3/decode.cpp reuses them).
    const at::Tensor& inv_freq() const { return inv_freq_; }
    // Sets the frozen tensors below (buffers: they move with the module).
    void set_vocab(const at::Tensor& lm_head_rows, const at::Tensor& d2t_map, const at::Tensor& t2d_map);
    // The draft vocabulary's target ids [Vd] (draft id + d2t).
    at::Tensor draft_ids() const;

    Projection fc{nullptr};
    Eagle3Layer midlayer{nullptr};
    RMSNorm norm{nullptr};
    // Frozen, not trained (buffers, not parameters): the draft vocabulary's LM head rows [Vd, H]
    // (fp32), d2t [Vd] int64 (target id = draft id + d2t) and t2d [V] bool (the target ids drafted).
    at::Tensor lm_head, d2t, t2d;

private:
    Eagle3Config config_;
    at::Tensor inv_freq_;
};
TORCH_MODULE(Eagle3Drafter);

} // namespace hsring::model
