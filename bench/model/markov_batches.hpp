#pragma once
// Synthetic DFlash batches a drafter can learn (`hsring-bench drafter --compare-matmul`): random
// hidden states with random tokens leave nothing to learn, so here every sequence is a Markov
// chain over the first `k` token ids — the next token is perm[token] with probability 3/4, else
// uniform — and a token's captured hidden states are a fixed random vector per (layer, token id).
// The block must continue the chain from its anchor token: the loss falls over a few hundred
// steps towards the chain's entropy (it never reaches 0). Batch i is a function of (seed, i), so
// two drafters see the same sequence of batches.
#include "model/drafter/dflash/loss.hpp"
#include "model/ops/tensor_init.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hsring::bench {

class MarkovBatches {
public:
    MarkovBatches(std::int64_t vocab_used, std::int64_t layers, std::int64_t hidden, std::uint64_t seed, at::Device device,
                  at::ScalarType dtype)
        : k_(vocab_used), seed_(seed) {
        at::Generator g = model::cpu_generator(seed ^ 0x6d61726b6f76ull);  // "markov"
        const at::Tensor p = at::randperm(k_, g, at::kLong);
        perm_.assign(p.data_ptr<std::int64_t>(), p.data_ptr<std::int64_t>() + k_);
        table_ = at::randn({layers, k_, hidden}, g).to(device, dtype);
    }

    // `samples` sequences of `len` tokens, every token trained.
    model::DFlashBatch batch(std::uint64_t index, std::int64_t samples, std::int64_t len) const {
        at::Generator g = model::cpu_generator(seed_ * 1000003 + index);
        const std::int64_t total = samples * len;
        const at::Tensor coin = at::rand({total}, g), jump = at::randint(k_, {total}, g, at::kLong);
        const float* c = coin.data_ptr<float>();
        const std::int64_t* j = jump.data_ptr<std::int64_t>();
        std::vector<std::int64_t> tokens(static_cast<std::size_t>(total));
        model::DFlashBatch b;
        for (std::int64_t s = 0; s < samples; ++s) {
            b.cu_seqlens.push_back(s * len);
            for (std::int64_t t = s * len; t < (s + 1) * len; ++t) {
                const auto i = static_cast<std::size_t>(t);
                tokens[i] = t == s * len || c[t] >= 0.75f ? j[t] : perm_[static_cast<std::size_t>(tokens[i - 1])];
            }
        }
        b.cu_seqlens.push_back(total);
        const at::Device dev = table_.device();
        b.tokens = at::tensor(tokens, at::kLong).to(dev);
        b.loss_mask = at::ones({total}, at::TensorOptions().device(dev));
        b.hidden = table_.index_select(1, b.tokens);  // [L, T, H]
        return b;
    }

private:
    std::int64_t k_;
    std::uint64_t seed_;
    std::vector<std::int64_t> perm_;
    at::Tensor table_;  // [L, k, H]
};

} // namespace hsring::bench
