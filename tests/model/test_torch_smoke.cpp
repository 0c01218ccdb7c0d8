// LibTorch links and runs: a matmul, autograd through it, and the torch version we pinned.
#include <doctest/doctest.h>
#include <torch/torch.h>

TEST_CASE("LibTorch computes and differentiates") {
    auto a = torch::randn({8, 16}, torch::requires_grad());
    auto b = torch::randn({16, 4});
    auto y = a.matmul(b).pow(2).sum();
    y.backward();
    CHECK(a.grad().defined());
    CHECK(torch::allclose(a.grad(), 2 * a.matmul(b).matmul(b.t())));
    CHECK(std::string(TORCH_VERSION).rfind("2.11", 0) == 0);
}
