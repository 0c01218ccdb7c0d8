// Text and JSON reports of a plan (see report.hpp).
#include "plan/report.hpp"

#include "hsring/units.hpp"
#include "hsring/drafter_kind.hpp"
#include "plan/drafter_plan.hpp"

#include <fmt/format.h>

namespace hsring::plan {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
}

std::string verdict(bool known, bool fits, std::uint64_t predicted, std::uint64_t capacity) {
    if (!known) return "capacity unknown";
    if (fits) return "fits";
    return fmt::format("DOES NOT FIT ({} over)", gib(predicted - capacity));
}

void workload_text(std::string& s, const Plan& p) {
    s += fmt::format("samples  {}\n", p.samples);
    s += fmt::format("targets  one packed batch per slot: up to {} tokens ([ring] slot_tokens)\n", num(p.target_tokens));
    s += "drafter  " + drafter_plan(p.cfg.drafter.type).workload_line(p) + "\n";
}

void parts_text(std::string& s, const std::vector<Part>& parts) {
    for (const auto& part : parts) s += fmt::format("    {:<28} {:>11}  {}\n", part.name, gib(part.bytes), part.how);
}

} // namespace

std::string format_plan(const Plan& p, const std::vector<Suggestion>& suggestions, const Capacity& cap) {
    std::string s = fmt::format("hsring plan {}\n", p.cfg.file.string());
    workload_text(s, p);
    for (const auto& g : p.gpus) {
        const bool known = g.capacity.has_value();
        s += fmt::format("\nGPU {}  {}: {} predicted", g.index, join(g.worker_names(), " + "), gib(g.predicted()));
        if (!g.on_machine)
            s += fmt::format(", but this machine has {} GPU(s) ({}): NOT ON THIS MACHINE\n", *cap.gpu_count,
                             cap.gpu_count_source);
        else if (known)
            s += fmt::format(" of {} ({}): {}\n", gib(*g.capacity), cap.gpu_source,
                             verdict(true, g.fits(), g.predicted(), *g.capacity));
        else
            s += "\n";
        for (const auto& w : g.workers) {
            s += fmt::format("  {}: {} (torch allocated {}), peak in {}\n", w.name, gib(w.total()), gib(w.allocated()),
                             w.peak_phase);
            parts_text(s, w.parts);
        }
    }
    const HostMemory& h = p.host.memory;
    s += fmt::format("\nhost: {} predicted", gib(h.total()));
    if (p.host.capacity)
        s += fmt::format(" of {} ({}): {}\n", gib(*p.host.capacity), cap.host_source,
                         verdict(true, p.host.fits(), h.total(), *p.host.capacity));
    else
        s += fmt::format(" ({})\n", cap.host_source);
    for (const auto& w : p.cpu_workers)
        s += fmt::format("  {} on the CPU: {} of model memory (fp32)\n", w.name, gib(w.allocated()));
    parts_text(s, h.parts);
    if (h.huge_pages) {
        s += fmt::format("  huge pages: the ring needs {} pages of 2 MiB", num(h.huge_pages));
        if (cap.huge_pages_total) s += fmt::format(" (reserved now: {})", num(*cap.huge_pages_total));
        s += fmt::format("; as root: bin/hugepages {}\n", h.huge_pages);
    }
    if (h.pinned_bytes) s += fmt::format("  pinned: {} of the ring registered with CUDA (cudaHostRegister)\n", gib(h.pinned_bytes));

    s += "\n";
    if (!p.gpu_capacity_known())
        s += fmt::format("GPU capacity unknown: {}; give --gpu-mem SIZE (e.g. --gpu-mem 96GiB)\n", cap.gpu_source);
    else if (p.fits())
        s += "everything fits\n";
    else {
        s += "something does not fit\n";
        if (suggestions.empty())
            s += fmt::format("  no single knob makes it fit (tried [train] micro_batch_tokens, {}[drafter] "
                             "inflight_slots, [ring] slot_tokens, size): a larger machine, or a smaller model\n",
                             drafter_kind(p.cfg.drafter.type).has_recompute_and_loss_chunk ? "recompute, loss_chunk, " : "");
        else
            s += "  to make it fit, change one of (each value checked by planning the changed config):\n";
        for (const auto& x : suggestions)
            s += fmt::format("    {} = {}  (now {}): {}\n", x.knob, x.value, x.current, x.effect);
    }
    return s;
}

