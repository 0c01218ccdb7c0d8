#include "worker/target_loop.hpp"

#include "hsring/fault.hpp"
#include "hsring/log.hpp"

#include <chrono>

namespace hsring::worker {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

static std::uint64_t ns_since(Clock::time_point t) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
}

int run_target(Context& ctx, TargetCompute& compute) {
    Packer packer(*ctx.data, ctx.ledger, ctx.cfg.ring.slot_tokens, ctx.derived.max_samples_per_slot);
    WorkerStats st;
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
            continue;
        }
        // Held-out samples first while the drafters evaluate a round ([data] eval_path): the round
        // ends sooner, and its numbers are of weights that moved less meanwhile.
        PackedBatch batch;
        if (ctx.eval) batch = packer.pack_eval(*ctx.eval, *ctx.eval_data, slot->ticket());
        if (batch.empty()) batch = packer.pack(slot->ticket());
        if (batch.empty()) {
            // Everything is handed out; samples come back only if a slot is reclaimed or the
            // drafter restarts. Give the slot back and sleep until then.
            slot->abort();
            t0 = Clock::now();
            ctx.ledger.wait_pending(500ms);
            st.wait_ns += ns_since(t0);
            ctx.publish(st);
            continue;
        }
        write_meta(slot->meta(), batch, ctx.env.rank);
        t0 = Clock::now();
        try {
            fault::point("write");  // HSRING_FAULT (CONTRACT.md)
            compute.write(batch, *slot);
        } catch (...) {
            // A failed write (a CUDA OOM in the forward): the samples taken under this slot's ticket
            // go back to PENDING before the slot is freed, as a reclaim would do; freed first,
            // nobody would ever re-issue them and the run would never end.
            ctx.ledger.repend_ticket(slot->ticket());
            slot->abort();
            throw;
        }
        st.busy_ns += ns_since(t0);
        if (!slot->commit()) {
            // We were presumed dead and reclaimed; the samples went back to PENDING then.
            log::warn("slot {} was reclaimed before commit; its samples are produced again", slot->index());
        } else {
            st.slots += 1;
            st.samples += batch.positions.size();
            st.tokens += batch.n_tokens();
        }
        ctx.publish(st);
    }
    ctx.publish(st, true);
    const double busy_s = double(st.busy_ns) / 1e9, wait_s = double(st.wait_ns) / 1e9;
    log::info("produced {} slots, {} samples, {} tokens in {:.1f} s of compute ({:.0f} tokens/s); waited {:.1f} s "
              "for free slots or pending samples", st.slots, st.samples, st.tokens, busy_s,
              busy_s > 0 ? double(st.tokens) / busy_s : 0.0, wait_s);
    return kExitOk;
}

} // namespace hsring::worker
