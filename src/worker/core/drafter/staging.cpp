// Which slots a drafter rank takes and how their samples are accounted (see drafter.hpp): its own
// plan slots, strictly in plan order (a slot written early waits in the ring), and held-out slots
// whenever they come.
#include "worker/core/drafter/drafter.hpp"
#include "worker/core/plan_room.hpp"

#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/log.hpp"

#include <thread>

namespace hsring::worker {

using namespace std::chrono_literals;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// A live process that writes slots (a target) is attached to the ring.
bool writers_alive(const Ring& ring) {
    for (const OwnerInfo& o : ring.owners())
        if (o.role == Role::Writer && o.alive) return true;
    return false;
}

} // namespace

bool Drafter::stopping() const { return stop_requested() || ctx_.ring.stopping(); }

void Drafter::fill_pipeline(RoundStats& r, std::uint64_t last) {
    const std::size_t limit = ctx_.cfg.drafter.inflight_slots;
    while (compute_.staged() < limit) {
        const bool idle = compute_.staged() == 0;
        const std::uint64_t j = next_take_;
        const bool want_plan = j < plan_.slots && j <= last;
        // Held-out slots are always taken (a stale round's are dropped below); of the training
        // slots only this rank's next plan slot.
        auto want = [&](const SlotMeta& m) {
            const auto p = plan_slot_of(m);
            return p ? want_plan && *p == j : true;
        };
        auto t0 = Clock::now();
        auto slot = ctx_.ring.acquire(idle ? 200ms : 0ms, want);
        if (idle) {
            const double waited = ms_since(t0);
            r.wait_ms[gang_.rank()] += waited;
            stats_.wait_ns += static_cast<std::uint64_t>(waited * 1e6);
        }
        if (!slot) break;
        PackedBatch batch = read_meta(slot->meta());
        if (!batch.plan_slot) {
            // Held-out samples: only those of the round the gang evaluates now count.
            if (!eval_.wants(batch.eval_round)) {
                // (A slot of the current round that arrives before this rank opened its side of
                // the round goes back to its samples, so the round can still complete.)
                if (ctx_.eval) ctx_.eval->repend_ticket(slot->ticket());
                slot->release();
                continue;
            }
            if (!compute_.receive(*slot)) continue;  // its bytes died with their target: samples re-issued
            StagedSlot info;
            info.ticket = slot->ticket();
            std::vector<std::uint8_t> keep(batch.positions.size(), 0);
            const GangPlace& p = ctx_.env.gang;
            for (std::size_t i = 0; i < batch.positions.size(); ++i) {
                // A held-out sample the target rejected is done (the round counts it) but scored by
                // nobody: its states were not finite.
                const bool done = ctx_.eval->done(batch.positions[i], batch.eval_round, slot->ticket());
                keep[i] = done && !batch.rejected(i) ? 1 : 0;
                info.samples += done ? 1 : 0;
                info.eval_ids.push_back(p.node_rank + batch.positions[i] * p.nnodes);
            }
            staged_.push_back(std::move(info));
            compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
            continue;
        }
        HSRING_ASSERT(*batch.plan_slot == j, "took plan slot {} while waiting for {}", *batch.plan_slot, j);
        if (!compute_.receive(*slot)) continue;  // its bytes died with their target: plan slot re-issued
        const std::uint64_t step = plan_.step_of(j);
        if (!ctx_.ledger.consume_slot(j, slot->ticket(), ctx_.env.rank, step)) {
            // A stale copy: its plan slot was re-issued meanwhile (its writer was presumed dead, or
            // the gang resumed from an older checkpoint) and is produced again under another ticket.
            log::info("slot ticket {} holds plan slot {}, which was re-issued meanwhile: dropped, the plan slot is "
                      "produced again", slot->ticket(), j);
            slot->release();
            continue;
        }
        std::vector<std::uint8_t> keep(batch.positions.size(), 0);
        StagedSlot info;
        info.plan_slot = j;
        info.ticket = slot->ticket();
        std::vector<std::uint64_t> rejected;
        for (std::size_t i = 0; i < batch.positions.size(); ++i) {
            if (batch.rejected(i)) {
                rejected.push_back(batch.positions[i]);
                continue;
            }
            keep[i] = 1;
            info.positions.push_back(batch.positions[i]);
            info.tokens += batch.lengths[i];
        }
        info.samples = info.positions.size();
        log_.trained(ctx_.env.incarnation, step, info.positions);
        if (!rejected.empty()) {
            log_.rejected(ctx_.env.incarnation, step, rejected);
            log::warn("plan slot {} (step {}): {} of its {} samples were rejected by their target (non-finite hidden "
                      "states): positions {}", j, step, rejected.size(), batch.positions.size(), id_list(rejected));
        }
        staged_.push_back(std::move(info));
        next_take_ = plan_.next_of_rank(j, ctx_.env.rank);
        ctx_.ledger.set_need(ctx_.env.rank, next_take_);  // the targets' window moves on
        fault::point("stage");  // HSRING_FAULT (CONTRACT.md): the slot is READING, its samples consumed
        compute_.stage(std::move(*slot), std::move(batch), std::move(keep));
    }
    compute_.poll();
}

