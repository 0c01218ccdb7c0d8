// The update of N ranks on a global batch equals one rank's update on the same batch: two real
// processes form a gang on loopback (Gloo on the CPU; NCCL on two GPUs with HSRING_GSYNC_NCCL=1,
// the gpu suite), each computes the DFlash loss of its half of a packed
// batch, the c10d Reducer sums the gradients in the backward (GradientSync), and each divides by
// the global loss weight (as the drafter does). The result must equal the gradient one process
// computes on the whole batch, also when one rank accumulates over two backward passes or has no
// data at all (reduce_now), and the master's broadcast must overwrite the other rank's weights.
//
// How GradientSync drives the reducer (torch's DDP way): buckets reversed (the last parameters
// first), rebuilt once in gradient order, gradients that are views of the buckets through the
// optimizer's zero_grad, sums exactly the ranks' own gradients; and a peer that dies or hangs
// mid-backward ends the other rank's backward with one line within [distributed] timeout_s.
#include "../model/dflash_fixture.hpp"
#include "distributed/c10d_gang.hpp"
#include "distributed/gradient_sync.hpp"
#include "worker/core/worker_env.hpp"

#include <doctest/doctest.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

using namespace hsring;

namespace {


// The sequences [first, last) of the fixture's batch as a batch of their own.
model::DFlashBatch sub_batch(const model::DFlashBatch& b, std::size_t first, std::size_t last) {
    const std::int64_t begin = b.cu_seqlens[first], len = b.cu_seqlens[last] - begin;
    std::vector<std::int64_t> cu;
    for (std::size_t i = first; i <= last; ++i) cu.push_back(b.cu_seqlens[i] - begin);
    return {b.hidden.narrow(1, begin, len), b.tokens.narrow(0, begin, len), b.loss_mask.narrow(0, begin, len), cu};
}

struct Sums {
    at::Tensor loss_sum;
    double weight = 0;
};

// The loss of sequences [first, last) with anchors that depend only on each sequence's id.
Sums loss_of(model::DFlashDrafter& d, const test::DFlashFixture& f, std::size_t first, std::size_t last) {
    const model::DFlashBatch b = sub_batch(f.batch, first, last);
    std::vector<std::uint64_t> ids;
    for (std::size_t i = first; i < last; ++i) ids.push_back(i);
    model::DFlashLossOptions o;
    o.gamma = 4.0;
    o.compute_dtype = at::kFloat;  // fp32 on the GPU too: compared with the CPU's result
    const auto blocks = model::eval_dflash_blocks(b.tokens, b.loss_mask, b.cu_seqlens, f.config.block_size,
                                                  f.config.mask_token_id, 6, o.gamma, 17, ids);
    auto r = model::dflash_loss_for_blocks(d, f.head, b, blocks, o);
    return {r.loss_sum, r.weight_sum.item<double>()};
}

at::Tensor flat_grads(model::DFlashDrafter& d) {
    std::vector<at::Tensor> g;
    for (const auto& p : d->parameters()) g.push_back(p.grad().reshape(-1));
    return at::cat(g).cpu();
}

at::Tensor flat_params(model::DFlashDrafter& d) {
    std::vector<at::Tensor> g;
    for (const auto& p : d->parameters()) g.push_back(p.detach().reshape(-1));
    return at::cat(g).cpu();
}

void write(const std::filesystem::path& file, const at::Tensor& t) {
    const at::Tensor c = t.contiguous().to(at::kFloat);
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(c.data_ptr<float>()),
                                                static_cast<std::streamsize>(c.numel() * sizeof(float)));
}

at::Tensor read(const std::filesystem::path& file, std::int64_t n) {
    at::Tensor t = at::empty({n}, at::kFloat);
    std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(t.data_ptr<float>()),
                                               static_cast<std::streamsize>(n * sizeof(float)));
    return t;
}

enum class Split { Halves, AccumulateTwice, AllOnRankZero, Buckets, PeerKilled, PeerHung };

bool nccl() {
    const char* v = std::getenv("HSRING_GSYNC_NCCL");
    return v && std::string(v) == "1";
}

