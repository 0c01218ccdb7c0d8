#include "model/target/kv_cache.hpp"

#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/ops/sink_attention.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace hsring::model {

KVCache::KVCache(const ModelShape& shape, std::int64_t rows, std::int64_t capacity, at::Device device,
                 at::ScalarType dtype)
    : capacity_(capacity), kv_heads_(shape.num_kv_heads), head_dim_(shape.head_dim),
      kv_repeat_(shape.num_kv_heads > 0 ? shape.num_heads / shape.num_kv_heads : 1), device_(device), dtype_(dtype),
      lengths_(static_cast<std::size_t>(std::max<std::int64_t>(rows, 0)), 0) {
    if (rows < 0 || capacity <= 0)
        fail("KV cache for {}: needs rows >= 0 and capacity >= 1, got {} rows of {}", shape.source, rows, capacity);
    // Zeros, not empty: stale positions are masked, but masked garbage must still be finite
    // (0 * NaN would poison a row).
    const auto opts = at::TensorOptions().device(device).dtype(dtype);
    for (std::int64_t l = 0; l < shape.num_layers; ++l) {
        keys_.push_back(at::zeros({rows, capacity, kv_heads_, head_dim_}, opts));
        values_.push_back(at::zeros({rows, capacity, kv_heads_, head_dim_}, opts));
    }
}

std::int64_t KVCache::length(std::int64_t row) const {
    if (row < 0 || row >= rows()) fail("KV cache: row {} is out of range (the cache has {} rows)", row, rows());
    return lengths_[static_cast<std::size_t>(row)];
}

void KVCache::crop(std::int64_t row, std::int64_t length) {
    const std::int64_t have = this->length(row);
    if (length < 0 || length > have)
        fail("KV cache: cannot crop row {} to {} positions: it holds {} (crop only shortens)", row, length, have);
    lengths_[static_cast<std::size_t>(row)] = length;
}

void KVCache::grow(std::int64_t row, std::int64_t n) {
    const std::int64_t have = this->length(row);
    if (n < 0 || have + n > capacity_)
        fail("KV cache: row {} holds {} positions, {} more do not fit its capacity {}", row, have, n, capacity_);
    lengths_[static_cast<std::size_t>(row)] = have + n;
}

void KVCache::keep_rows(const std::vector<std::int64_t>& rows) {
    for (std::int64_t r : rows) (void)length(r);  // range check
    std::vector<std::int64_t> lengths;
    for (std::int64_t r : rows) lengths.push_back(lengths_[static_cast<std::size_t>(r)]);
    if (lengths.size() == lengths_.size()) {
        bool same = true;
        for (std::size_t i = 0; i < rows.size(); ++i) same = same && rows[i] == static_cast<std::int64_t>(i);
        if (same) return;
    }
    at::Tensor index = at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(device_);
    for (std::size_t l = 0; l < keys_.size(); ++l) {
        keys_[l] = keys_[l].index_select(0, index);
        values_[l] = values_[l].index_select(0, index);
    }
    lengths_ = std::move(lengths);
}

void KVCache::append_rows(const KVCache& other) {
    if (other.capacity_ != capacity_ || other.kv_heads_ != kv_heads_ || other.head_dim_ != head_dim_ ||
        other.keys_.size() != keys_.size() || other.device_ != device_ || other.dtype_ != dtype_)
        fail("KV cache: cannot append rows of another shape (capacity {} vs {}, layers {} vs {})", other.capacity_,
             capacity_, other.keys_.size(), keys_.size());
    if (other.rows() == 0) return;
    for (std::size_t l = 0; l < keys_.size(); ++l) {
        keys_[l] = rows() == 0 ? other.keys_[l] : at::cat({keys_[l], other.keys_[l]}, 0);
        values_[l] = rows() == 0 ? other.values_[l] : at::cat({values_[l], other.values_[l]}, 0);
    }
    lengths_.insert(lengths_.end(), other.lengths_.begin(), other.lengths_.end());
}

CacheExtension::CacheExtension(KVCache& cache, std::vector<std::int64_t> counts, const std::string& what)
    : cache_(cache), counts_(std::move(counts)) {
    const std::int64_t rows = cache.rows(), cap = cache.capacity_;
    if (static_cast<std::int64_t>(counts_.size()) != rows)
        fail("{}: {} token counts for a cache of {} rows (one count per row)", what, counts_.size(), rows);
    cu_.assign(1, 0);
    fresh_ = true;
    std::vector<std::int64_t> positions, slots, pad_rows, limits;
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t len = cache.lengths_[static_cast<std::size_t>(r)], n = counts_[static_cast<std::size_t>(r)];
        if (n < 0 || len + n > cap)
            fail("{}: row {} holds {} positions, {} more do not fit its capacity {}", what, r, len, n, cap);
        fresh_ = fresh_ && len == 0;
        max_new_ = std::max(max_new_, n);
        max_keys_ = std::max(max_keys_, len + n);
        cu_.push_back(cu_.back() + n);
    }
    if (cu_.back() == 0) fail("{}: no new token in any of the {} rows", what, rows);
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t len = cache.lengths_[static_cast<std::size_t>(r)], n = counts_[static_cast<std::size_t>(r)];
        for (std::int64_t i = 0; i < n; ++i) {
            positions.push_back(len + i);
            slots.push_back(r * cap + len + i);
            pad_rows.push_back(r * max_new_ + i);
        }
        // Padded query i of row r sees keys 0..len+i (a padding query, i >= n, sees what the
        // row's last token sees: finite, and dropped).
        for (std::int64_t i = 0; i < max_new_; ++i) limits.push_back(len + std::min(i, std::max<std::int64_t>(n - 1, 0)) + 1);
    }
    const at::Device dev = cache.device_;
    auto on_device = [&](const std::vector<std::int64_t>& v) {
        return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(dev);
    };
    positions_ = on_device(positions);
    slot_ = on_device(slots);
    if (fresh_) {  // prefill: packed causal attention, no mask, no padding
        packed_ = PackedSequences::make(cu_, cu_.back(), dev, what);
        return;
    }
    pad_index_ = on_device(pad_rows);
    // mask[r, 0, j * max_new + i, key] = key < limit[r, i], the same for each of the kv_repeat
    // query heads j stacked on a kv head.
    at::Tensor limit = on_device(limits).view({rows, 1, 1, max_new_, 1});
    at::Tensor keys = at::arange(max_keys_, at::TensorOptions().dtype(at::kLong).device(dev));
    mask_ = (keys.view({1, 1, 1, 1, max_keys_}) < limit)
                .expand({rows, 1, cache.kv_repeat_, max_new_, max_keys_})
                .reshape({rows, 1, cache.kv_repeat_ * max_new_, max_keys_});
}

