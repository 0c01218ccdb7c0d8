#include "worker/core/target_loop.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"

#include <chrono>

namespace hsring::worker {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

static std::uint64_t ns_since(Clock::time_point t) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

namespace {

// Flags the samples whose hidden states were not finite (invariant 10, docs/architecture.md: nothing
// non-finite is ever trained): REJECTED in the ledger, flagged in the slot's metadata, so no
// drafter trains or evaluates them. Returns how many were newly rejected.
std::uint64_t reject_nonfinite(Context& ctx, Packer& packer, PackedBatch& batch, const std::vector<std::uint8_t>& bad,
                               WriteSlot& slot) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < batch.positions.size(); ++i) {
        if (!bad[i] || batch.rejected(i)) continue;
        batch.flags[i] |= sample_flag::kRejected;
        ++n;
        if (batch.eval_round) {
            log::warn("held-out sample {} has non-finite hidden states: left out of the evaluation",
                      batch.positions[i]);
            continue;
        }
        ctx.ledger.reject(batch.positions[i], slot.ticket(), RejectReason::NonFiniteHidden);
        log::warn("sample {} of the data set (ledger position {}, epoch {}) has non-finite hidden states: rejected, "
                  "never trained", packer.sample_of(batch.positions[i]), batch.positions[i],
                  ctx.ledger.epoch_of(batch.positions[i]));
    }
    std::copy(batch.flags.begin(), batch.flags.end(), slot.meta().sample_flags().begin());
    return n;
}

} // namespace

std::vector<std::vector<std::int64_t>> TargetCompute::generate_answers(const std::vector<AnswerRequest>&) {
    HSRING_ASSERT(false, "this target compute runs no model: it cannot answer prompts");
    return {};
}

int run_target(Context& ctx, TargetCompute& compute) {
    Packer packer(*ctx.data, ctx.ledger, ctx.cfg.ring.slot_tokens, ctx.derived.max_samples_per_slot);
    // Plan slots are produced at most a ring's worth ahead of the slot the drafters need next, so
    // the ring always has room for that one (hsring/ledger.hpp).
    const std::uint64_t window = ctx.ring.geometry().slot_count;
    WorkerStats st;
    std::uint64_t rejected = 0;
    double compute_s = 0;
    const bool answer = ctx.cfg.data.responses == Responses::Target;
    const std::uint64_t answer_seed = ctx.cfg.generate.seed ? ctx.cfg.generate.seed : ctx.cfg.run.seed;
    std::uint64_t answer_tokens = 0;
    double answer_s = 0;
    ctx.publish(st, true);
    while (!stop_requested()) {
        if (ctx.ledger.done()) {
            log::info("the drafter has trained every epoch: done");
            break;
        }
        auto t0 = Clock::now();
        auto slot = ctx.ring.claim(200ms);
        st.wait_ns += ns_since(t0);
        if (!slot) {
            if (ctx.ring.stopping()) break;
            ctx.publish(st);
            compute.between_slots();  // the ring is full: time for side work
            continue;
        }
        // Held-out samples first while the drafters evaluate a round ([data] eval_path): the round
        // ends sooner, and its numbers are of weights that moved less meanwhile.
        PackedBatch batch;
        if (ctx.eval) batch = packer.pack_eval(*ctx.eval, *ctx.eval_data, slot->ticket());
        if (batch.empty()) batch = packer.pack(slot->ticket(), ctx.ledger.window_base() + window);
        if (batch.empty()) {
            // Nothing PENDING below the window; plan slots come back only if a slot is reclaimed
            // or a drafter restarts, and the window moves as the drafters take slots.
            slot->abort();
            compute.between_slots();  // this target is a ring ahead of the drafters: time for side work
            t0 = Clock::now();
            ctx.ledger.wait_pending(500ms);
            st.wait_ns += ns_since(t0);
            ctx.publish(st);
            continue;
        }
        t0 = Clock::now();
        std::vector<std::uint8_t> bad;
        try {
            if (answer) {  // the target writes the answers first (responses.hpp)
                answer_tokens += answer_templates(batch, answer_seed, [&](const std::vector<AnswerRequest>& r) {
                    return compute.generate_answers(r);
                });
                answer_s += double(ns_since(t0)) / 1e9;
            }
            write_meta(slot->meta(), batch, ctx.env.rank);
            fault::point("write");  // HSRING_FAULT (CONTRACT.md)
            bad = compute.write(batch, *slot);
        } catch (...) {
            // A failed write (a CUDA OOM in the forward): what was taken under this slot's ticket
            // (plan slot or held-out samples) goes back before the slot is freed, as a reclaim
            // would do; freed first, nobody would ever re-issue it and the run would never end.
            ctx.ring.reclaim_hook()(slot->ticket());
            slot->abort();
            throw;
        }
        st.busy_ns += ns_since(t0);
        compute_s += compute.last_compute_s();
        rejected += reject_nonfinite(ctx, packer, batch, bad, *slot);
        if (!slot->commit()) {
            // We were presumed dead and reclaimed; the samples went back to PENDING then.
            log::warn("slot {} was reclaimed before commit; its samples are produced again", slot->index());
        } else {
            st.slots += 1;
            st.samples += batch.positions.size();
            st.tokens += batch.n_tokens();
        }
        ctx.publish(st);
        // Side work only while the drafters have half a ring of READY slots ahead of them: it
        // never makes them wait (and when the ring is full, above, there is nothing else to do).
        const Occupancy occ = ctx.ring.occupancy();
        if (2 * occ.ready >= ctx.ring.geometry().slot_count) compute.between_slots();
    }
    ctx.publish(st, true);
    const double wait_s = double(st.wait_ns) / 1e9;
    log::info("produced {} slots, {} samples, {} tokens in {:.1f} s of compute ({:.0f} tokens/s){}{}; waited {:.1f} s "
              "for free slots or pending samples", st.slots, st.samples, st.tokens, compute_s,
              compute_s > 0 ? double(st.tokens) / compute_s : 0.0,
              answer ? fmt::format("; generated {} answer tokens in {:.1f} s ({:.0f} tokens/s)", answer_tokens, answer_s,
                                   answer_s > 0 ? double(answer_tokens) / answer_s : 0.0)
                     : std::string(),
              rejected ? fmt::format("; {} samples rejected (non-finite hidden states)", rejected) : std::string(),
              wait_s);
    return kExitOk;
}

} // namespace hsring::worker
