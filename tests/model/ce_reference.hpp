#pragma once
// The softmax cross-entropy of h @ w^T in fp64, exactly: what the chunked cross-entropy's tests
// (plain, bf16 kernel, FP8 LM head) hold their loss and gradient to.
#include <ATen/ATen.h>

namespace hsring::test {

struct CeReference {
    at::Tensor logp;  // [N, V] log-softmax of the logits
    double loss = 0;  // sum_i wt[i] * -log p[i, y[i]]
    at::Tensor grad;  // d loss / d h: (wt * (softmax - onehot)) @ w, the label entry -(sum of the others)
};

inline CeReference ce_reference_fp64(const at::Tensor& h, const at::Tensor& w, const at::Tensor& y,
                                     const at::Tensor& wt) {
    const at::Tensor hd = h.to(at::kCPU, at::kDouble), wd = w.to(at::kCPU, at::kDouble);
    const at::Tensor wtd = wt.to(at::kCPU, at::kDouble), yc = y.to(at::kCPU);
    CeReference r;
    r.logp = at::log_softmax(hd.matmul(wd.t()), 1);
    r.loss = (-r.logp.gather(1, yc.unsqueeze(1)).squeeze(1) * wtd).sum().item<double>();
    at::Tensor p = r.logp.exp();
    p.scatter_(1, yc.unsqueeze(1), 0.0);
    p.scatter_(1, yc.unsqueeze(1), -p.sum(1, true));
    r.grad = (p * wtd.unsqueeze(1)).matmul(wd);
    return r;
}

} // namespace hsring::test
