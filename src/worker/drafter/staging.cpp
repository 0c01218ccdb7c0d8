// Which slots a drafter rank takes and how their samples are accounted (see drafter.hpp).
#include "worker/drafter/drafter.hpp"

#include "hsring/fault.hpp"
#include "hsring/log.hpp"

namespace hsring::worker {

using namespace std::chrono_literals;

namespace {
double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
} // namespace

bool Drafter::exhausted() const {
    return compute_.staged() == 0 && ctx_.ledger.consumed_or_durable() >= ctx_.ledger.total();
}

// Stages READY slots up to the in-flight limit; waits (a little) only when nothing is staged.
void Drafter::fill_pipeline(RoundStats& r) {
    const std::size_t limit = ctx_.cfg.drafter.inflight_slots;
    const bool local_stop = ctx_.ring.stopping();
    while (compute_.staged() < limit && !stop_requested() && (!gang_stopping_ || local_stop)) {
        const bool idle = compute_.staged() == 0;
        auto t0 = Clock::now();
        auto slot = ctx_.ring.acquire(idle && !local_stop ? 200ms : 0ms);
        if (idle) {
            const double waited = ms_since(t0);
            r.wait_ms[gang_.rank()] += waited;
            stats_.wait_ns += static_cast<std::uint64_t>(waited * 1e6);
        }
        if (!slot) break;
        PackedBatch batch = read_meta(slot->meta());
        if (batch.eval_round > 0) {
            // Held-out samples: only those of the round the gang evaluates now count.
            if (!eval_.wants(batch.eval_round)) {
                // (A slot of the current round that arrives before this rank opened its side of
                // the round goes back to its samples, so the round can still complete.)
                if (ctx_.eval) ctx_.eval->repend_ticket(slot->ticket());
                slot->release();
                continue;
            }
            if (!compute_.receive(*slot)) continue;  // its bytes died with their target: samples re-issued
            StagedSlot info{0, 0, true, {}};
            std::vector<std::uint8_t> keep(batch.positions.size(), 0);
            const GangPlace& p = ctx_.env.gang;
            for (std::size_t i = 0; i < batch.positions.size(); ++i) {
                keep[i] = ctx_.eval->done(batch.positions[i], batch.eval_round, slot->ticket()) ? 1 : 0;
                info.samples += keep[i];
                info.eval_ids.push_back(p.node_rank + batch.positions[i] * p.nnodes);
            }
            staged_.push_back(std::move(info));
            compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
            continue;
        }
        if (!compute_.receive(*slot)) continue;  // its bytes died with their target: samples re-issued
        std::vector<std::uint8_t> keep(batch.positions.size(), 0);
        std::vector<std::uint64_t> kept;
        StagedSlot info{0, 0, false, {}};
        for (std::size_t i = 0; i < batch.positions.size(); ++i) {
            if (ctx_.ledger.consume(batch.positions[i], slot->ticket(), ctx_.env.rank, assign_step_)) {
                keep[i] = 1;
                kept.push_back(batch.positions[i]);
                info.tokens += batch.lengths[i];
            }
        }
        info.samples = kept.size();
        if (kept.size() < batch.positions.size())
            log::info("slot ticket {}: {} of {} samples were re-issued meanwhile and are skipped", slot->ticket(),
                      batch.positions.size() - kept.size(), batch.positions.size());
        log_.trained(ctx_.env.incarnation, assign_step_, kept);
        staged_.push_back(info);
        fault::point("stage");  // HSRING_FAULT (CONTRACT.md): the slot is READING, its samples consumed
        compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
        if (++assigned_ == ctx_.derived.slots_per_rank) {
            ++assign_step_;
            assigned_ = 0;
        }
    }
    compute_.poll();
}

// True when the oldest staged slot is a training slot of this step; false when this rank gets
// no more slots in this round (no data left on its machine, or a stop).
bool Drafter::next_training_batch(RoundStats& r) {
    for (;;) {
        fill_pipeline(r);
        while (!staged_.empty() && staged_.front().eval) evaluate_front(r);
        if (!staged_.empty()) return true;
        if (eval_.active() && exhausted()) return false;  // one look for held-out slots per round
        if (exhausted() || stop_requested() || gang_stopping_) return false;
        if (ctx_.ring.stopping()) return false;  // drained: nothing READY is left
        ctx_.publish(stats_);
    }
}

void Drafter::evaluate_front(RoundStats& r) {
    const StagedSlot s = std::move(staged_.front());
    staged_.pop_front();
    const BatchResult b = compute_.evaluate_one(s.eval_ids);
    r.add_eval(b, s.samples);
}

} // namespace hsring::worker
