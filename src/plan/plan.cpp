// Planning a config against a machine, and the knobs that make it fit (see plan.hpp).
#include "plan/plan.hpp"

#include "hsring/drafter_kind.hpp"
#include "hsring/error.hpp"
#include "hsring/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

namespace hsring::plan {

std::uint64_t GpuPlan::predicted() const {
    std::uint64_t s = 0;
    for (const auto& w : workers) s += w.total();
    return s;
}

std::uint64_t GpuPlan::allocated() const {
    std::uint64_t s = 0;
    for (const auto& w : workers) s += w.allocated();
    return s;
}

std::vector<std::pair<std::string, std::uint64_t>> GpuPlan::parts() const {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (const auto& w : workers)
        for (const auto& p : w.parts) {
            auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == p.name; });
            if (it == out.end()) out.emplace_back(p.name, p.bytes);
            else it->second += p.bytes;
        }
    return out;
}

std::vector<std::string> GpuPlan::worker_names() const {
    std::vector<std::string> out;
    for (const auto& w : workers) out.push_back(w.name);
    return out;
}

bool Plan::gpu_capacity_known() const {
    return std::all_of(gpus.begin(), gpus.end(), [](const GpuPlan& g) { return g.capacity.has_value() || !g.on_machine; });
}

bool Plan::fits() const {
    return host.fits() && std::all_of(gpus.begin(), gpus.end(), [](const GpuPlan& g) { return g.fits(); });
}

const GpuPlan* Plan::gpu(int index) const {
    for (const auto& g : gpus)
        if (g.index == index) return &g;
    return nullptr;
}

std::vector<std::pair<std::string, Place>> worker_places(const Config& cfg) {
    std::vector<std::pair<std::string, Place>> out;
    for (std::size_t i = 0; i < cfg.topology.targets.size(); ++i)
        out.emplace_back("target." + std::to_string(i), cfg.topology.targets[i]);
    for (std::size_t i = 0; i < cfg.topology.drafters.size(); ++i)
        out.emplace_back("drafter." + std::to_string(i), cfg.topology.drafters[i]);
    return out;
}

Planner::Planner(Config cfg, SampleSource source, Capacity capacity)
    : cfg_(std::move(cfg)), shape_(resolve_model_shape(cfg_.target.model, cfg_.file.parent_path())),
      source_(std::move(source)), capacity_(std::move(capacity)) {}

const std::vector<SampleShape>& Planner::shapes(const Config& cfg, const Derived& d) const {
    const auto key = std::make_tuple(d.max_seq_len, std::uint64_t(cfg.train.num_anchors), std::uint64_t(cfg.drafter.block_size));
    auto it = shape_cache_.find(key);
    if (it == shape_cache_.end()) it = shape_cache_.emplace(key, source_.shapes(cfg, d)).first;
    return it->second;
}

Plan Planner::plan(const Config& cfg) const {
    Plan p;
    p.cfg = cfg;
    p.derived = derive(cfg, shape_);
    const Derived& d = p.derived;
    p.samples = source_.describe();
    p.workload = make_workload(shapes(cfg, d), source_.is_synthetic(), cfg, d);
    p.target_tokens = cfg.ring.slot_tokens;
    // A gang's gradients live in the reducer's buckets all the time (memory_model.hpp).
    const std::uint64_t world = gang_world(cfg);
    const bool grads_in_forward = p.workload.micro_batches_per_step > 1 || world > 1;

    // The drafter's worst micro-batch over epoch 0 (all drafters see the same kind of slots).
    const Place drafter_place = cfg.topology.drafters.empty() ? Place{} : cfg.topology.drafters.front();
    std::uint64_t worst_bytes = 0;
    for (std::size_t s = 0; s < p.workload.slots.size(); ++s)
        for (const auto& mb : p.workload.micro_batches(s)) {
            const std::uint64_t b = drafter_batch_peak(cfg, d, drafter_place, mb, grads_in_forward);
            if (b > worst_bytes) {
                worst_bytes = b;
                p.worst = mb;
                p.worst_slot = s;
            }
        }

    std::map<int, GpuPlan> gpus;
    for (const auto& [name, place] : worker_places(cfg)) {
        WorkerMemory w = name.starts_with("target")
                             ? target_memory(cfg, d, name, place, p.target_tokens)
                             : drafter_memory(cfg, d, name, place, p.worst, grads_in_forward, world);
        if (place.is_cpu()) {
            p.cpu_workers.push_back(std::move(w));
            continue;
        }
        GpuPlan& g = gpus[place.gpu];
        g.index = place.gpu;
        g.workers.push_back(std::move(w));
    }
    for (auto& [index, g] : gpus) {
        g.capacity = capacity_.gpu(index);
        g.on_machine = !capacity_.gpu_count || static_cast<std::uint64_t>(index) < *capacity_.gpu_count;
        if (!g.on_machine) g.capacity.reset();
        p.gpus.push_back(std::move(g));
    }
    p.host.memory = host_memory(cfg, d, source_, p.cpu_workers);
    p.host.capacity = capacity_.host_bytes;
    return p;
}

