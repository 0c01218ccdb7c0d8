#include "worker/synth_compute.hpp"

#include "data/splitmix.hpp"
#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <fcntl.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

namespace hsring::worker {

std::uint64_t synth_mix(std::uint64_t x) { return data::detail::mix64(x + data::detail::kGolden); }

std::uint64_t synth_seed(const PackedBatch& b, std::uint32_t layer) {
    std::uint64_t h = synth_mix(layer);
    for (std::size_t i = 0; i < b.positions.size(); ++i) h = synth_mix(h ^ b.positions[i] ^ (std::uint64_t{b.lengths[i]} << 40));
    for (std::int32_t t : b.tokens) h = synth_mix(h ^ static_cast<std::uint32_t>(t));
    return h;
}

namespace {
// Rows of the batch's tokens in layer `l`: [l * layer_stride, + n_tokens * row_bytes).
std::span<std::uint64_t> layer_words(std::byte* payload, const RingGeometry& g, std::uint32_t l, std::uint64_t n_tokens) {
    const std::uint64_t row = std::uint64_t{g.hidden} * g.dtype_bytes;
    const std::uint64_t stride = g.slot_tokens * row;
    return {reinterpret_cast<std::uint64_t*>(payload + l * stride), n_tokens * row / 8};
}
} // namespace

void SynthTarget::write(const PackedBatch& batch, WriteSlot& slot) {
    if (hold_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(hold_ms_));
    for (std::uint32_t l = 0; l < g_.n_layers; ++l) {
        auto w = layer_words(slot.payload().data(), g_, l, batch.n_tokens());
        const std::uint64_t seed = synth_seed(batch, l);
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = synth_mix(seed + i);
    }
}

void SynthDrafter::Sum::add(std::uint64_t x) {
    for (int i = 0; i < 4; ++i) limbs[i] += static_cast<double>((x >> (16 * i)) & 0xffff);
    count += 1;
}

std::uint64_t SynthDrafter::Sum::value() const {
    std::uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v += static_cast<std::uint64_t>(limbs[i]) << (16 * i);  // mod 2^64
    return v;
}

std::uint64_t SynthDrafter::mix_of(std::uint32_t node_rank, std::uint64_t pos) {
    return synth_mix(pos ^ (std::uint64_t{node_rank} << 48));
}

void SynthDrafter::restore(const std::filesystem::path* checkpoint) {
    state_sum_ = state_count_ = 0;
    accum_ = Sum{};
    if (!checkpoint) return;
    std::istringstream in(safe::read_file(*checkpoint / "synth_state.txt").value_or(""));
    if (!(in >> state_sum_ >> state_count_)) fail("{}: no synth_state.txt: not a synthetic-mode checkpoint", checkpoint->string());
}

void SynthDrafter::broadcast_state() {
    // The master's state, split into exact limbs (the others contribute zeros).
    Sum s;
    if (gang_.place().is_master()) {
        for (int i = 0; i < 4; ++i) s.limbs[i] = static_cast<double>((state_sum_ >> (16 * i)) & 0xffff);
        s.count = static_cast<double>(state_count_);
    }
    std::vector<double> v(s.limbs, s.limbs + 4);
    v.push_back(s.count);
    gang_.allreduce_sum(v);
    std::copy(v.begin(), v.begin() + 4, s.limbs);
    state_sum_ = s.value();
    state_count_ = static_cast<std::uint64_t>(v[4]);
}

void SynthDrafter::stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) {
    // Verify the payload against the pattern the metadata implies: any torn write, stale slot or
    // mixed-up metadata shows up here.
    for (std::uint32_t l = 0; l < g_.n_layers; ++l) {
        auto w = layer_words(const_cast<std::byte*>(slot.payload().data()), g_, l, batch.n_tokens());
        const std::uint64_t seed = synth_seed(batch, l);
        for (std::size_t i = 0; i < w.size(); ++i)
            if (w[i] != synth_mix(seed + i))
                fail("slot ticket {}: payload of layer {} differs from its metadata at word {}: corrupt slot", slot.ticket(), l, i);
    }
    Staged s;
    for (std::size_t i = 0; i < batch.positions.size(); ++i) {
        if (!keep[i]) continue;
        s.positions.push_back(batch.positions[i]);
        s.tokens += batch.lengths[i];
    }
    if (hold_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(hold_ms_));
    slot.release();  // the "copy" is done: CPU mode copies nothing further
    staged_.push_back(std::move(s));
}

BatchResult SynthDrafter::train_one(bool sync_grads) {
    Staged s = std::move(staged_.front());
    staged_.pop_front();
    if (step_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms_));
    for (std::uint64_t p : s.positions) accum_.add(mix_of(node_rank_, p));
    BatchResult r;
    r.tokens = s.tokens;
    r.compute_ms = step_ms_;
    // A sample's "loss weight" is one: the step's weight sum counts the samples trained.
    r.weight_sum = static_cast<double>(s.positions.size());
    synced_ = false;
    if (sync_grads && gang_.world() > 1) r.sync_ms = sync_grads_now();
    return r;
}

BatchResult SynthDrafter::evaluate_one(const std::vector<std::uint64_t>& sample_ids) {
    // The payload was checked when staged; an evaluation "scores" each sample once.
    Staged s = std::move(staged_.front());
    staged_.pop_front();
    BatchResult r;
    r.tokens = s.tokens;
    r.weight_sum = static_cast<double>(sample_ids.size());
    return r;
}

double SynthDrafter::sync_grads() { return sync_grads_now(); }

double SynthDrafter::sync_grads_now() {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<double> v(accum_.limbs, accum_.limbs + 4);
    v.push_back(accum_.count);
    gang_.allreduce_sum(v);
    std::copy(v.begin(), v.begin() + 4, accum_.limbs);
    accum_.count = v[4];
    synced_ = true;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

StepResult SynthDrafter::optimizer_step(double, double) {
    state_sum_ += accum_.value();
    state_count_ += static_cast<std::uint64_t>(accum_.count);
    accum_ = Sum{};
    return {};
}

namespace {

// The checksum state as of the snapshot (two numbers: written wherever, whenever).
class SynthSnapshot final : public StateSnapshot {
public:
    SynthSnapshot(std::uint64_t sum, std::uint64_t count) : sum_(sum), count_(count) {}
    void write(const std::filesystem::path& dir) override {
        safe::Fd f = safe::open_file(dir / "synth_state.txt", O_WRONLY | O_CREAT | O_TRUNC);  // never through a link
        safe::write_all(f.get(), fmt::format("{} {}\n", sum_, count_), (dir / "synth_state.txt").string());
    }

private:
    std::uint64_t sum_, count_;
};

} // namespace

std::unique_ptr<StateSnapshot> SynthDrafter::snapshot() { return std::make_unique<SynthSnapshot>(state_sum_, state_count_); }

void SynthDrafter::export_model(const std::filesystem::path& dir) {
    if (std::filesystem::is_symlink(dir)) fail("{} is a symbolic link: refusing to export through it; remove the link", dir.string());
    std::filesystem::create_directories(dir);
    snapshot()->write(dir);
}

} // namespace hsring::worker
