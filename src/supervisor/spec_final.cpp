// The final tau of a complete run (see spec_final.hpp).
#include "supervisor/spec_final.hpp"

#include "hsring/acceptance.hpp"
#include "hsring/error.hpp"
#include "hsring/metrics_file.hpp"
#include "hsring/programs.hpp"
#include "supervisor/console.hpp"
#include "supervisor/spawn.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>

namespace hsring::supervisor {

using nlohmann::json;

json spec_summary(const json& j, std::uint64_t step, bool final) {
    std::vector<std::int64_t> lengths;
    for (const auto& p : j.at("prompts"))
        for (const auto& a : p.at("acceptance_lengths")) lengths.push_back(a.get<std::int64_t>());
    return {{"tau", j.at("tau")},
            {"acceptance_per_position", acceptance_per_position(lengths, j.at("block_size").get<std::int64_t>())},
            {"step", step},
            {"prompts", j.at("prompts").size()},
            {"verify_steps", j.at("verify_steps")},
            {"new_tokens", j.at("new_tokens")},
            {"lossless", j.at("lossless")},
            {"speedup", j.at("speedup")},
            {"final", final}};
}

json last_tau(const std::filesystem::path& metrics) {
    std::ifstream in(metrics, std::ios::binary);
    if (!in) return nullptr;
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    const std::streamoff from = std::max<std::streamoff>(0, size - 65536);
    in.seekg(from);
    std::string text(static_cast<std::size_t>(size - from), '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    // Lines from the end; the first may be cut (from > 0) and is then not JSON: skipped.
    std::size_t end = text.size();
    while (end > 0) {
        const std::size_t nl = text.rfind('\n', end - 1);
        const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
        const std::string_view line(text.data() + begin, end - begin);
        if (line.find("\"spec\"") != std::string_view::npos) {
            const json row = json::parse(line, nullptr, false);
            if (row.is_object() && row.contains("spec") && row["spec"].is_object()) return row["spec"];
        }
        if (nl == std::string::npos) break;
        end = nl;
    }
    return nullptr;
}

namespace {

struct Finished {
    int status = 0;
    std::string out, err;
};

// Runs the child to its end, collecting both outputs.
Finished run_to_end(const SpawnSpec& spec) {
    Spawned s = spawn(spec);
    Finished f;
    int fds[2] = {s.out_fd, s.err_fd};
    std::string* into[2] = {&f.out, &f.err};
    while (fds[0] >= 0 || fds[1] >= 0) {
        pollfd p[2];
        nfds_t n = 0;
        int which[2];
        for (int i = 0; i < 2; ++i)
            if (fds[i] >= 0) {
                p[n] = {fds[i], POLLIN, 0};
                which[n++] = i;
            }
        if (::poll(p, n, -1) < 0 && errno != EINTR) fail("poll: {}", errno_text(errno));
        for (nfds_t k = 0; k < n; ++k) {
            if (!p[k].revents) continue;
            char buf[65536];
            const ssize_t r = ::read(p[k].fd, buf, sizeof buf);
            if (r > 0) into[which[k]]->append(buf, static_cast<std::size_t>(r));
            else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                ::close(p[k].fd);
                fds[which[k]] = -1;
            }
        }
    }
    while (::waitpid(s.pid, &f.status, 0) < 0 && errno == EINTR) {
    }
    return f;
}

} // namespace

std::optional<json> measure_final_tau(const Config& cfg, const Derived& d, std::uint64_t step, Console& console) {
    const EvalConfig& e = cfg.eval;
    try {
        const Place& place = cfg.topology.targets.front();
        SpawnSpec spec;
        spec.program = locate_program("hsring-model");
        spec.argv = {"hsring-model",
                     "spec-decode",
                     d.export_dir.string(),
                     "--target",
                     d.target.source,
                     "--prompts",
                     cfg.resolve(e.spec_prompts).string(),
                     "--max-new-tokens",
                     std::to_string(e.spec_max_new_tokens),
                     "--device",
                     place.is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", place.gpu),
                     "--preset-seed",
                     std::to_string(cfg.run.seed),
                     "--target-weights",  // the target as the run had it, as target.0's tau during training
                     to_string(cfg.target.weights),
                     "--json"};
        if (e.spec_samples) spec.argv.insert(spec.argv.end(), {"--samples", std::to_string(e.spec_samples)});
        console.info("measuring tau of the exported drafter with its target ({} linear weights): spec-decode on {} ({} "
                     "new tokens per prompt)", to_string(cfg.target.weights), e.spec_prompts.string(), e.spec_max_new_tokens);
        const auto t0 = std::chrono::steady_clock::now();
        const Finished f = run_to_end(spec);
        if (!WIFEXITED(f.status) || WEXITSTATUS(f.status) != 0) {
            std::string last = f.err;
            while (!last.empty() && last.back() == '\n') last.pop_back();
            if (const auto nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
            fail("hsring-model spec-decode exited {}: {}", WIFEXITED(f.status) ? WEXITSTATUS(f.status) : 128 + WTERMSIG(f.status),
                 last);
        }
        const json row = {{"step", step},
                          {"spec", spec_summary(json::parse(f.out), step, true)},
                          {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
        MetricsFile(d.run_dir / "metrics.jsonl", d.run_dir / "tensorboard" / "spec").append(row);
        return row["spec"];
    } catch (const std::exception& ex) {
        console.warn("tau of the export not measured: {}", ex.what());
        return std::nullopt;
    }
}

} // namespace hsring::supervisor
