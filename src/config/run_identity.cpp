// What the machines of a run compare at rendezvous (see hsring/run_identity.hpp).
#include "hsring/run_identity.hpp"

#include <fmt/format.h>

namespace hsring {

nlohmann::json run_identity(const Config& c, const Derived& d, std::uint64_t data_fingerprint,
                            std::uint64_t eval_fingerprint) {
    const auto& t = c.train;
    const auto& g = c.generate;
    // How the target answers ([data] responses = "target"): part of what is trained.
    const std::string responses =
        c.data.responses == Responses::Dataset
            ? std::string("dataset")
            : fmt::format("target: max_new_tokens {} temperature {} top_p {} seed {} stop {}", g.max_new_tokens,
                          g.temperature, g.top_p, g.seed ? g.seed : c.run.seed, nlohmann::json(d.stop_tokens).dump());
    return {
        {"[run] mode", c.run.mode == RunMode::Synthetic ? "synthetic" : "train"},
        {"[run] seed", c.run.seed},
        {"[target] model (shape)", fmt::format("{} layers {} hidden {} vocab {}", d.target.arch, d.target.num_layers,
                                               d.target.hidden_size, d.target.vocab_size)},
        {"[target] layer_ids", d.layer_ids},
        {"[target] weights", to_string(c.target.weights)},
        {"[ring] slot_tokens", c.ring.slot_tokens},
        {"[ring] dtype", to_string(c.ring.dtype)},
        {"[drafter] type", c.drafter.type},
        {"[drafter] num_layers", c.drafter.num_layers},
        {"[drafter] ttt_steps", c.drafter.ttt_steps},
        {"[drafter] draft_vocab", c.drafter.draft_vocab},
        {"[drafter] block_size", c.drafter.block_size},
        {"[drafter] mask_token_id", d.mask_token_id},
        {"[data] fingerprint", fmt::format("{:016x}", data_fingerprint)},
        {"[data] eval_path fingerprint", fmt::format("{:016x}", eval_fingerprint)},
        {"[data] epochs", c.data.epochs},
        {"[data] shuffle", c.data.shuffle},
        {"[data] max_seq_len", d.max_seq_len},
        {"[data] responses", responses},
        {"[train] lr", t.lr},
        {"[train] min_lr_ratio", t.min_lr_ratio},
        {"[train] warmup_steps", t.warmup_steps},
        {"[train] max_steps", t.max_steps},
        {"[train] weight_decay", t.weight_decay},
        {"[train] beta1", t.beta1},
        {"[train] beta2", t.beta2},
        {"[train] eps", t.eps},
        {"[train] grad_clip", t.grad_clip},
        {"[train] tokens_per_step (slots per rank)", d.slots_per_rank},
        {"[train] num_anchors", t.num_anchors},
        {"[train] loss_decay_gamma", t.loss_decay_gamma},
        {"[train] ttt_decay", t.ttt_decay},
        {"[train] matmul", to_string(t.matmul)},
        {"[train] lm_head", to_string(t.lm_head)},
        {"[train] checkpoint_every", t.checkpoint_every},
        {"[train] checkpoint_background", t.checkpoint_background},
        {"[train] eval_every", t.eval_every},
        {"[distributed] nnodes", c.distributed.nnodes},
        {"[topology] drafters (count)", c.topology.drafters.size()},
    };
}

std::string identity_differences(const nlohmann::json& mine, const nlohmann::json& master, std::uint32_t my_node) {
    std::string out;
    for (const auto& [key, value] : master.items()) {
        const auto it = mine.find(key);
        const std::string here = it == mine.end() ? "missing" : it->dump();
        if (it != mine.end() && *it == value) continue;
        out += fmt::format("{}{} is {} on machine {}, {} on machine 0 (the master)", out.empty() ? "" : "; ", key, here,
                           my_node, value.dump());
    }
    for (const auto& [key, value] : mine.items())
        if (!master.contains(key))
            out += fmt::format("{}{} is {} on machine {} and unknown to machine 0 (another hsring version?)",
                               out.empty() ? "" : "; ", key, value.dump(), my_node);
    return out;
}

} // namespace hsring