// Several buckets out of the tiny drafter (its parameters are a few KiB each).
constexpr distributed::BucketSizes kSmallBuckets{4 * 1024, 16 * 1024};
// The gang's timeout in the dead-peer cases.
constexpr auto kShortTimeout = std::chrono::seconds(4);

void write_text(const std::filesystem::path& file, const std::string& text) { std::ofstream(file) << text; }

std::string bucket_text(const std::vector<std::vector<std::size_t>>& buckets) {
    std::string s;
    for (const auto& b : buckets) {
        for (std::size_t i : b) s += std::to_string(i) + " ";
        s += "\n";
    }
    return s;
}

// Collectives wait at most `timeout`; the rendezvous a minute (processes start slowly on a busy
// machine).
std::unique_ptr<distributed::C10dGang> join_two(int rank, std::uint16_t port, std::chrono::seconds timeout) {
    distributed::GangOptions o;
    o.rendezvous.place = GangPlace{0, 1, static_cast<std::uint32_t>(rank), 2};
    o.rendezvous.master_addr = "127.0.0.1";
    o.rendezvous.master_port = port;
    o.rendezvous.timeout = std::chrono::seconds(60);
    o.collective_timeout = timeout;
    o.rendezvous.identity = {{"test", 1}};
    o.cuda = nccl();
    return distributed::C10dGang::join(o);
}

// Every gradient lies in a bucket (one storage per bucket), and the buckets hold exactly one copy
// of them.
bool grads_are_bucket_views(model::DFlashDrafter& d, std::size_t buckets) {
    std::set<const void*> storages;
    std::int64_t grad_bytes = 0, storage_bytes = 0;
    for (const auto& p : d->parameters()) {
        if (!p.grad().defined()) return false;
        grad_bytes += p.grad().numel() * static_cast<std::int64_t>(p.grad().element_size());
        if (storages.insert(p.grad().storage().unsafeGetStorageImpl()).second)
            storage_bytes += static_cast<std::int64_t>(p.grad().storage().nbytes());
    }
    return storages.size() == buckets && storage_bytes == grad_bytes;
}

// One step of rank `rank`: the gang's drafter `d` and, as reference, `ref` (the same weights, no
// gang) each compute this rank's gradient of `split`'s share; returns both, raw, flattened.
std::pair<at::Tensor, at::Tensor> gang_and_own(model::DFlashDrafter& d, model::DFlashDrafter& ref,
                                                distributed::GradientSync& sync, const test::DFlashFixture& f,
                                                int rank, bool twice) {
    ref->zero_grad();
    if (!twice) {
        loss_of(ref, f, rank == 0 ? 0 : 2, rank == 0 ? 2 : 4).loss_sum.backward();
        Sums s = loss_of(d, f, rank == 0 ? 0 : 2, rank == 0 ? 2 : 4);
        sync.arm(s.loss_sum);
        s.loss_sum.backward();
    } else {
        loss_of(ref, f, rank == 0 ? 0 : 2, rank == 0 ? 1 : 3).loss_sum.backward();
        loss_of(ref, f, rank == 0 ? 1 : 3, rank == 0 ? 2 : 4).loss_sum.backward();
        loss_of(d, f, rank == 0 ? 0 : 2, rank == 0 ? 1 : 3).loss_sum.backward();
        Sums b = loss_of(d, f, rank == 0 ? 1 : 3, rank == 0 ? 2 : 4);
        sync.arm(b.loss_sum);
        b.loss_sum.backward();
    }
    return {flat_grads(d), flat_grads(ref)};
}

