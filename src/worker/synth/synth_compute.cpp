#include "worker/synth/synth_compute.hpp"

#include "data/splitmix.hpp"
#include "hsring/cuda_util.hpp"
#include "hsring/error.hpp"
#include "hsring/fault.hpp"
#include "hsring/safe_file.hpp"
#include "hsring/slot_rows.hpp"

#include <fcntl.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
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

SynthTarget::SynthTarget(Ring& ring, const transport::TransportOptions& opts, double hold_ms)
    : g_(ring.geometry()), hold_ms_(hold_ms), cuda_(opts.cuda), writer_(transport::make_slot_writer(ring, opts)) {
#ifdef HSRING_HAVE_CUDA
    if (cuda_) {
        device_rows_.resize(g_.n_layers);
        for (void*& p : device_rows_) HSRING_CUDA(cudaMalloc(&p, g_.slot_tokens * std::uint64_t{g_.hidden} * g_.dtype_bytes));
    }
#endif
}

SynthTarget::~SynthTarget() {
    writer_.reset();  // its copies from device_rows_ end first
#ifdef HSRING_HAVE_CUDA
    for (void* p : device_rows_) cudaFree(p);
#endif
}

std::vector<std::uint8_t> SynthTarget::write(const PackedBatch& batch, WriteSlot& slot) {
    const auto t0 = std::chrono::steady_clock::now();
    if (hold_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(hold_ms_));
    writer_->begin(slot, batch.n_tokens());
    const std::uint64_t row = std::uint64_t{g_.hidden} * g_.dtype_bytes;
    for (std::uint32_t l = 0; l < g_.n_layers; ++l) {
        rows_.resize(batch.n_tokens() * row / 8);
        const std::uint64_t seed = synth_seed(batch, l);
        for (std::size_t i = 0; i < rows_.size(); ++i) rows_[i] = synth_mix(seed + i);
        if (!cuda_) {
            writer_->put_layer(l, rows_.data(), nullptr, nullptr);  // a CPU copy: done when it returns
            continue;
        }
#ifdef HSRING_HAVE_CUDA
        // What a target's forward would have produced on its GPU.
        HSRING_CUDA(cudaMemcpy(device_rows_[l], rows_.data(), rows_.size() * 8, cudaMemcpyHostToDevice));
        writer_->put_layer(l, device_rows_[l], nullptr, nullptr);
#endif
    }
    writer_->finish();
    last_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // HSRING_FAULT ...:hidden:N:nan: the slot's first sample reports non-finite states (the pattern
    // stays: synthetic bytes are checked, not computed with).
    std::vector<std::uint8_t> bad(batch.positions.size(), 0);
    if (fault::poison("hidden") && !bad.empty()) bad[0] = 1;
    return bad;
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
    state_sum_ = state_count_ = state_chain_ = 0;
    accum_ = Sum{};
    if (!checkpoint) return;
    std::istringstream in(safe::read_file(*checkpoint / "synth_state.txt").value_or(""));
    if (!(in >> state_sum_ >> state_count_ >> state_chain_))
        fail("{}: no synth_state.txt: not a synthetic-mode checkpoint", checkpoint->string());
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
    for (int i = 0; i < 4; ++i)  // the chain in exact 16-bit limbs too
        v.push_back(gang_.place().is_master() ? static_cast<double>((state_chain_ >> (16 * i)) & 0xffff) : 0.0);
    gang_.allreduce_sum(v);
    std::copy(v.begin(), v.begin() + 4, s.limbs);
    state_sum_ = s.value();
    state_count_ = static_cast<std::uint64_t>(v[4]);
    state_chain_ = 0;
    for (int i = 0; i < 4; ++i) state_chain_ |= static_cast<std::uint64_t>(v[5 + i]) << (16 * i);
}

SynthDrafter::SynthDrafter(Ring& ring, const transport::TransportOptions& opts, std::uint32_t inflight,
                           distributed::Gang& gang, std::uint32_t node_rank, double step_ms, double hold_ms)
    : g_(ring.geometry()), cuda_(opts.cuda),
      buffer_bytes_(g_.n_layers * g_.slot_tokens * std::uint64_t{g_.hidden} * g_.dtype_bytes), gang_(gang),
      node_rank_(node_rank), step_ms_(step_ms), hold_ms_(hold_ms) {
    for (std::uint32_t i = 0; i < inflight; ++i) {
        void* p = nullptr;
        if (cuda_) {
#ifdef HSRING_HAVE_CUDA
            HSRING_CUDA(cudaMalloc(&p, buffer_bytes_));
#endif
        } else {
            p = std::malloc(buffer_bytes_);  // untouched: only the rows a batch fills are ever written
            if (!p) fail("cannot allocate a staging buffer of {} bytes", buffer_bytes_);
        }
        buffers_.push_back(p);
        busy_.push_back(false);
    }
    reader_ = transport::make_slot_reader(ring, opts);
}

