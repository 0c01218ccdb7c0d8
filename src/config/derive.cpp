// Sizes that follow from the config and the target model's shape: computed here and nowhere else.
#include "hsring/config.hpp"
#include "hsring/drafter_kind.hpp"
#include "hsring/error.hpp"
#include "hsring/stop_tokens.hpp"
#include "hsring/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace hsring {

Derived derive(const Config& cfg) {
    std::filesystem::path base = cfg.file.parent_path();
    return derive(cfg, resolve_model_shape(cfg.target.model, base));
}

Derived derive(const Config& cfg, const ModelShape& shape) {
    const std::string file = cfg.file.string();
    Derived d;
    d.target = shape;

    // Captured layers: the drafter type's (it checks the keys it constrains against the target).
    const DrafterKind& kind = drafter_kind(cfg.drafter.type);
    d.layer_ids = kind.captured_layers(cfg, shape);
    std::set<int> seen;
    for (int id : d.layer_ids) {
        if (id < 0 || id >= shape.num_layers)
            fail("{}: [target] layer_ids: layer {} does not exist: {} has layers 0..{}", file, id,
                 shape.source, shape.num_layers - 1);
        if (!seen.insert(id).second) fail("{}: [target] layer_ids: layer {} is listed twice", file, id);
    }

    d.mask_token_id = cfg.drafter.mask_token_id >= 0 ? cfg.drafter.mask_token_id : shape.mask_token_id.value_or(-1);
    if (kind.drafts_with_mask_token && d.mask_token_id < 0)
        fail("{}: [drafter] mask_token_id is required for {}: give an existing, otherwise unused "
             "token id (Qwen3: 151669)", file, shape.source);
    if (d.mask_token_id >= shape.vocab_size)
        fail("{}: [drafter] mask_token_id {} is not a row of the target's embedding (vocab {})", file,
             d.mask_token_id, shape.vocab_size);

    d.bytes_per_token = d.layer_ids.size() * static_cast<std::uint64_t>(shape.hidden_size) * dtype_bytes(cfg.ring.dtype);
    d.slot_payload_bytes = cfg.ring.slot_tokens * d.bytes_per_token;
    d.slot_stride = RingGeometry::payload_stride(d.slot_payload_bytes);
    d.max_samples_per_slot = cfg.ring.max_samples_per_slot
                                 ? cfg.ring.max_samples_per_slot
                                 : static_cast<std::uint32_t>(std::max<std::uint64_t>(16, cfg.ring.slot_tokens / 16));
    if (d.max_samples_per_slot > cfg.ring.slot_tokens)
        fail("{}: [ring] max_samples_per_slot {} exceeds slot_tokens {} (every sample has at least one token)",
             file, d.max_samples_per_slot, cfg.ring.slot_tokens);

    const std::string slot_desc =
        fmt::format("{} ({} tokens x {} layers x {} hidden x {})", format_bytes(d.slot_stride),
                    cfg.ring.slot_tokens, d.layer_ids.size(), shape.hidden_size, to_string(cfg.ring.dtype));
    if (cfg.ring.slots) {
        d.slots = cfg.ring.slots;
        if (cfg.ring.size && static_cast<std::uint64_t>(d.slots) * d.slot_stride > cfg.ring.size)
            fail("{}: [ring] {} slots of {} need {}, more than [ring] size {}: raise size, lower slots or "
                 "slot_tokens", file, d.slots, slot_desc, format_bytes(d.slots * d.slot_stride), format_bytes(cfg.ring.size));
    } else {
        if (d.slot_stride > cfg.ring.size)
            fail("{}: [ring] one slot is {}, larger than the ring ([ring] size = {}): raise size or lower "
                 "slot_tokens", file, slot_desc, format_bytes(cfg.ring.size));
        std::uint64_t n = cfg.ring.size / d.slot_stride;
        if (n < 2)
            fail("{}: [ring] size {} holds only one slot of {}: a ring needs at least 2 slots; raise size "
                 "or lower slot_tokens", file, format_bytes(cfg.ring.size), slot_desc);
        d.slots = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, 1u << 16));
    }
    d.ring_payload_bytes = static_cast<std::uint64_t>(d.slots) * d.slot_stride;
    d.ring = {d.slots, d.slot_payload_bytes, cfg.ring.slot_tokens, d.max_samples_per_slot,
              static_cast<std::uint32_t>(d.layer_ids.size()), static_cast<std::uint32_t>(shape.hidden_size),
              static_cast<std::uint32_t>(dtype_bytes(cfg.ring.dtype))};
    if (cfg.drafter.inflight_slots > d.slots)
        fail("{}: [drafter] inflight_slots {} exceeds the ring's {} slots", file, cfg.drafter.inflight_slots, d.slots);

    d.max_seq_len = cfg.data.max_seq_len ? cfg.data.max_seq_len : cfg.ring.slot_tokens;
    if (d.max_seq_len > cfg.ring.slot_tokens)
        fail("{}: [data] max_seq_len {} exceeds [ring] slot_tokens {}: a sample must fit in one slot", file,
             d.max_seq_len, cfg.ring.slot_tokens);
    // A step is whole slots on every rank: tokens_per_step rounded to slots (packing leaves each
    // slot a little short of slot_tokens, so counting tokens against the budget would make every
    // step one slot longer than asked), shared out evenly between the ranks.
    d.world = cfg.distributed.nnodes * static_cast<std::uint32_t>(cfg.topology.drafters.size());
    const std::uint64_t asked = cfg.train.tokens_per_step
                                    ? std::max<std::uint64_t>(1, (cfg.train.tokens_per_step + cfg.ring.slot_tokens / 2) /
                                                                     cfg.ring.slot_tokens)
                                    : d.world;
    d.slots_per_rank = static_cast<std::uint32_t>((asked + d.world - 1) / d.world);
    d.slots_per_step = d.slots_per_rank * d.world;

    if (cfg.data.responses == Responses::Target) {
        d.stop_tokens = response_stop_tokens(cfg, shape);
        if (cfg.generate.max_new_tokens >= d.max_seq_len)
            fail("{}: [generate] max_new_tokens {} leaves no room for a prompt in a sample of at most {} tokens "
                 "([data] max_seq_len, else [ring] slot_tokens): with responses = \"target\" each answer takes up to "
                 "max_new_tokens of it; lower max_new_tokens or raise slot_tokens", file, cfg.generate.max_new_tokens,
                 d.max_seq_len);
        if (shape.max_position_embeddings > 0 && d.max_seq_len > static_cast<std::uint64_t>(shape.max_position_embeddings))
            fail("{}: with [data] responses = \"target\" a sample of up to {} tokens ([data] max_seq_len, else [ring] "
                 "slot_tokens) is generated by {}, which has {} positions (max_position_embeddings): set max_seq_len "
                 "to at most {}", file, d.max_seq_len, shape.source, shape.max_position_embeddings,
                 shape.max_position_embeddings);
    }
    d.ring_name = cfg.ring.name.empty() ? "hsring-" + cfg.run.name : cfg.ring.name;
    d.run_dir = cfg.run.run_dir.empty() ? std::filesystem::path("runs") / cfg.run.name : cfg.run.run_dir;
    d.export_dir = cfg.drafter.export_dir.empty() ? d.run_dir / "drafter" : cfg.drafter.export_dir;
    return d;
}