namespace {

// "12GiB" / "640MiB": a [ring] size as TOML.
std::string size_value(std::uint64_t bytes) {
    if (bytes % GiB == 0) return fmt::format("\"{}GiB\"", bytes / GiB);
    return fmt::format("\"{}MiB\"", bytes / MiB);
}

std::string place_list(const std::vector<Place>& places) {
    std::string s;
    for (const auto& p : places) s += (s.empty() ? "" : ", ") + (p.is_cpu() ? std::string("\"cpu\"") : std::to_string(p.gpu));
    return "[" + s + "]";
}

struct Failing {
    std::vector<int> gpus;
    bool host = false;
};

Failing failing(const Plan& p) {
    Failing f;
    for (const auto& g : p.gpus)
        if (g.on_machine && g.capacity && !g.fits()) f.gpus.push_back(g.index);
    f.host = p.host.capacity && !p.host.fits();
    return f;
}

bool fixes(const Plan& q, const Failing& f) {
    for (int i : f.gpus) {
        const GpuPlan* g = q.gpu(i);
        if (g && !g->fits()) return false;
    }
    return !f.host || q.host.fits();
}

// What the changed config predicts for what did not fit, and whether all of it fits then.
std::string effect(const Plan& q, const Failing& f) {
    std::string s;
    for (int i : f.gpus) {
        const GpuPlan* g = q.gpu(i);
        if (!g) continue;
        std::string names;
        for (const auto& n : g->worker_names()) names += (names.empty() ? "" : "+") + n;
        s += fmt::format("{}{} on GPU {} at {} of {}", s.empty() ? "" : ", ", names, i, gib(g->predicted()),
                         gib(*g->capacity));
    }
    if (f.host)
        s += fmt::format("{}host at {} of {}", s.empty() ? "" : ", ", gib(q.host.memory.total()), gib(*q.host.capacity));
    std::vector<std::string> still;
    for (const auto& g : q.gpus)
        if (g.on_machine && g.capacity && !g.fits()) still.push_back("GPU " + std::to_string(g.index));
    if (q.host.capacity && !q.host.fits()) still.push_back("host");
    if (still.empty()) return s + "; everything fits";
    std::string rest;
    for (const auto& x : still) rest += (rest.empty() ? "" : ", ") + x;
    return s + "; still over: " + rest;
}

} // namespace