// Buckets: their order before and after the first reduced backward, the gradients as bucket
// views through the optimizer's zero_grad (both kinds), and the reduced sums of two steps.
int buckets_main(int rank, std::uint16_t port, const std::filesystem::path& dir) {
    auto gang = join_two(rank, port, std::chrono::seconds(60));
    const at::Device dev = nccl() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    test::DFlashFixture f(dev, {23, 9, 17, 12});
    auto d = f.drafter(rank == 0 ? 3 : 4, dev);
    auto ref = f.drafter(3, dev);  // rank 0's weights: what the broadcast gives every rank
    distributed::GradientSync sync(*gang, d->parameters(), kSmallBuckets);
    std::vector<at::Tensor> params = d->parameters();
    sync.broadcast(params);
    write_text(dir / fmt::format("params.{}", rank), std::to_string(params.size()));
    write_text(dir / fmt::format("buckets0.{}", rank), bucket_text(sync.buckets()));
    torch::optim::AdamW opt(d->parameters(), torch::optim::AdamWOptions(1e-3));

    auto [gang1, own1] = gang_and_own(d, ref, sync, f, rank, false);
    write(dir / fmt::format("gang1.{}", rank), gang1);
    write(dir / fmt::format("own1.{}", rank), own1);
    write_text(dir / fmt::format("buckets1.{}", rank), bucket_text(sync.buckets()));
    write_text(dir / fmt::format("rebuilt.{}", rank), sync.rebuilt() ? "1" : "0");
    bool views = grads_are_bucket_views(d, sync.buckets().size());
    opt.zero_grad();  // set to none (libtorch's default); detach_() would throw on an autograd view

    auto [gang2, own2] = gang_and_own(d, ref, sync, f, rank, true);
    write(dir / fmt::format("gang2.{}", rank), gang2);
    write(dir / fmt::format("own2.{}", rank), own2);
    views = views && grads_are_bucket_views(d, sync.buckets().size());
    opt.zero_grad(/*set_to_none=*/false);
    auto [gang3, own3] = gang_and_own(d, ref, sync, f, rank, false);
    write(dir / fmt::format("gang3.{}", rank), gang3);
    write(dir / fmt::format("own3.{}", rank), own3);
    views = views && grads_are_bucket_views(d, sync.buckets().size());
    write_text(dir / fmt::format("views.{}", rank), views ? "1" : "0");
    return 0;
}

// A peer dies (SIGKILL) or hangs (SIGSTOP) after the first step; rank 0's next reduced backward
// must end with GangBroken, through the worker's error path: exit 1, one line.
int dead_peer_body(int, char**) {
    const int rank = std::atoi(std::getenv("HSRING_GSYNC_RANK"));
    const auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("HSRING_GSYNC_PORT")));
    const auto split = static_cast<Split>(std::atoi(std::getenv("HSRING_GSYNC_SPLIT")));
    const std::filesystem::path dir = std::getenv("HSRING_GSYNC_DIR");
    auto gang = join_two(rank, port, kShortTimeout);
    worker::mark_started();  // a collective failing once the gang formed is restartable: exit 1
    const at::Device dev = nccl() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    test::DFlashFixture f(dev, {23, 9, 17, 12});
    auto d = f.drafter(3, dev);
    distributed::GradientSync sync(*gang, d->parameters(), kSmallBuckets);
    Sums s = loss_of(d, f, rank == 0 ? 0 : 2, rank == 0 ? 2 : 4);
    sync.arm(s.loss_sum);
    s.loss_sum.backward();
    if (rank == 1) ::raise(split == Split::PeerKilled ? SIGKILL : SIGSTOP);
    d->zero_grad();
    Sums again = loss_of(d, f, 0, 2);
    const auto t0 = std::chrono::steady_clock::now().time_since_epoch();
    write_text(dir / "t0", std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(t0).count()));
    sync.arm(again.loss_sum);
    again.loss_sum.backward();  // throws: rank 1 never joins this step's all-reduces
    return 0;
}