nlohmann::json plan_json(const Plan& p, const std::vector<Suggestion>& suggestions, const Capacity& cap) {
    using nlohmann::json;
    auto parts_obj = [](const std::vector<Part>& parts) {
        json o = json::object();
        for (const auto& x : parts) o[x.name] = x.bytes;
        return o;
    };
    json gpus = json::array();
    for (const auto& g : p.gpus) {
        json parts = json::object();
        for (const auto& [name, bytes] : g.parts()) parts[name] = bytes;
        json workers = json::object();
        for (const auto& w : g.workers)
            workers[w.name] = {{"predicted_bytes", w.total()}, {"allocated_bytes", w.allocated()},
                               {"peak_phase", w.peak_phase}, {"parts", parts_obj(w.parts)}};
        gpus.push_back({{"index", g.index},
                        {"workers", g.worker_names()},
                        {"predicted_peak_bytes", g.predicted()},
                        {"predicted_allocated_bytes", g.allocated()},
                        {"capacity_bytes", g.capacity ? json(*g.capacity) : json(nullptr)},
                        {"capacity_source", g.on_machine ? cap.gpu_source : "not on this machine"},
                        {"on_machine", g.on_machine},
                        {"fits", g.capacity ? json(g.fits()) : json(nullptr)},
                        {"parts", parts},
                        {"per_worker", workers}});
    }
    const HostMemory& h = p.host.memory;
    json cpu = json::object();
    for (const auto& w : p.cpu_workers) cpu[w.name] = {{"allocated_bytes", w.allocated()}, {"parts", parts_obj(w.parts)}};
    json host = {{"predicted_bytes", h.total()},
                 {"huge_pages", h.huge_pages},
                 {"huge_pages_reserved", cap.huge_pages_total ? json(*cap.huge_pages_total) : json(nullptr)},
                 {"pinned_bytes", h.pinned_bytes},
                 {"capacity_bytes", p.host.capacity ? json(*p.host.capacity) : json(nullptr)},
                 {"capacity_source", cap.host_source},
                 {"fits", p.host.capacity ? json(p.host.fits()) : json(nullptr)},
                 {"parts", parts_obj(h.parts)},
                 {"cpu_workers", cpu}};
    const Workload& w = p.workload;
    json worst = {{"slot", p.worst_slot}, {"samples", p.worst.samples}, {"tokens", p.worst.tokens}};
    json workload = {{"samples", p.samples},
                     {"target_batch_tokens", p.target_tokens},
                     {"slots", w.slots.size()},
                     {"max_slot_tokens", w.max_slot_tokens},
                     {"mean_sample_tokens", w.mean_sample_tokens},
                     {"micro_batch_tokens", w.micro_batch_tokens},
                     {"micro_batches_per_step", w.micro_batches_per_step},
                     {"drafter_type", p.cfg.drafter.type}};
    drafter_plan(p.cfg.drafter.type).workload_json(p, worst, workload);
    workload["worst_micro_batch"] = worst;
    json sug = json::array();
    for (const auto& x : suggestions)
        sug.push_back({{"knob", x.knob}, {"value", x.value}, {"current", x.current}, {"effect", x.effect},
                       {"fits_all", x.fits_all}});
    return {{"config", p.cfg.file.string()},
            {"fits", p.gpu_capacity_known() ? json(p.fits()) : json(nullptr)},
            {"gpus", gpus},
            {"host", host},
            {"workload", workload},
            {"suggestions", sug}};
}

} // namespace hsring::plan
