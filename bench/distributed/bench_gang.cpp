// hsring-bench-gang (`hsring-bench gang`): data-parallel drafter training over c10d, on
// synthetic hidden states (random, fixed), at a target preset's dims (default Qwen3-8B: 5
// drafter layers, 2 samples of 3,072 tokens per rank and step, 512 anchors, block 16).
//
// One invocation measures, in the same run:
//   1 rank:   the step (forward + backward + AdamW) alone: the limit of one GPU
//   N ranks:  the same step on every rank, gradients summed over the gang inside the last
//             backward (distributed::GradientSync = c10d's Reducer, bucketed, overlapped)
//   N ranks:  the gradient all-reduce alone (a backward of a zero loss through the reducer)
// and reports trained samples/s, the scaling efficiency (N-rank samples/s / (N x 1-rank)), the
// all-reduce time per step and how much of it the backward hides: exposed = N-rank step - 1-rank
// step, hidden = 1 - exposed / all-reduce alone.
//
// Each rank is a process of its own (this program re-executed with HSRING_BENCH_GANG_RANK set,
// CUDA_VISIBLE_DEVICES = its GPU), as the drafter workers are. --device cpu runs a smoke test
// over Gloo (tiny preset).
#include "../model/bench_common.hpp"
#include "../model/gpu_memory.hpp"
#include "distributed/c10d_gang.hpp"
#include "distributed/gradient_sync.hpp"
#include "hsring/model_shape.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/ops/tensor_init.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <torch/optim/adamw.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace hsring;
using Clock = std::chrono::steady_clock;
using nlohmann::json;


// One rank: `steps` timed steps after `warmup`; writes {"step_ms", "allreduce_ms", ...} to `out`.
int rank_main(const bench::Options& o, int rank, int world, std::uint16_t port, const std::string& out) {
    const at::Device dev = bench::bench_device(o.str("device"));
    const bool cuda = dev.is_cuda();
    std::unique_ptr<distributed::Gang> gang;
    distributed::C10dGang* c10d = nullptr;
    if (world > 1) {
        distributed::GangOptions go;
        go.rendezvous.place = GangPlace{0, 1, static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(world)};
        go.rendezvous.master_addr = "127.0.0.1";
        go.rendezvous.master_port = port;
        go.rendezvous.timeout = std::chrono::seconds(300);
        go.rendezvous.identity = {{"bench", "gang"}};
        go.cuda = cuda;
        auto g = distributed::C10dGang::join(go);
        c10d = g.get();
        gang = std::move(g);
    }
    const ModelShape shape = preset_shape(o.str("preset"));
    const int layers = static_cast<int>(o.num("layers"));
    const auto block = static_cast<int>(o.num("block"));
    const model::DFlashConfig dcfg =
        model::dflash_config_for(shape, layers, block, shape.mask_token_id.value_or(shape.vocab_size - 1),
                                 dflash_layer_ids(static_cast<int>(shape.num_layers), layers));
    const at::ScalarType compute = model::default_compute_dtype(dev);
    model::TargetHead head = model::load_target_head(shape, dev, compute, 7);
    model::DFlashDrafter drafter(dcfg, 7, dev);
    drafter->train();
    torch::optim::AdamW adam(drafter->parameters(), torch::optim::AdamWOptions(1e-4));
    std::unique_ptr<distributed::GradientSync> sync;
    if (c10d) sync = std::make_unique<distributed::GradientSync>(*c10d, drafter->parameters());

    // Random hidden states and tokens for `samples` sequences of `seq` tokens, trained in full.
    const std::int64_t samples = o.num("samples"), seq = o.num("seq"), T = samples * seq;
    at::Generator g = model::cpu_generator(1000 + static_cast<std::uint64_t>(rank));
    at::Tensor hidden = at::randn({static_cast<std::int64_t>(dcfg.target_layer_ids.size()), T, shape.hidden_size}, g)
                            .to(dev, compute);
    at::Tensor tokens = at::randint(shape.vocab_size - 1, {T}, g, at::kLong).to(dev);
    at::Tensor mask = at::ones({T}, at::kFloat).to(dev);
    std::vector<std::int64_t> cu{0};
    for (std::int64_t s = 0; s < samples; ++s) cu.push_back(cu.back() + seq);
    model::DFlashLossOptions opt;
    opt.num_anchors = static_cast<int>(o.num("anchors"));

    auto synchronize = [&] {
        if (cuda) torch::cuda::synchronize();
    };
    auto step = [&](std::uint64_t n) {
        // One micro-batch per sample, as the drafter trains whole sequences.
        double weight = 0;
        for (std::int64_t s = 0; s < samples; ++s) {
            model::DFlashBatch b{hidden.narrow(1, s * seq, seq), tokens.narrow(0, s * seq, seq),
                                 mask.narrow(0, s * seq, seq), {0, seq}};
            at::Generator ag = model::cpu_generator(n * 131 + static_cast<std::uint64_t>(s));
            auto loss = model::dflash_loss(drafter, head, b, opt, ag);
            if (sync && s + 1 == samples) sync->arm(loss.loss_sum);
            loss.loss_sum.backward();
            weight += loss.weight_sum.item<double>();
        }
        {
            torch::NoGradGuard ng;
            for (auto& p : drafter->parameters()) p.grad().div_(weight);
        }
        adam.step();
        adam.zero_grad();
    };
    const int warmup = static_cast<int>(o.num("warmup")), steps = static_cast<int>(o.num("steps"));
    std::uint64_t n = 0;
    for (int i = 0; i < warmup; ++i) step(n++);
    synchronize();
    if (c10d) {
        double one = 1;
        gang->allreduce_sum({&one, 1});  // start the timed steps together
    }
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step(n++);
    synchronize();
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
    double allreduce_ms = 0;
    if (sync) {
        for (int i = 0; i < 2; ++i) sync->reduce_now();  // warm
        synchronize();
        const auto a0 = Clock::now();
        for (int i = 0; i < steps; ++i) sync->reduce_now();
        synchronize();
        allreduce_ms = std::chrono::duration<double, std::milli>(Clock::now() - a0).count() / steps;
        adam.zero_grad();
    }
    std::int64_t params = 0;
    for (const auto& p : drafter->parameters()) params += p.numel();
    const json r = {{"rank", rank}, {"world", world}, {"step_ms", step_ms}, {"allreduce_ms", allreduce_ms},
                    {"samples_per_s", static_cast<double>(samples) / (step_ms / 1000.0)},
                    {"gradient_bytes", params * 4},
                    {"peak_bytes", cuda ? bench::memory_stats(true).peak_allocated : std::uint64_t{0}}};
    std::ofstream(out) << r.dump() << "\n";
    return 0;
}