// One rank of a 2-rank gang; writes its final gradient and (broadcast) weights.
int rank_main(int rank, std::uint16_t port, Split split, const std::filesystem::path& dir) {
    try {
        distributed::GangOptions o;
        o.rendezvous.place = GangPlace{0, 1, static_cast<std::uint32_t>(rank), 2};
        o.rendezvous.master_addr = "127.0.0.1";
        o.rendezvous.master_port = port;
        o.rendezvous.timeout = std::chrono::seconds(60);
        o.rendezvous.identity = {{"test", 1}};
        o.cuda = nccl();
        auto gang = distributed::C10dGang::join(o);
        const at::Device dev = nccl() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
        test::DFlashFixture f(dev, {23, 9, 17, 12});
        // Different initial weights per rank: the broadcast must make them the master's.
        auto d = f.drafter(rank == 0 ? 3 : 4, dev);
        distributed::GradientSync sync(*gang, d->parameters());
        std::vector<at::Tensor> params = d->parameters();
        sync.broadcast(params);
        write(dir / fmt::format("params.{}", rank), flat_params(d));
        double weight = 0;
        if (split == Split::Halves) {
            Sums s = loss_of(d, f, rank == 0 ? 0 : 2, rank == 0 ? 2 : 4);
            sync.arm(s.loss_sum);
            s.loss_sum.backward();
            weight = s.weight;
        } else if (split == Split::AccumulateTwice) {
            // Rank 0: sequence 0, then 1 (two backward passes, the second reduces); rank 1: 2 and 3.
            Sums a = loss_of(d, f, rank == 0 ? 0 : 2, rank == 0 ? 1 : 3);
            a.loss_sum.backward();
            Sums b = loss_of(d, f, rank == 0 ? 1 : 3, rank == 0 ? 2 : 4);
            sync.arm(b.loss_sum);
            b.loss_sum.backward();
            weight = a.weight + b.weight;
        } else {
            // Rank 0 holds the whole batch; rank 1 has nothing and only takes part in the sum.
            if (rank == 0) {
                Sums s = loss_of(d, f, 0, 4);
                s.loss_sum.backward();
                weight = s.weight;
            }
            sync.reduce_now();
        }
        gang->allreduce_sum({&weight, 1});
        // The reducer averaged over the gang: times the world size, divided by the global weight.
        write(dir / fmt::format("grads.{}", rank), flat_grads(d) * (2.0 / weight));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 1;
    }
}

// A rank runs in a fresh process (fork + exec of this test binary, HSRING_GSYNC_RANK set): a
// child forked from a process whose torch thread pools already ran would inherit them broken.
const int kRankChild = [] {
    const char* r = std::getenv("HSRING_GSYNC_RANK");
    if (!r) return 0;
    // As a worker spawned by the supervisor: SIGPIPE ignored. Gloo writes to its peers with
    // writev; a peer killed mid-collective must surface as EPIPE (GangBroken), not kill this rank.
    ::signal(SIGPIPE, SIG_IGN);
    const auto port = static_cast<std::uint16_t>(std::atoi(std::getenv("HSRING_GSYNC_PORT")));
    const auto split = static_cast<Split>(std::atoi(std::getenv("HSRING_GSYNC_SPLIT")));
    const std::filesystem::path dir = std::getenv("HSRING_GSYNC_DIR");
    if (split == Split::PeerKilled || split == Split::PeerHung) {
        char name[] = "test_gradient_sync";
        char* argv[] = {name, nullptr};
        ::_exit(worker::run_guarded("test_gradient_sync", dead_peer_body, 1, argv));
    }
    if (split == Split::Buckets) {
        try {
            ::_exit(buckets_main(std::atoi(r), port, dir));
        } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %s: %s\n", r, e.what());
            ::_exit(1);
        }
    }
    ::_exit(rank_main(std::atoi(r), port, split, dir));
}();

// The NCCL variant needs two GPUs: without them it is skipped (exit 77), in the parent only.
const int kNeedsTwoGpus = [] {
    if (nccl() && !std::getenv("HSRING_GSYNC_RANK") && torch::cuda::device_count() < 2) {
        std::printf("HSRING_GSYNC_NCCL=1 needs 2 GPUs, %d visible: skipped\n", int(torch::cuda::device_count()));
        std::fflush(stdout);
        ::_exit(77);
    }
    return 0;
}();

