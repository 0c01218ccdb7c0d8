#include "model/drafter/eagle3/trainable.hpp"

#include "hsring/error.hpp"
#include "model/drafter/eagle3/decode.hpp"
#include "model/drafter/eagle3/export.hpp"
#include "model/drafter/eagle3/loss.hpp"
#include "model/drafter/eagle3/vocab.hpp"
#include "model/drafter/interface/target_fit.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hsring::model {

Eagle3Trainable::Eagle3Trainable(Eagle3Drafter drafter, Eagle3Config config)
    : drafter_(std::move(drafter)), config_(std::move(config)) {
    lm_head_host_ = drafter_->lm_head.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    d2t_host_ = drafter_->d2t.to(at::kCPU);
    t2d_host_ = drafter_->t2d.to(at::kCPU);
}

std::unique_ptr<TrainableDrafter> Eagle3Trainable::create(const DrafterSpec& spec, std::uint64_t seed,
                                                          at::Device device) {
    if (spec.num_layers != 1)
        fail("[drafter] num_layers = {}: an EAGLE-3 drafter has one decoder layer (set num_layers = 1)", spec.num_layers);
    if (spec.head == nullptr || !spec.head->lm_head.defined())
        fail("EAGLE-3 drafter: the target's LM head is needed for its draft vocabulary's rows");
    const Eagle3Config c = eagle3_config_for(spec.target, spec.layer_ids, spec.draft_vocab);
    Eagle3Drafter d(c, seed, device);
    at::Tensor d2t, t2d;
    if (c.draft_vocab_size < c.vocab_size) {
        if (static_cast<std::int64_t>(spec.token_counts.size()) != c.vocab_size)
            fail("EAGLE-3 drafter: a draft vocabulary needs the data's counts of the target's {} token ids, got {}",
                 c.vocab_size, spec.token_counts.size());
        std::tie(d2t, t2d) = eagle3_vocab_map(spec.token_counts, c.draft_vocab_size);
    } else {
        d2t = at::zeros({c.draft_vocab_size}, at::TensorOptions().dtype(at::kLong));
        t2d = at::ones({c.vocab_size}, at::TensorOptions().dtype(at::kBool));
    }
    d2t = d2t.to(device);
    t2d = t2d.to(device);
    const at::Tensor ids = at::arange(c.draft_vocab_size, d2t.options()) + d2t;
    d->set_vocab(spec.head->lm_head.index_select(0, ids.to(spec.head->lm_head.device())).to(device, at::kFloat), d2t, t2d);
    return std::make_unique<Eagle3Trainable>(d, c);
}

std::unique_ptr<TrainableDrafter> Eagle3Trainable::load(const std::filesystem::path& dir, at::Device device) {
    auto [d, c] = import_eagle3(dir, device);
    return std::make_unique<Eagle3Trainable>(d, c);
}

DrafterLoss Eagle3Trainable::loss(const TargetHead& head, const DrafterBatch& batch, const DrafterTrainOptions& options,
                                  at::Generator&) {
    return eagle3_loss(drafter_, head, batch, options.ttt_steps, options.ttt_decay,
                       default_compute_dtype(batch.hidden.device()));
}

DrafterEvalSums Eagle3Trainable::evaluate(const TargetHead& head, const DrafterBatch& batch,
                                          const std::vector<std::uint64_t>&, std::uint64_t,
                                          const DrafterTrainOptions& options) {
    at::NoGradGuard no_grad;
    const DrafterLoss r = eagle3_loss(drafter_, head, batch, options.ttt_steps, options.ttt_decay,
                                      default_compute_dtype(batch.hidden.device()));
    const at::Tensor sums = at::cat({r.loss_sum.reshape({1}), r.weight_sum.reshape({1}), r.correct, r.counted})
                                .to(at::kCPU, at::kDouble);
    const double* v = sums.data_ptr<double>();
    const auto k = static_cast<std::size_t>(options.ttt_steps);
    DrafterEvalSums s;
    s.loss_sum = v[0];
    s.weight_sum = v[1];
    s.correct.assign(v + 2, v + 2 + k);
    s.counted.assign(v + 2 + k, v + 2 + 2 * k);
    s.num_blocks = r.units;
    return s;
}