// Runs `world` ranks as processes of their own; their results, rank by rank.
std::vector<json> run_ranks(int argc, char** argv, int world, bool cuda, const std::filesystem::path& dir) {
    const std::uint16_t port = distributed::free_loopback_port();
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
        const pid_t pid = ::fork();
        if (pid < 0) fail("fork: {}", errno_text(errno));
        if (pid == 0) {
            ::setenv("HSRING_BENCH_GANG_RANK", std::to_string(r).c_str(), 1);
            ::setenv("HSRING_BENCH_GANG_WORLD", std::to_string(world).c_str(), 1);
            ::setenv("HSRING_BENCH_GANG_PORT", std::to_string(port).c_str(), 1);
            ::setenv("HSRING_BENCH_GANG_OUT", (dir / fmt::format("rank{}.{}.json", world, r)).c_str(), 1);
            if (cuda) ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(r).c_str(), 1);
            ::execv("/proc/self/exe", argv);
            ::_exit(127);
        }
        pids.push_back(pid);
    }
    (void)argc;
    for (pid_t p : pids) {
        int st = 0;
        ::waitpid(p, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("a rank of the {}-rank run failed (status {})", world, st);
    }
    std::vector<json> out;
    for (int r = 0; r < world; ++r) {
        std::ifstream in(dir / fmt::format("rank{}.{}.json", world, r));
        out.push_back(json::parse(in));
    }
    return out;
}

} // namespace