SynthDrafter::~SynthDrafter() {
    staged_.clear();
    reader_.reset();  // waits for copies still going into the buffers
    for (void* p : buffers_) {
#ifdef HSRING_HAVE_CUDA
        if (cuda_) {
            cudaFree(p);
            continue;
        }
#endif
        std::free(p);
    }
}

std::size_t SynthDrafter::free_buffer() const {
    std::size_t b = 0;
    while (busy_[b]) ++b;  // the loop never stages more than inflight_slots
    return b;
}

bool SynthDrafter::receive(ReadSlot& slot) {
    const std::size_t b = free_buffer();
    if (!reader_->receive(slot, buffers_[b])) return false;
    received_ = b;
    return true;
}

void SynthDrafter::stage(ReadSlot slot, PackedBatch batch, std::vector<std::uint8_t> keep) {
    Staged s;
    for (std::size_t i = 0; i < batch.positions.size(); ++i) {
        if (!keep[i]) continue;
        s.positions.push_back(batch.positions[i]);
        s.tokens += batch.lengths[i];
    }
    if (hold_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(hold_ms_));
    s.buffer = received_ ? *received_ : free_buffer();
    received_.reset();
    busy_[s.buffer] = true;
    s.ticket = slot.ticket();
    s.copy = reader_->stage(std::move(slot), buffers_[s.buffer]);
    s.batch = std::move(batch);
    staged_.push_back(std::move(s));
}

SynthDrafter::Staged SynthDrafter::take_checked() {
    Staged s = std::move(staged_.front());
    staged_.pop_front();
    s.copy->wait(nullptr);
    std::byte* arrived = static_cast<std::byte*>(buffers_[s.buffer]);
#ifdef HSRING_HAVE_CUDA
    if (cuda_) {
        check_.resize(buffer_bytes_);
        const FilledRows rows = filled_rows(g_, s.batch.n_tokens());
        for (std::uint64_t i = 0; i < rows.runs; ++i)
            HSRING_CUDA(cudaMemcpy(check_.data() + i * rows.stride, arrived + i * rows.stride, rows.run_bytes,
                                   cudaMemcpyDeviceToHost));
        arrived = check_.data();
    }
#endif
    // The bytes that arrived against the pattern the metadata implies: a torn write, a stale
    // slot, mixed-up metadata or a copy gone wrong shows up here.
    for (std::uint32_t l = 0; l < g_.n_layers; ++l) {
        auto w = layer_words(arrived, g_, l, s.batch.n_tokens());
        const std::uint64_t seed = synth_seed(s.batch, l);
        for (std::size_t i = 0; i < w.size(); ++i)
            if (w[i] != synth_mix(seed + i))
                fail("slot ticket {}: payload of layer {} differs from its metadata at word {}: corrupt slot", s.ticket, l, i);
    }
    busy_[s.buffer] = false;
    return s;
}

BatchResult SynthDrafter::train_one(bool sync_grads) {
    Staged s = take_checked();
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
    // An evaluation checks the bytes like training and "scores" each sample once.
    Staged s = take_checked();
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
    if (fault::poison("grad")) {
        // A non-finite gradient changes nothing (as the real drafter's AdamW).
        accum_ = Sum{};
        StepResult r;
        r.grad_norm = std::numeric_limits<double>::quiet_NaN();
        r.skipped = true;
        return r;
    }
    state_sum_ += accum_.value();
    state_count_ += static_cast<std::uint64_t>(accum_.count);
    state_chain_ = synth_mix(state_chain_ ^ accum_.value());
    accum_ = Sum{};
    return {};
}

namespace {

// The checksum state as of the snapshot (two numbers: written wherever, whenever).
class SynthSnapshot final : public StateSnapshot {
public:
    SynthSnapshot(std::uint64_t sum, std::uint64_t count, std::uint64_t chain) : sum_(sum), count_(count), chain_(chain) {}
    void write(const std::filesystem::path& dir) override {
        safe::Fd f = safe::open_file(dir / "synth_state.txt", O_WRONLY | O_CREAT | O_TRUNC);  // never through a link
        safe::write_all(f.get(), fmt::format("{} {} {}\n", sum_, count_, chain_), (dir / "synth_state.txt").string());
    }
    std::uint64_t bytes() const override { return 64; }

private:
    std::uint64_t sum_, count_, chain_;
};

} // namespace

std::unique_ptr<StateSnapshot> SynthDrafter::snapshot() {
    return std::make_unique<SynthSnapshot>(state_sum_, state_count_, state_chain_);
}

void SynthDrafter::export_model(const std::filesystem::path& dir) {
    if (std::filesystem::is_symlink(dir)) fail("{} is a symbolic link: refusing to export through it; remove the link", dir.string());
    std::filesystem::create_directories(dir);
    snapshot()->write(dir);
}

} // namespace hsring::worker
