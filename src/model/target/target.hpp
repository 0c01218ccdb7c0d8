#pragma once
// The frozen target: a Qwen3, Qwen3-MoE, gpt-oss or Llama-3 decoder-only model, loaded from a HF model directory
// (config.json + safetensors, tied embeddings allowed) or random-initialised from a preset.
// Forward runs a packed batch (no KV cache, no autograd) and hands out the hidden states of the
// requested layers as soon as each is computed; forward_cached extends a KVCache (generation,
// generate.hpp).
//
// Layer ids follow HF: layer id k = the output of decoder layer k = transformers'
// output_hidden_states[k + 1]. For the LAST layer (k = N-1) transformers 5 returns the final
// RMSNorm of that output (its capture hook ties hidden_states[-1] to last_hidden_state), and so
// does this model; every other id is the un-normed residual stream.
//
// Random init (presets): every linear weight and the embedding ~ N(0, 0.02^2), norms = 1,
// each tensor drawn with seeded_generator(seed, HF tensor name, device): the same values for
// the same (seed, name, device type) in any process (see load_target_head).
#include "hsring/model_shape.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/fp8_weights.hpp"
#include "model/target/gpt_oss_mlp.hpp"
#include "model/target/kv_cache.hpp"
#include "model/target/moe_mlp.hpp"
#include "model/ops/ops.hpp"
#include "model/io/safetensors.hpp"

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace hsring::model {

// The pieces of the target a drafter needs, frozen: [vocab, hidden] each, compute dtype.
struct TargetHead {
    at::Tensor embed;
    at::Tensor lm_head;  // the same tensor as embed for tied embeddings
    at::Tensor norm;     // the final norm's weight [H] (EAGLE-3's training target: LM head of norm(last layer))
};

// The target's embedding and LM head alone (only those tensors are read from a HF directory),
// with values identical to what TargetModel::load uses for the same arguments.
TargetHead load_target_head(const ModelShape& shape, at::Device device, at::ScalarType compute_dtype,
                            std::uint64_t seed);

// A random preset's tensors under their HF names (e.g. to save them as a HF model directory).
TensorMap random_target_weights(const ModelShape& shape, std::uint64_t seed, at::Device device,
                                at::ScalarType dtype);

// Writes `weights` and a HF config.json for `shape` into `dir` (model.safetensors): a model
// directory transformers and TargetModel::load both read.
void save_hf_model_dir(const std::filesystem::path& dir, const ModelShape& shape, const TensorMap& weights);

class TargetModel {
public:
    using LayerCallback = std::function<void(std::size_t idx, const at::Tensor& hidden)>;

    // HF directory from shape.source, or a random preset ("preset:NAME"); weights are converted
    // to `compute_dtype` on `device` (bf16 on GPU, fp32 on CPU is the intended use). fp8: the
    // decoder layers' linear weights (attention q|k|v and o, a dense MLP's gate|up and down) in FP8
    // with row scales (fp8_weights.hpp), from a bf16 or an FP8 checkpoint alike; embeddings, norms,
    // experts and the LM head stay in the compute dtype. A checkpoint published in FP8 with fp8
    // false is dequantised to the compute dtype.
    static TargetModel load(const ModelShape& shape, at::Device device, at::ScalarType compute_dtype,
                            std::uint64_t seed, bool fp8 = false);
    // From tensors under HF names (any device/dtype); errors name `where`.
    static TargetModel from_weights(const ModelShape& shape, const TensorMap& weights, at::Device device,
                                    at::ScalarType compute_dtype, const std::string& where, bool fp8 = false);

    // tokens [T] int64 (any device), cu_seqlens: S+1 host offsets of the packed sequences.
    // For each k in layer_ids, on_layer(i, hidden [T, H]) is called right after decoder layer
    // k = layer_ids[i] ran (in layer order, a layer listed twice is reported twice); `hidden`
    // lives on the device in the compute dtype and is never modified afterwards, so a caller may
    // start an asynchronous copy of it (keeping a reference, or record_stream, until it ends).
    // Layers after the last requested one are skipped unless want_logits. Returns the logits
    // [T, vocab] (compute dtype) when want_logits, else an undefined tensor.
    at::Tensor forward(const at::Tensor& tokens, const std::vector<std::int64_t>& cu_seqlens,
                       const std::vector<int>& layer_ids, const LayerCallback& on_layer, bool want_logits = false);

    // Generation: runs counts[r] new tokens of each row r of `cache` (tokens [sum counts] int64,
    // packed row after row, any device) at positions cache.length(r) onwards, attending to the
    // row's cached keys; stores the new keys/values and extends the rows (no autograd). Returns
    // logits in the compute dtype: [rows, vocab] of each row's last new token (every count must
    // be >= 1), or with all_logits [T, vocab] of every new token (verifying a drafted block).
    // Like forward, on_layer(i, hidden [T, H]) is called right after decoder layer layer_ids[i]
    // with the new tokens' hidden states (packed as `tokens`; the last layer final-normed, as
    // forward): a drafter's context grows by the captured layers of the tokens it accepts.
    at::Tensor forward_cached(const at::Tensor& tokens, const std::vector<std::int64_t>& counts, KVCache& cache,
                              bool all_logits = false, const std::vector<int>& layer_ids = {},
                              const LayerCallback& on_layer = {});

    // The decode engine's step (decode_graphs.hpp): every row of `cache` runs n new tokens, ids
    // [2, rows * n] int64 on the model's device holding the tokens (row after row) and their
    // positions, attending to keys 0 .. window-1 of its row (those after a token's position are
    // masked). Device work only, of shapes fixed by (rows, n, window): no host synchronisation and
    // no allocation that depends on values, so a CUDA graph can capture it. Writes the keys/values
    // at the positions but does not change the cache's lengths (the caller grows them). The
    // caller guarantees positions < window <= capacity. Returns logits [rows * n, vocab]; on_layer
    // as forward_cached's. Only for graphable() models.
    at::Tensor forward_static(const at::Tensor& ids, std::int64_t n, std::int64_t window, KVCache& cache,
                              const std::vector<int>& layer_ids = {}, const LayerCallback& on_layer = {});
    // Dense attention without sinks and bf16/fp32 weights: forward_static applies (MoE routing and
    // FP8 activation scaling are not captured yet).
    bool graphable() const;
    // Bytes of weights one decode step reads at least (every layer's, the final norm and the LM
    // head; one embedding row is left out): a dense model's batch-1 step is bound below by
    // reading them once. For MoE every expert counts (an overestimate of one token's reads).
    std::uint64_t decode_bytes() const;

    const ModelShape& shape() const { return shape_; }
    at::Device device() const { return device_; }
    at::ScalarType dtype() const { return dtype_; }
    TargetHead head() const { return {embed_, lm_head_, final_norm_}; }

private:
    using TensorGetter =
        std::function<at::Tensor(const std::string& name, const std::vector<std::int64_t>& shape)>;
    // A linear weight in FP8 under its HF name (fp8 loads only).
    using Fp8Getter = std::function<Fp8Weight(const std::string& name, const std::vector<std::int64_t>& shape)>;
    static TargetModel build(const ModelShape& shape, const TensorGetter& get, at::Device device,
                             at::ScalarType compute_dtype, const Fp8Getter& get_fp8 = {});
    struct Layer {
        at::Tensor input_norm, qkv, q_norm, k_norm, o, post_norm;
        at::Tensor gate_up, down;  // a dense layer's MLP
        // fp8 loads: these instead of qkv, o, gate_up, down (which stay undefined)
        Fp8Weight qkv8, o8, gate_up8, down8;
        MoeWeights moe;            // a sparse layer's (router defined), qwen3_moe
        GptOssMoeWeights oss_moe;  // gpt_oss's (router defined)
        at::Tensor qkv_bias, o_bias;  // attention_bias (gpt_oss)
        at::Tensor sinks;             // [Hq] fp32 sink logits (gpt_oss)
        std::int64_t window = 0;      // sliding window (0: full causal)
    };
    // attend(q, k, v, layer) -> [T, Hq, D]: the packed causal attention, or a cache extension's,
    // within the layer's window and with its sinks.
    using Attend = c10::function_ref<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                const Layer& layer)>;
    at::Tensor layer_forward(const Layer& l, const at::Tensor& h, const RopeTables& rope, Attend attend) const;
    // x @ w^T in the compute dtype, or in FP8 where the layer holds w8.
    static at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const Fp8Weight& w8);
    // linear(model_norm(x), w, w8): in FP8 the norm fused with the activations' quantisation.
    at::Tensor normed_linear(const at::Tensor& x, const at::Tensor& norm, const at::Tensor& w, const Fp8Weight& w8) const;
    void check_tokens(const at::Tensor& tokens, const std::string& what) const;
    // Throws for an id outside the model's layers; returns the largest id (-1 for none).
    int check_layer_ids(const std::vector<int>& layer_ids, const std::string& what) const;
    // Calls on_layer for every entry of layer_ids equal to i, with layer i's output h.
    void report_layer(int i, const at::Tensor& h, const std::vector<int>& layer_ids,
                      const LayerCallback& on_layer) const;

    ModelShape shape_;
    at::Device device_{at::kCPU};
    at::ScalarType dtype_ = at::kFloat;
    at::Tensor embed_, lm_head_, final_norm_, inv_freq_;
    double rope_attention_factor_ = 1.0;
    std::vector<Layer> layers_;
};

} // namespace hsring::model
