// GPU and host capacity without CUDA (see capacity.hpp).
#include "plan/capacity.hpp"

#include "hsring/units.hpp"
#include "plan/child_process.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hsring::plan {

std::optional<std::uint64_t> Capacity::gpu(int index) const {
    if (gpu_bytes.empty() || index < 0) return std::nullopt;
    if (static_cast<std::size_t>(index) < gpu_bytes.size()) return gpu_bytes[static_cast<std::size_t>(index)];
    if (gpu_source == "--gpu-mem") return gpu_bytes.front();
    return std::nullopt;
}

NvidiaSmi query_nvidia_smi() {
    NvidiaSmi r;
    const char* env = std::getenv("HSRING_NVIDIA_SMI");
    const std::string program = env && *env ? env : "nvidia-smi";
    ChildResult c = run_child({program, "--query-gpu=memory.total", "--format=csv,noheader,nounits"}, {}, 30.0);
    if (!c.started) {
        r.error = fmt::format("{} is not installed ({})", program, c.error);
        return r;
    }
    if (c.exit_code != 0) {
        std::string tail = c.output.substr(0, 200);
        while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
        r.error = fmt::format("{} failed (exit {}): {}", program, c.exit_code, tail);
        return r;
    }
    std::istringstream in(c.output);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        char* end = nullptr;
        const unsigned long long mib = std::strtoull(line.c_str(), &end, 10);
        if (end == line.c_str() || mib == 0) {
            r.memory_bytes.clear();
            r.error = fmt::format("{}: cannot read a memory size from '{}'", program, line);
            return r;
        }
        r.memory_bytes.push_back(mib * MiB);  // nounits: MiB
    }
    if (r.memory_bytes.empty()) r.error = fmt::format("{} lists no GPU", program);
    return r;
}

MemInfo parse_meminfo(const std::string& text) {
    MemInfo m;
    std::istringstream in(text);
    std::string key;
    std::uint64_t value = 0;
    std::string unit;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream l(line);
        if (!(l >> key >> value)) continue;
        if (key == "MemTotal:") m.total_bytes = value * KiB;  // "kB" in /proc/meminfo is KiB
        if (key == "HugePages_Total:") m.huge_pages_total = value;
    }
    return m;
}

Capacity query_capacity(std::optional<std::uint64_t> gpu_mem, std::optional<std::uint64_t> host_mem,
                        std::optional<std::uint64_t> gpus) {
    Capacity c;
    NvidiaSmi smi;
    const bool need_smi = !gpu_mem || !gpus;
    if (need_smi) smi = query_nvidia_smi();
    if (gpu_mem) {
        c.gpu_bytes.assign(std::max<std::uint64_t>(1, gpus.value_or(smi.memory_bytes.size())), *gpu_mem);
        c.gpu_source = "--gpu-mem";
    } else if (!smi.memory_bytes.empty()) {
        c.gpu_bytes = smi.memory_bytes;
        c.gpu_source = "nvidia-smi";
    } else {
        c.gpu_source = smi.error;
    }
    if (gpus) {
        c.gpu_count = gpus;
        c.gpu_count_source = "--gpus";
    } else if (!smi.memory_bytes.empty()) {
        c.gpu_count = smi.memory_bytes.size();
        c.gpu_count_source = "nvidia-smi";
    }
    std::ifstream f("/proc/meminfo");
    std::stringstream text;
    text << f.rdbuf();
    const MemInfo mi = parse_meminfo(text.str());
    c.huge_pages_total = mi.huge_pages_total;
    if (host_mem) {
        c.host_bytes = host_mem;
        c.host_source = "--host-mem";
    } else if (mi.total_bytes) {
        c.host_bytes = mi.total_bytes;
        c.host_source = "/proc/meminfo MemTotal";
    } else {
        c.host_source = "unknown (no /proc/meminfo)";
    }
    return c;
}

} // namespace hsring::plan
