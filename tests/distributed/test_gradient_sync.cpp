// The update of N ranks on a global batch equals one rank's update on the same batch: two real
// processes form a gang on loopback (Gloo on the CPU; NCCL on two GPUs with HSRING_GSYNC_NCCL=1,
// the gpu suite), each computes the DFlash loss of its half of a packed
// batch, the c10d Reducer sums the gradients in the backward (GradientSync), and each divides by
// the global loss weight (as the drafter does). The result must equal the gradient one process
// computes on the whole batch, also when one rank accumulates over two backward passes or has no
// data at all (reduce_now), and the master's broadcast must overwrite the other rank's weights.
#include "../model/dflash_fixture.hpp"
#include "distributed/c10d_gang.hpp"
#include "distributed/gradient_sync.hpp"

#include <doctest/doctest.h>
#include <torch/cuda.h>
#include <fmt/format.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace hsring;

namespace {

std::uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

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

enum class Split { Halves, AccumulateTwice, AllOnRankZero };

bool nccl() {
    const char* v = std::getenv("HSRING_GSYNC_NCCL");
    return v && std::string(v) == "1";
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
    ::_exit(rank_main(std::atoi(r), static_cast<std::uint16_t>(std::atoi(std::getenv("HSRING_GSYNC_PORT"))),
                      static_cast<Split>(std::atoi(std::getenv("HSRING_GSYNC_SPLIT"))), std::getenv("HSRING_GSYNC_DIR")));
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

void check_gang_equals_one_rank(Split split) {
    const auto dir = std::filesystem::temp_directory_path() / fmt::format("hsring-gsync-{}-{}", ::getpid(), int(split));
    std::filesystem::create_directories(dir);
    const std::uint16_t port = free_port();
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
        pids[r] = ::fork();
        REQUIRE(pids[r] >= 0);
        if (pids[r] == 0) {
            ::setenv("HSRING_GSYNC_RANK", std::to_string(r).c_str(), 1);
            ::setenv("HSRING_GSYNC_PORT", std::to_string(port).c_str(), 1);
            ::setenv("HSRING_GSYNC_SPLIT", std::to_string(int(split)).c_str(), 1);
            ::setenv("HSRING_GSYNC_DIR", dir.c_str(), 1);
            if (nccl()) ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(r).c_str(), 1);
            ::execl("/proc/self/exe", "test_gradient_sync", static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    for (pid_t p : pids) {
        int st = 0;
        ::waitpid(p, &st, 0);
        REQUIRE(WIFEXITED(st));
        REQUIRE(WEXITSTATUS(st) == 0);
    }
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