at::Tensor CacheExtension::attend(std::int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale, std::int64_t window, const at::Tensor& sinks) const {
    KVCache& c = cache_;
    const std::int64_t rows = c.rows(), cap = c.capacity_, hkv = c.kv_heads_, d = c.head_dim_, rep = c.kv_repeat_;
    HSRING_ASSERT(q.size(0) == total() && k.size(0) == total() && q.size(1) == hkv * rep && k.size(1) == hkv,
                  "cache extension: q {} k {} for {} new tokens, {} kv heads", shape_str(q.sizes()),
                  shape_str(k.sizes()), total(), hkv);
    at::Tensor keys = c.keys_.at(static_cast<std::size_t>(layer)), values = c.values_.at(static_cast<std::size_t>(layer));
    keys.view({rows * cap, hkv, d}).index_copy_(0, slot_, k.to(keys.scalar_type()));
    values.view({rows * cap, hkv, d}).index_copy_(0, slot_, v.to(values.scalar_type()));
    // Windows come with sinks (gpt-oss); the sink path handles both.
    HSRING_ASSERT(window == 0 || sinks.defined(), "cache extension: a window of {} without sinks", window);
    if (fresh_) {
        // Every row starts empty: the new tokens are the whole context, so the packed causal
        // attention (varlen flash on CUDA) needs no padding and no mask.
        if (sinks.defined()) return packed_sink_attention(q, k, v, sinks, packed_, window, scale);
        return causal_packed_attention(q, k, v, packed_, scale);
    }
    // Padded queries [rows, max_new, Hq, D] -> the query heads sharing a kv head stacked along the
    // query axis: [rows, Hkv, rep * max_new, D] against keys [rows, Hkv, max_keys, D].
    at::Tensor qp = at::zeros({rows * max_new_, hkv * rep, d}, q.options());
    qp.index_copy_(0, pad_index_, q);
    qp = qp.view({rows, max_new_, hkv, rep, d}).permute({0, 2, 3, 1, 4}).reshape({rows, hkv, rep * max_new_, d});
    auto kv = [&](const at::Tensor& t) { return t.narrow(1, 0, max_keys_).transpose(1, 2); };
    if (sinks.defined()) {
        // gpt-oss: explicit fp32 scores, the window cut from the causal mask (a query sees keys
        // limit - window .. limit - 1, limit = the number its causal mask shows), the sink logit
        // as one more column of every softmax, dropped before the values.
        at::Tensor scores = at::matmul(qp.to(at::kFloat), kv(keys).to(at::kFloat).transpose(-1, -2)) * scale;
        at::Tensor visible = mask_;
        if (window > 0) {
            const at::Tensor limit = mask_.sum(-1, /*keepdim=*/true);
            const at::Tensor key = at::arange(max_keys_, at::TensorOptions().dtype(at::kLong).device(q.device()));
            visible = visible & (key.view({1, 1, 1, max_keys_}) >= limit - window);
        }
        scores = scores.masked_fill(visible.logical_not(), -INFINITY);
        const at::Tensor sink = sinks.to(at::kFloat)
                                    .view({1, hkv, rep, 1, 1})
                                    .expand({rows, hkv, rep, max_new_, 1})
                                    .reshape({rows, hkv, rep * max_new_, 1});
        const at::Tensor probs = at::softmax(at::cat({scores, sink}, -1), -1).narrow(-1, 0, max_keys_);
        at::Tensor o = at::matmul(probs.to(values.scalar_type()), kv(values));
        o = o.reshape({rows, hkv, rep, max_new_, d}).permute({0, 3, 1, 2, 4}).reshape({rows * max_new_, hkv * rep, d});
        return o.index_select(0, pad_index_).to(q.scalar_type());
    }
    // The memory-efficient kernel: no per-shape plan, and the key count changes every step.
    SdpaBackendScope backend(AttentionKernel::Efficient, q.is_cuda());
    at::Tensor o = at::scaled_dot_product_attention(qp, kv(keys), kv(values), mask_, 0.0, /*is_causal=*/false, scale);
    // Back to packed [T, Hq, D].
    o = o.reshape({rows, hkv, rep, max_new_, d}).permute({0, 3, 1, 2, 4}).reshape({rows * max_new_, hkv * rep, d});
    return o.index_select(0, pad_index_);
}

void CacheExtension::commit() const {
    for (std::size_t r = 0; r < counts_.size(); ++r) cache_.lengths_[r] += counts_[r];
}

} // namespace hsring::model