bool Drafter::stage_until(std::uint64_t j, RoundStats& r) {
    for (;;) {
        // While stopping, nothing beyond the current step is taken: its samples would only be
        // consumed to be re-issued at the next start.
        const auto [b, e] = plan_.share(plan_.step_of(j), ctx_.env.rank);
        fill_pipeline(r, stopping() ? e - 1 : plan_.slots);
        while (!staged_.empty() && staged_.front().eval()) evaluate_front(r);
        if (!staged_.empty()) {
            HSRING_ASSERT(*staged_.front().plan_slot == j, "staged plan slot {} while training {}",
                          *staged_.front().plan_slot, j);
            return true;
        }
        const Ledger::EntryView v = ctx_.ledger.slot_view(j);
        if (v.state == EntryState::Consumed || v.state == EntryState::Durable)
            fail("plan slot {} is {} by drafter rank {} in step {} although this rank resumed before that step: the "
                 "ledger disagrees with the checkpoint; stop the run and start it again (the ledger is rebuilt)", j,
                 to_string(v.state), v.rank, v.step);
        if (v.state == EntryState::Pending) make_room(j);
        if (stopping()) {
            // It comes if a target is writing it (or it is READY); PENDING, it comes only while
            // targets still take slots.
            const bool coming = v.state == EntryState::InSlot ||
                                (!ctx_.ring.stopping() && writers_alive(ctx_.ring));
            if (!coming) return false;
            std::this_thread::sleep_for(20ms);  // the ring answers at once while it stops
        }
        ctx_.publish(stats_);
    }
}

// Plan slot j is PENDING and nothing can write it: every ring slot holds a later plan slot, READY
// (none is being written or read). That happens after a rollback: the gang resumed from a
// checkpoint, so it needs slots again that were trained after it, while the ring filled up with
// slots for a window further on (worker/core/plan_room.hpp).
void Drafter::make_room(std::uint64_t j) {
    const Occupancy o = ctx_.ring.occupancy();
    if (o.free > 0 || o.writing > 0 || o.reading > 0) return;
    std::uint64_t ticket = 0;
    const auto gave = give_back_latest_after(ctx_.ring, j, [](std::optional<Owner>) { return true; }, [&](std::uint64_t t) {
        ticket = t;
        ctx_.ledger.repend_ticket(t);
    });
    if (gave)
        log::info("plan slot {} is needed and the ring is full of later ones: slot ticket {} (plan slot {}) gave its "
                  "room; that plan slot is produced again later", j, ticket, *gave);
}

void Drafter::evaluate_front(RoundStats& r) {
    const StagedSlot s = std::move(staged_.front());
    staged_.pop_front();
    const BatchResult b = compute_.evaluate_one(s.eval_ids);
    r.add_eval(b, s.samples);
}

} // namespace hsring::worker