std::vector<Suggestion> Planner::suggestions(const Plan& p) const {
    const Failing f = failing(p);
    if (f.gpus.empty() && !f.host) return {};
    bool drafter_gpu = false, target_gpu = false;
    for (int i : f.gpus)
        for (const auto& w : p.gpu(i)->workers) (w.name.starts_with("drafter") ? drafter_gpu : target_gpu) = true;

    std::vector<Suggestion> out;
    // Tries the candidate configs in order (closest to the current value first); the first that
    // makes everything that failed fit becomes the suggestion.
    auto search = [&](const std::string& knob, const std::string& current,
                      const std::vector<std::pair<std::string, std::function<void(Config&)>>>& candidates) {
        for (const auto& [value, change] : candidates) {
            Config c = p.cfg;
            change(c);
            std::optional<Plan> q;
            try {
                q = plan(c);
            } catch (const Error&) {
                continue;  // derive() refuses this value (e.g. fewer slots than inflight_slots)
            }
            if (!fixes(*q, f)) continue;
            out.push_back({knob, value, current, effect(*q, f), q->fits()});
            return;
        }
    };
    using Candidates = std::vector<std::pair<std::string, std::function<void(Config&)>>>;
    const Config& c0 = p.cfg;
    std::uint64_t longest = 0;
    for (const auto& s : p.workload.samples) longest = std::max<std::uint64_t>(longest, s.tokens);

    if (drafter_gpu) {
        Candidates mbt;
        // Whole samples only: below the longest sample nothing changes any more.
        for (std::uint64_t v = (c0.train.micro_batch_tokens - 1) / 1024 * 1024; v >= 1024 && mbt.size() < 128; v -= 1024) {
            mbt.emplace_back(std::to_string(v), [v](Config& c) { c.train.micro_batch_tokens = v; });
            if (v < longest) break;
        }
        search("[train] micro_batch_tokens", std::to_string(c0.train.micro_batch_tokens), mbt);
        // recompute and loss_chunk: only for a type that has them (an EAGLE-3 drafter has neither).
        const bool dflash = drafter_kind(c0.drafter.type).has_recompute_and_loss_chunk;
        if (dflash && c0.train.recompute == Recompute::None) {
            const std::size_t before = out.size();
            search("[train] recompute", "\"none\"",
                   Candidates{{"\"layers\"", [](Config& c) { c.train.recompute = Recompute::Layers; }}});
            if (out.size() > before) out.back().effect += kRecomputeCost;
        }
        Candidates chunk;
        for (std::uint64_t v = c0.train.loss_chunk / 2; dflash && v >= 256; v /= 2)
            chunk.emplace_back(std::to_string(v), [v](Config& c) { c.train.loss_chunk = static_cast<std::uint32_t>(v); });
        if (dflash) search("[train] loss_chunk", std::to_string(c0.train.loss_chunk), chunk);
        Candidates inflight;
        for (std::uint32_t v = c0.drafter.inflight_slots - 1; v >= 1; --v)
            inflight.emplace_back(std::to_string(v), [v](Config& c) { c.drafter.inflight_slots = v; });
        search("[drafter] inflight_slots", std::to_string(c0.drafter.inflight_slots), inflight);
    }
    if (drafter_gpu || target_gpu || f.host) {
        Candidates slot;
        for (std::uint64_t v = c0.ring.slot_tokens / 2; v >= 512; v /= 2)
            slot.emplace_back(std::to_string(v), [v](Config& c) { c.ring.slot_tokens = v; });
        const std::size_t before = out.size();
        search("[ring] slot_tokens", std::to_string(c0.ring.slot_tokens), slot);
        if (out.size() > before && std::stoull(out.back().value) < longest)
            out.back().effect += fmt::format(" (samples longer than {} tokens are cut to it: [data] max_seq_len)",
                                             out.back().value);
    }
    if (target_gpu) {
        // A GPU shared by several targets: fewer of them there.
        for (int i : f.gpus) {
            Candidates fewer;
            std::vector<Place> t = c0.topology.targets;
            while (std::count(t.begin(), t.end(), Place{i}) > 1) {
                t.erase(std::find(t.begin(), t.end(), Place{i}));
                fewer.emplace_back(place_list(t), [t](Config& c) { c.topology.targets = t; });
            }
            if (!fewer.empty()) search("[topology] targets", place_list(c0.topology.targets), fewer);
        }
    }
    if (f.host) {
        Candidates ring;
        if (c0.ring.slots) {
            for (std::uint32_t v = c0.ring.slots - 1; v >= 2; --v)
                ring.emplace_back(std::to_string(v), [v](Config& c) { c.ring.slots = v; });
            search("[ring] slots", std::to_string(c0.ring.slots), ring);
        } else {
            for (std::uint64_t n = p.derived.slots - 1; n >= 2; --n) {
                const std::uint64_t size = n * p.derived.slot_stride;
                ring.emplace_back(size_value(size), [size](Config& c) { c.ring.size = size; });
            }
            search("[ring] size", size_value(c0.ring.size), ring);
        }
    }
    return out;
}

} // namespace hsring::plan
