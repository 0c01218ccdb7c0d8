// The resume rules (see resume_rules.hpp).
#include "supervisor/resume_rules.hpp"

#include <fmt/format.h>

namespace hsring::supervisor {

namespace {

constexpr std::string_view kDrafter = "the checkpoint holds this drafter, trained with this objective";
constexpr std::string_view kNextStep = "applied from the next step";

} // namespace

const std::vector<ResumeRule>& resume_rules() {
    static const std::vector<ResumeRule> rules{
        {"[run] mode", OnChange::Refuse, "synthetic and real runs train different things"},
        {"[run] seed", OnChange::Refuse, "it decides the sample order the checkpoint was trained in"},
        {"[target] model (shape)", OnChange::Refuse, "the checkpoint was trained on this target's hidden states"},
        {"[target] layer_ids", OnChange::Refuse, "the drafter's input is these layers' hidden states"},
        {"[target] weights", OnChange::Apply, "applied to the hidden states produced from now on"},
        {"[ring] slot_tokens", OnChange::Refuse, "it decides which samples form each plan slot"},
        {"[ring] dtype", OnChange::Refuse, "the ring holding staged slots has this layout"},
        {"[drafter] type", OnChange::Refuse, kDrafter},
        {"[drafter] num_layers", OnChange::Refuse, kDrafter},
        {"[drafter] ttt_steps", OnChange::Refuse, kDrafter},
        {"[drafter] draft_vocab", OnChange::Refuse, kDrafter},
        {"[drafter] block_size", OnChange::Refuse, kDrafter},
        {"[drafter] mask_token_id", OnChange::Refuse, kDrafter},
        {"[data] fingerprint", OnChange::Refuse, "the ledger's positions name this data set's samples"},
        {"[data] eval_path fingerprint", OnChange::Apply, "the held-out set is read again from the next evaluation"},
        {"[data] epochs", OnChange::Replan,
         "the steps after the checkpoint are planned again (more epochs are trained after the ones done)"},
        {"[data] shuffle", OnChange::Refuse, "it decides the sample order the checkpoint was trained in"},
        {"[data] max_seq_len", OnChange::Refuse, "it decides how samples are cut and packed into plan slots"},
        {"[data] responses", OnChange::Refuse, "it decides what the drafter learns to predict"},
        {"[train] lr", OnChange::Apply, kNextStep},
        {"[train] min_lr_ratio", OnChange::Apply, kNextStep},
        {"[train] warmup_steps", OnChange::Apply, kNextStep},
        {"[train] max_steps", OnChange::Apply, "the run ends at the new step count"},
        {"[train] weight_decay", OnChange::Apply, kNextStep},
        {"[train] beta1", OnChange::Apply, kNextStep},
        {"[train] beta2", OnChange::Apply, kNextStep},
        {"[train] eps", OnChange::Apply, kNextStep},
        {"[train] grad_clip", OnChange::Apply, kNextStep},
        {"[train] tokens_per_step (slots per rank)", OnChange::Replan,
         "the steps after the checkpoint are planned again with the new step size"},
        {"[train] num_anchors", OnChange::Apply, kNextStep},
        {"[train] loss_decay_gamma", OnChange::Apply, kNextStep},
        {"[train] ttt_decay", OnChange::Apply, kNextStep},
        {"[train] matmul", OnChange::Apply, kNextStep},
        {"[train] lm_head", OnChange::Apply, kNextStep},
        {"[train] checkpoint_every", OnChange::Apply, kNextStep},
        {"[train] checkpoint_background", OnChange::Apply, kNextStep},
        {"[train] eval_every", OnChange::Apply, kNextStep},
        {"[distributed] nnodes", OnChange::Refuse, "each machine's ledger holds its share of the data for this many"},
        {"[topology] drafters (count)", OnChange::Replan,
         "the steps after the checkpoint are planned again over the new drafter ranks (the checkpoint holds "
         "no rank's state of its own; the ranks of an earlier run that are gone have their plan slots re-issued)"},
    };
    return rules;
}

const char* to_string(OnChange c) {
    switch (c) {
    case OnChange::Refuse: return "refused";
    case OnChange::Replan: return "re-planned";
    case OnChange::Apply: return "applied";
    }
    return "?";
}

ResumeCheck check_resume(const nlohmann::json& previous, const nlohmann::json& now) {
    ResumeCheck r;
    if (!previous.is_object() || !now.is_object()) return r;
    const auto& rules = resume_rules();
    for (const auto& [key, value] : now.items()) {
        const auto it = previous.find(key);
        if (it == previous.end() || *it == value) continue;
        const ResumeRule* rule = nullptr;
        for (const auto& x : rules)
            if (x.key == key) rule = &x;
        if (!rule || rule->on_change == OnChange::Refuse) {
            r.refused.push_back(fmt::format("{} was {}, now {}: {}", key, it->dump(), value.dump(),
                                            rule ? rule->why : std::string_view("no rule says it may change")));
        } else {
            r.changes.push_back(fmt::format("{}: {} -> {}: {}", key, it->dump(), value.dump(), rule->why));
        }
    }
    return r;
}

} // namespace hsring::supervisor