int main(int argc, char** argv) {
    try {
        bench::Options o(argc, argv,
                         {{"ranks", "2"}, {"preset", "qwen3-8b"}, {"layers", "5"}, {"block", "16"}, {"samples", "2"},
                          {"seq", "3072"}, {"anchors", "512"}, {"steps", "8"}, {"warmup", "3"}, {"device", "cuda"},
                          {"json", "false"}});
        if (o.help()) {
            o.print_help("hsring-bench gang", "data-parallel drafter steps: 1 rank vs N ranks (c10d), synthetic hidden states");
            return 0;
        }
        if (const char* r = std::getenv("HSRING_BENCH_GANG_RANK"))
            return rank_main(o, std::atoi(r), std::atoi(std::getenv("HSRING_BENCH_GANG_WORLD")),
                             static_cast<std::uint16_t>(std::atoi(std::getenv("HSRING_BENCH_GANG_PORT"))),
                             std::getenv("HSRING_BENCH_GANG_OUT"));
        const bool cuda = o.str("device") == "cuda";
        const int world = static_cast<int>(o.num("ranks"));
        if (cuda) {
            // The parent stays off CUDA (its children are the ranks): ask nvidia-smi how many GPUs there are.
            FILE* p = ::popen("nvidia-smi -L 2>/dev/null | grep -c GPU", "r");
            int gpus = 0;
            if (p) {
                if (std::fscanf(p, "%d", &gpus) != 1) gpus = 0;
                ::pclose(p);
            }
            if (gpus < world) {
                fmt::print("hsring-bench gang: needs {} GPUs, this machine has {}: nothing measured\n", world, gpus);
                return 77;
            }
        }
        const auto dir = std::filesystem::temp_directory_path() / fmt::format("hsring-bench-gang-{}", ::getpid());
        std::filesystem::create_directories(dir);
        const std::vector<json> one = run_ranks(argc, argv, 1, cuda, dir);
        const std::vector<json> many = run_ranks(argc, argv, world, cuda, dir);
        std::filesystem::remove_all(dir);
        double step_n = 0, allreduce = 0, samples_n = 0;
        for (const auto& r : many) {
            step_n = std::max(step_n, r["step_ms"].get<double>());
            allreduce = std::max(allreduce, r["allreduce_ms"].get<double>());
            samples_n += r["samples_per_s"].get<double>();
        }
        const double step_1 = one[0]["step_ms"].get<double>(), samples_1 = one[0]["samples_per_s"].get<double>();
        const double efficiency = samples_n / (world * samples_1);
        const double exposed = std::max(0.0, step_n - step_1);
        const double hidden = allreduce > 0 ? std::clamp(1.0 - exposed / allreduce, 0.0, 1.0) : 0.0;
        const json result = {
            {"bench", "gang"}, {"device", o.str("device")}, {"preset", o.str("preset")}, {"layers", o.num("layers")},
            {"samples_per_rank_step", o.num("samples")}, {"seq", o.num("seq")}, {"ranks", world},
            {"one_rank", {{"step_ms", step_1}, {"samples_per_s", samples_1}}},
            {"n_ranks", {{"step_ms", step_n}, {"samples_per_s", samples_n}, {"per_rank", many}}},
            {"scaling_efficiency", efficiency},
            {"allreduce_ms", allreduce},
            {"gradient_bytes", one[0]["gradient_bytes"]},
            {"exposed_allreduce_ms", exposed},
            {"hidden_fraction", hidden},
        };
        if (o.flag("json")) {
            bench::print_json_result(result);
        } else {
            fmt::print("gang of {} drafter ranks ({}, {} x {} layers, {} x {} tokens per rank and step):\n", world,
                       o.str("device"), o.str("preset"), o.num("layers"), o.num("samples"), o.num("seq"));
            fmt::print("  1 rank:   {:8.1f} ms/step  {:7.2f} samples/s\n", step_1, samples_1);
            fmt::print("  {} ranks:  {:8.1f} ms/step  {:7.2f} samples/s  scaling efficiency {:.3f}\n", world, step_n,
                       samples_n, efficiency);
            fmt::print("  gradient all-reduce ({:.2f} GB fp32): {:.1f} ms alone; {:.1f} ms exposed in the step ({:.0f}% "
                       "hidden behind backward)\n", one[0]["gradient_bytes"].get<double>() / 1e9, allreduce, exposed,
                       hidden * 100);
            bench::print_json_result(result);
        }
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "hsring-bench gang: {}\n", e.what());
        return 1;
    }
}