std::filesystem::path fresh_dir(Split split) {
    const auto dir = std::filesystem::temp_directory_path() / fmt::format("hsring-gsync-{}-{}", ::getpid(), int(split));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// Both ranks as fresh processes; a rank's stderr goes to dir/stderr.<rank>.
std::array<pid_t, 2> start_ranks(Split split, const std::filesystem::path& dir) {
    const std::uint16_t port = distributed::free_loopback_port();
    std::array<pid_t, 2> pids{};
    for (int r = 0; r < 2; ++r) {
        pids[r] = ::fork();
        REQUIRE(pids[r] >= 0);
        if (pids[r] == 0) {
            ::setenv("HSRING_GSYNC_RANK", std::to_string(r).c_str(), 1);
            ::setenv("HSRING_GSYNC_PORT", std::to_string(port).c_str(), 1);
            ::setenv("HSRING_GSYNC_SPLIT", std::to_string(int(split)).c_str(), 1);
            ::setenv("HSRING_GSYNC_DIR", dir.c_str(), 1);
            if (nccl()) ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(r).c_str(), 1);
            const int err = ::open((dir / fmt::format("stderr.{}", r)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (err >= 0) ::dup2(err, STDERR_FILENO);
            ::execl("/proc/self/exe", "test_gradient_sync", static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    return pids;
}

std::string slurp(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void expect_clean_exits(const std::array<pid_t, 2>& pids, const std::filesystem::path& dir) {
    for (int r = 0; r < 2; ++r) {
        int st = 0;
        ::waitpid(pids[r], &st, 0);
        INFO("rank " << r << " stderr: " << slurp(dir / fmt::format("stderr.{}", r)));
        REQUIRE(WIFEXITED(st));
        REQUIRE(WEXITSTATUS(st) == 0);
    }
}

void check_gang_equals_one_rank(Split split) {
    const auto dir = fresh_dir(split);
    expect_clean_exits(start_ranks(split, dir), dir);
    // One rank, the whole batch, one backward (on the ranks' device type: random weights are drawn
    // per device type).
    const at::Device dev = nccl() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    test::DFlashFixture f(dev, {23, 9, 17, 12});
    auto d = f.drafter(3, dev);
    Sums s = loss_of(d, f, 0, 4);
    s.loss_sum.backward();
    const at::Tensor want = flat_grads(d) / s.weight;
    const at::Tensor want_params = flat_params(d);
    for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        const at::Tensor got = read(dir / fmt::format("grads.{}", r), want.numel());
        const double err = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
        MESSAGE("rank " << r << ": max |gang - one rank| = " << err << " (max |grad| " << scale << ")");
        // Rounding only (another order of the same sums); a little more on GPUs (atomics in kernels).
        CHECK(err <= (nccl() ? 1e-4 : 1e-5) * scale);
        CHECK(at::equal(read(dir / fmt::format("params.{}", r), want_params.numel()), want_params.to(at::kFloat)));
    }
    std::filesystem::remove_all(dir);
}

} // namespace

TEST_CASE("two ranks, half the batch each: the summed update is one rank's on the whole batch") {
    check_gang_equals_one_rank(Split::Halves);
}

TEST_CASE("gradients accumulated over two backward passes are summed by the second") {
    check_gang_equals_one_rank(Split::AccumulateTwice);
}

TEST_CASE("a rank without data takes part in the sum and changes nothing") {
    check_gang_equals_one_rank(Split::AllOnRankZero);
}

TEST_CASE("buckets start with the last parameters, are rebuilt once, hold the gradients as views, sum them exactly") {
    const auto dir = fresh_dir(Split::Buckets);
    expect_clean_exits(start_ranks(Split::Buckets, dir), dir);
    const auto n = static_cast<std::size_t>(std::stoul(slurp(dir / "params.0")));
    auto parse = [](const std::string& text) {
        std::vector<std::vector<std::size_t>> out;
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream in(line);
            out.emplace_back();
            for (std::size_t i; in >> i;) out.back().push_back(i);
        }
        return out;
    };
    for (int r = 0; r < 2; ++r) {
        CAPTURE(r);
        // As torch's DDP: assigned in parameter order, reversed: backward's first gradients
        // (the last parameters') fill bucket 0, so its all-reduce starts early.
        const auto before = parse(slurp(dir / fmt::format("buckets0.{}", r)));
        MESSAGE("rank " << r << " buckets before: " << slurp(dir / fmt::format("buckets0.{}", r)));
        REQUIRE(before.size() >= 3);
        CHECK(std::find(before.front().begin(), before.front().end(), n - 1) != before.front().end());
        CHECK(std::find(before.back().begin(), before.back().end(), 0) != before.back().end());
        for (std::size_t b = 1; b < before.size(); ++b) CHECK(before[b].back() < before[b - 1].front());
        // Rebuilt once, in the order the gradients arrived: still every parameter once.
        CHECK(slurp(dir / fmt::format("rebuilt.{}", r)) == "1");
        std::vector<std::size_t> after;
        for (const auto& b : parse(slurp(dir / fmt::format("buckets1.{}", r)))) after.insert(after.end(), b.begin(), b.end());
        std::sort(after.begin(), after.end());
        std::vector<std::size_t> all(n);
        std::iota(all.begin(), all.end(), 0);
        CHECK(after == all);
        CHECK(slurp(dir / fmt::format("views.{}", r)) == "1");
    }
    // The reducer averages: x 2 is the sum of what the two ranks computed, exactly (halving and
    // doubling are exact; the sum of two is the same in any order) on the CPU; GPU kernels may
    // differ in rounding between two runs of the same backward.
    const auto numel = static_cast<std::int64_t>(std::filesystem::file_size(dir / "own1.0") / sizeof(float));
    for (int step = 1; step <= 3; ++step) {
        CAPTURE(step);
        const at::Tensor want = read(dir / fmt::format("own{}.0", step), numel) + read(dir / fmt::format("own{}.1", step), numel);
        for (int r = 0; r < 2; ++r) {
            CAPTURE(r);
            const at::Tensor got = read(dir / fmt::format("gang{}.{}", step, r), numel) * 2;
            if (nccl()) CHECK(at::allclose(got, want, 1e-5, 1e-7));
            else CHECK(at::equal(got, want));
        }
    }
    std::filesystem::remove_all(dir);
}

void check_dead_peer(Split split) {
    const auto dir = fresh_dir(split);
    const auto pids = start_ranks(split, dir);
    int st = 0;
    ::waitpid(pids[0], &st, 0);
    const auto end = std::chrono::steady_clock::now().time_since_epoch();
    const std::string err = slurp(dir / "stderr.0");
    INFO("rank 0 stderr: " << err);
    // Rank 1 is dead or stopped: SIGKILL, then reap it.
    ::kill(pids[1], SIGKILL);
    int st1 = 0;
    ::waitpid(pids[1], &st1, 0);
    // Exit 1 (restartable), not a signal (ProcessGroupNCCL's watchdog aborts the process).
    INFO("rank 0 wait status " << st << (WIFSIGNALED(st) ? fmt::format(" (signal {})", WTERMSIG(st)) : std::string()));
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 1);
    // Within the timeout (+ slack for a loaded machine), measured from the armed backward.
    REQUIRE(std::filesystem::exists(dir / "t0"));
    const double waited =
        double(std::chrono::duration_cast<std::chrono::milliseconds>(end).count() - std::stoll(slurp(dir / "t0"))) / 1000.0;
    MESSAGE("rank 0 ended " << waited << " s after its reduced backward began (timeout " << kShortTimeout.count() << " s)");
    CHECK(waited < double(kShortTimeout.count()) + 3.0);
    // One message, on one line: the last one.
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) lines.push_back(l);
    REQUIRE(!lines.empty());
    MESSAGE("rank 0's last line: " << lines.back());
    CHECK(lines.back().find(" E test_gradient_sync failed: the drafter gang broke ") != std::string::npos);
    CHECK(lines.back().find("gradient") != std::string::npos);
    CHECK(err.find("frame #") == std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a peer killed mid-backward: the other rank exits 1 with one line, within the timeout") {
    check_dead_peer(Split::PeerKilled);
}

TEST_CASE("a peer that hangs mid-backward: the other rank exits 1 with one line, within the timeout") {
    check_dead_peer(Split::PeerHung);
}