DrafterExporter Eagle3Trainable::exporter() const {
    return [config = config_, lm_head = lm_head_host_, d2t = d2t_host_, t2d = t2d_host_](
               const std::filesystem::path& dir, const std::map<std::string, at::Tensor>& parameters,
               at::ScalarType dtype) { export_eagle3(dir, parameters, lm_head, d2t, t2d, config, dtype); };
}

std::string Eagle3Trainable::mismatch(const DrafterSpec& spec) const {
    if (spec.type != "eagle3") return fmt::format("it is an EAGLE-3 drafter, the run trains [drafter] type = \"{}\"", spec.type);
    if (config_.hidden_size != spec.target.hidden_size || config_.vocab_size != spec.target.vocab_size)
        return fmt::format("its hidden size / vocabulary {} / {} are not the target's {} / {}", config_.hidden_size,
                           config_.vocab_size, spec.target.hidden_size, spec.target.vocab_size);
    const std::vector<int> aux(spec.layer_ids.begin(), spec.layer_ids.begin() + std::min<std::size_t>(3, spec.layer_ids.size()));
    if (config_.aux_layer_ids != aux)
        return fmt::format("its fused target layers [{}] are not the run's [{}]", fmt::join(config_.aux_layer_ids, ", "),
                           fmt::join(aux, ", "));
    const std::int64_t vd = spec.draft_vocab > 0 ? spec.draft_vocab : spec.target.vocab_size;
    if (config_.draft_vocab_size != vd)
        return fmt::format("its draft vocabulary of {} tokens is not the run's [drafter] draft_vocab {}",
                           config_.draft_vocab_size, vd);
    return {};
}

std::string Eagle3Trainable::describe() const {
    return fmt::format("EAGLE-3 drafter, fused target layers [{}], draft vocabulary {} of {}",
                       fmt::join(config_.aux_layer_ids, ", "), config_.draft_vocab_size, config_.vocab_size);
}

// The three fused layers, then the target's last (the training target: what the drafter predicts).
std::vector<int> Eagle3Trainable::captured_layers(const ModelShape& t) const {
    return eagle3_layer_ids(static_cast<int>(t.num_layers), config_.aux_layer_ids);
}

std::string Eagle3Trainable::misfit(const ModelShape& t) const {
    const Eagle3Config& c = config_;
    if (std::string why = target_shape_misfit(c.hidden_size, c.vocab_size, c.num_target_layers, t); !why.empty())
        return why;
    for (int k : c.aux_layer_ids)
        if (k < 0 || k >= t.num_layers)
            return fmt::format("fused target layer {} (eagle_config.eagle_aux_hidden_state_layer_ids: {}) is out of "
                               "range for {} ({} layers)", k, k + 1, t.source, t.num_layers);
    return {};
}

std::unique_ptr<DecodeDrafter> Eagle3Trainable::decoder(const ModelShape& target, const TargetHead& head,
                                                        std::int64_t rows, std::int64_t tokens, at::Device device,
                                                        at::ScalarType dtype, std::int64_t draft_tokens,
                                                        bool graphs) {
    if (const std::string why = misfit(target); !why.empty()) fail("speculative decoding: {}", why);
    if (draft_tokens < 0)
        fail("speculative decoding: draft_tokens must be >= 1 (or 0: {}), got {}", kDefaultDraftTokens, draft_tokens);
    // 5 drafts per step by default: a chain of the length SGLang's and vLLM's EAGLE-3 examples run.
    const std::int64_t drafts = draft_tokens > 0 ? draft_tokens : kDefaultDraftTokens;
    const std::int64_t capacity = std::min(tokens + drafts + 1, target.max_position_embeddings);
    return std::make_unique<Eagle3DecodeDrafter>(drafter_, head, rows, capacity, device, dtype, drafts, graphs);
}

} // namespace hsring::model