std::string describe(const Config& cfg, const Derived& d) {
    std::string targets, drafters;
    for (const auto& p : cfg.topology.targets) targets += (targets.empty() ? "" : ", ") + p.str();
    for (const auto& p : cfg.topology.drafters) drafters += (drafters.empty() ? "" : ", ") + p.str();
    const std::string in_flight = fmt::format("{} in-flight slots -> <= {} of hidden states on its device",
                                              cfg.drafter.inflight_slots,
                                              format_bytes(cfg.drafter.inflight_slots * d.slot_payload_bytes));
    const std::string step = fmt::format("{} slot(s) per optimizer step ({} per drafter rank x {} ranks, <= {} tokens)",
                                         d.slots_per_step, d.slots_per_rank, d.world,
                                         d.slots_per_step * cfg.ring.slot_tokens);
    // What the drafter type captures and trains: its own lines.
    const auto [captured, drafter, train] = drafter_kind(cfg.drafter.type).describe(cfg, d, in_flight, step);
    std::string text = fmt::format(
        "config {} is valid\n"
        "  run           {} (seed {}), run dir {}\n"
        "  topology      targets [{}], drafters [{}]\n"
        "  target        {} ({}: {} layers, hidden {}, vocab {}; {} linear weights)\n"
        "  captured      {} -> {} per token ({})\n"
        "  slot          {} tokens -> {} payload, {} with 2 MiB alignment, <= {} samples\n"
        "  ring          '{}': {} slots = {} of payload, huge pages {}\n"
        "  drafter       {}\n"
        "  train         {}\n",
        cfg.file.string(), cfg.run.name, cfg.run.seed, d.run_dir.string(), targets, drafters,
        d.target.source, d.target.arch, d.target.num_layers, d.target.hidden_size, d.target.vocab_size,
        to_string(cfg.target.weights), captured,
        format_bytes(d.bytes_per_token), to_string(cfg.ring.dtype), cfg.ring.slot_tokens,
        format_bytes(d.slot_payload_bytes), format_bytes(d.slot_stride), d.max_samples_per_slot, d.ring_name,
        d.slots, format_bytes(d.ring_payload_bytes), to_string(cfg.ring.huge_pages), drafter, train);
    if (cfg.transport.kind == TransportKind::Host)
        text += "  transport     host: targets -> host ring -> drafters (DMA through registered shared memory)\n";
    else
        text += fmt::format("  transport     {}: {} device buffers of {} per target ({} on its GPU), pulled device to device "
                            "by the drafters{}\n", to_string(cfg.transport.kind), cfg.transport.peer_buffers,
                            format_bytes(d.slot_payload_bytes),
                            format_bytes(cfg.transport.peer_buffers * d.slot_payload_bytes),
                            cfg.transport.kind == TransportKind::PeerAndHost ? "; the host ring keeps a copy too" : "");
    if (d.world > 1)
        text += fmt::format("  distributed   machine {} of {}, {} drafter ranks in all, master {}:{}, backend {}, "
                            "timeout {:g} s\n", cfg.distributed.node_rank, cfg.distributed.nnodes, d.world,
                            cfg.distributed.master_addr, cfg.distributed.master_port,
                            to_string(cfg.distributed.backend), cfg.distributed.timeout_s);
    text += fmt::format("  data          {}, {} epoch{}{}\n", cfg.resolve(cfg.data.path).string(), cfg.data.epochs,
                        cfg.data.epochs == 1 ? "" : "s", cfg.data.shuffle ? ", shuffled" : "");
    if (!cfg.data.eval_path.empty())
        text += fmt::format("  eval          {} every {}\n", cfg.resolve(cfg.data.eval_path).string(),
                            cfg.train.eval_every ? fmt::format("{} steps and at the end", cfg.train.eval_every)
                                                 : std::string("run: at the end"));
    if (cfg.data.responses == Responses::Target) {
        std::string stop;
        for (std::int64_t t : d.stop_tokens) stop += (stop.empty() ? "" : ", ") + std::to_string(t);
        text += fmt::format("  responses     the target answers every prompt: <= {} new tokens per answer, {}, stop "
                            "tokens [{}]\n", cfg.generate.max_new_tokens,
                            cfg.generate.temperature == 0 ? std::string("greedy")
                                                          : fmt::format("temperature {} top-p {}", cfg.generate.temperature,
                                                                        cfg.generate.top_p), stop);
    }
    if (!cfg.eval.spec_prompts.empty())
        text += fmt::format("  tau           spec-decode with the target on {} ({} new tokens each) {}\n",
                            cfg.resolve(cfg.eval.spec_prompts).string(), cfg.eval.spec_max_new_tokens,
                            cfg.eval.spec_every ? fmt::format("every {} steps and of the export", cfg.eval.spec_every)
                                                : std::string("of the export"));
    return text;
}

} // namespace hsring
