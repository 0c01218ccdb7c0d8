#pragma once
// The drafter-type seam: what the drafter worker (src/worker/torch/torch_drafter.cpp), its checkpoints
// and its export need from a drafter of any type (DFlash, EAGLE-3). A type lives in its own room
// (src/model/drafter/<type>/) and is listed once in src/model/drafter/registry/registry.cpp.
//
// Every type learns from the same ring slot: a packed batch of captured target layers [L, T, H]
// (the type chooses the layers: DrafterSpec::layer_ids), the tokens and the loss mask. The worker
// owns staging, the optimizer (AdamW over module().parameters(), in that order), gradient sums over
// the gang and checkpoint snapshots; the type owns the model, its loss and its file format.
#include "hsring/model_shape.hpp"
#include "model/drafter/interface/decode_drafter.hpp"
#include "model/target/target.hpp"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hsring::model {

struct Fp8LmHead;

// One packed batch as a ring slot holds it.
struct DrafterBatch {
    at::Tensor hidden;     // [L, T, H] captured target layers, layer-major like a ring slot
    at::Tensor tokens;     // [T] int64
    at::Tensor loss_mask;  // [T] (float/bool/int): which tokens are trained on
    std::vector<std::int64_t> cu_seqlens;  // S+1 host offsets
    // Optional: loss_mask on the host (the worker has it from the ring slot): read there instead of
    // copying the device's back (which waits for all queued device work).
    at::Tensor loss_mask_host;
};

// The [train] knobs a type may read (each reads its own).
struct DrafterTrainOptions {
    // DFlash
    int num_anchors = 512;
    double gamma = 7.0;
    int chunk = 4096;
    // EAGLE-3: training-time test steps and the loss weight decay^k of step k
    int ttt_steps = 7;
    double ttt_decay = 0.8;
    // Both
    bool recompute_layers = false;
    bool fp8_matmul = false;
    const Fp8LmHead* fp8_lm_head = nullptr;  // owned by the caller
};

// One micro-batch's sums on the device; loss_sum.backward() trains (undefined when nothing trains).
//   the step's loss = sum over its micro-batches (and ranks) of loss_sum / of weight_sum
struct DrafterLoss {
    at::Tensor loss_sum;    // fp32 scalar, differentiable
    at::Tensor weight_sum;  // fp32 scalar
    at::Tensor correct;     // [K] fp32: correct argmax predictions per draft position
    at::Tensor counted;     // [K] fp32: scored predictions per draft position
    std::int64_t units = 0; // blocks (DFlash) / trained rows (EAGLE-3); 0: skip the backward
};

// Evaluation sums (no gradients), added over batches, processes and ranks.
//   loss = loss_sum / weight_sum; accuracy[k] = correct[k] / counted[k] (draft position k+1);
//   accept_length = expected_accept_length(accuracy) (include/hsring/acceptance.hpp)
struct DrafterEvalSums {
    double loss_sum = 0;
    double weight_sum = 0;
    std::vector<double> correct;
    std::vector<double> counted;
    std::int64_t num_blocks = 0;

    // Adds `o` (empty sums adopt its number of positions).
    void add(const DrafterEvalSums& o);
    double loss() const;
    std::vector<double> accuracy() const;
    double accept_length() const;
};

// What a run asks of its drafter ([drafter], [target] layer_ids, the data's token counts).
struct DrafterSpec {
    std::string type = "dflash";
    ModelShape target;
    int num_layers = 1;
    std::vector<int> layer_ids;  // the ring's captured layers, in slot order
    // DFlash
    int block_size = 16;
    std::int64_t mask_token_id = -1;
    // EAGLE-3: the draft vocabulary (0 = the target's), chosen from these counts of the target's tokens
    std::int64_t draft_vocab = 0;
    std::vector<std::int64_t> token_counts;
    const TargetHead* head = nullptr;  // EAGLE-3: its frozen LM head rows are the target's
};

// Writes the type's export format from parameters copied out of module() (name -> host tensor):
// callable on another thread while the live drafter trains on (it holds copies of what it needs).
using DrafterExporter =
    std::function<void(const std::filesystem::path& dir, const std::map<std::string, at::Tensor>& parameters,
                       at::ScalarType dtype)>;

class TrainableDrafter {
public:
    virtual ~TrainableDrafter() = default;
    virtual const char* type() const = 0;
    // The trained parameters (names are the export's) and train()/eval().
    virtual torch::nn::Module& module() = 0;
    // One micro-batch. `gen`: a CPU generator (DFlash's anchor sampling).
    virtual DrafterLoss loss(const TargetHead& head, const DrafterBatch& batch, const DrafterTrainOptions& options,
                             at::Generator& gen) = 0;
    // Held-out evaluation at deterministic choices (seed, one sample id per sequence).
    virtual DrafterEvalSums evaluate(const TargetHead& head, const DrafterBatch& batch,
                                     const std::vector<std::uint64_t>& sample_ids, std::uint64_t seed,
                                     const DrafterTrainOptions& options) = 0;
    virtual DrafterExporter exporter() const = 0;
    // Empty when this drafter can continue `spec`'s run ([drafter] init, checkpoints), else why not.
    virtual std::string mismatch(const DrafterSpec& spec) const = 0;
    // One line for the log: "DFlash drafter, 5 layers, block 16".
    virtual std::string describe() const = 0;
    // Empty when this drafter drafts for a target of shape `target` (hidden size, vocabulary, the
    // layers it reads), else why not, naming its config.json keys ("the drafter's hidden_size 64
    // does not match the target T's 128").
    virtual std::string misfit(const ModelShape& target) const = 0;
    // The target layers this drafter reads, in the order DrafterBatch::hidden stacks them (a ring
    // slot's order), for a target of shape `target` that it fits.
    virtual std::vector<int> captured_layers(const ModelShape& target) const = 0;
    // The drafter at decode time (speculative decoding) with the frozen target's `head`: room for
    // `rows` sequences of `tokens` positions each (prompt + new tokens; the state adds room for one
    // verify step, up to the target's max_position_embeddings), weights cast to `dtype` once.
    // `draft_tokens`: drafts per step, 0 = the type's default (DFlash: its block - 1, the only
    // choice; EAGLE-3: 5). Throws when the drafter does not fit `target` (misfit) or for a
    // draft_tokens the type cannot draft. `graphs`: one sequence's draft steps run in fixed shapes,
    // captured as CUDA graphs on a GPU (the decode engine's batch-1 case; ops/step_graphs.hpp).
    virtual std::unique_ptr<DecodeDrafter> decoder(const ModelShape& target, const TargetHead& head, std::int64_t rows,
                                                   std::int64_t tokens, at::Device device, at::ScalarType dtype,
                                                   std::int64_t draft_tokens, bool graphs) = 0;

    // The export format from the live parameters.
    void export_to(const std::filesystem::path& dir, at::ScalarType dtype);
};

} // namespace hsring::model
