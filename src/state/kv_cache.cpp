// state/kv_cache.cpp — implementation of the full / sliding-window KV cache.
#include "state/kv_cache.h"

#include <algorithm>
#include <string>

#include "core/fp16.h"

namespace specula {

Result<KvCache> KvCache::create(std::vector<KvLayerSpec> layers, int32_t n_rows, int64_t n_ctx,
                                int64_t max_rollback) {
  if (n_rows <= 0 || n_ctx <= 0 || layers.empty() || max_rollback < 0)
    return Status::error("[kv_cache] invalid sizes: rows " + std::to_string(n_rows) + ", n_ctx " +
                         std::to_string(n_ctx) + ", layers " + std::to_string(layers.size()));
  KvCache c;
  c.n_rows_ = n_rows;
  c.n_ctx_ = n_ctx;
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  if (n_ctx > (int64_t{1} << 30) || max_rollback > (int64_t{1} << 30))
    return Status::error("[kv_cache] n_ctx " + std::to_string(n_ctx) + " or max_rollback too large");
  for (const auto& l : layers) {
    if (l.n_kv_heads <= 0 || l.head_dim <= 0 || l.window < 0 || l.n_kv_heads > kMaxDim || l.head_dim > kMaxDim)
      return Status::error("[kv_cache] invalid layer spec: n_kv_heads " + std::to_string(l.n_kv_heads) +
                           ", head_dim " + std::to_string(l.head_dim) + ", window " + std::to_string(l.window));
    const int64_t cap = l.window > 0 && l.window < n_ctx ? std::min(n_ctx, l.window + max_rollback) : n_ctx;
    const double bytes = 2.0 * 2.0 * static_cast<double>(n_rows) * static_cast<double>(cap) *
                         static_cast<double>(l.n_kv_heads) * static_cast<double>(l.head_dim);
    if (bytes > 64.0 * (1ull << 30))
      return Status::error("[kv_cache] layer needs " + std::to_string(static_cast<long long>(bytes / (1 << 20))) +
                           " MiB of KV cache (limit 64 GiB): lower the context or rows");
    c.cap_.push_back(cap);
    const size_t n = static_cast<size_t>(n_rows) * cap * l.n_kv_heads * l.head_dim;
    c.k_.emplace_back(n);
    c.v_.emplace_back(n);
  }
  c.layers_ = std::move(layers);
  c.len_.assign(n_rows, 0);
  c.lo_.assign(c.layers_.size() * n_rows, 0);
  return c;
}

size_t KvCache::offset(int64_t il, int32_t row, int64_t pos) const {
  const KvLayerSpec& l = layers_[il];
  const int64_t cap = cap_[il];
  const int64_t slot = l.window > 0 ? pos % cap : pos;
  return (static_cast<size_t>(row) * cap + slot) * l.n_kv_heads * l.head_dim;
}

const uint16_t* KvCache::k(int64_t il, int32_t row, int64_t pos) const {
  return k_[il].data() + offset(il, row, pos);
}
const uint16_t* KvCache::v(int64_t il, int32_t row, int64_t pos) const {
  return v_[il].data() + offset(il, row, pos);
}

void KvCache::write(int64_t il, int32_t row, int64_t pos, const float* k, const float* v) {
  SPECULA_CHECK(pos >= 0 && pos < n_ctx_);
  const KvLayerSpec& l = layers_[il];
  const int64_t n = l.n_kv_heads * l.head_dim;
  const size_t off = offset(il, row, pos);
  uint16_t* kd = k_[il].data() + off;
  uint16_t* vd = v_[il].data() + off;
  for (int64_t i = 0; i < n; ++i) {
    kd[i] = fp32_to_fp16(k[i]);
    vd[i] = fp32_to_fp16(v[i]);
  }
  if (l.window > 0) {
    int64_t& lo = lo_[il * n_rows_ + row];
    lo = std::max(lo, pos + 1 - cap_[il]);
  }
}

Status KvCache::advance(int32_t row, int64_t n) {
  if (len_[row] + n > n_ctx_)
    return Status::error("[kv_cache] row " + std::to_string(row) + ": length " +
                         std::to_string(len_[row] + n) + " exceeds context " + std::to_string(n_ctx_));
  len_[row] += n;
  return Status::ok();
}

Status KvCache::trim(int32_t row, int64_t n) {
  if (n < 0 || n > len_[row])
    return Status::error("[kv_cache] trim " + std::to_string(n) + " of row " + std::to_string(row) +
                         " with length " + std::to_string(len_[row]));
  const int64_t new_len = len_[row] - n;
  if (new_len == 0) {
    clear(row);
    return Status::ok();
  }
  for (size_t il = 0; il < layers_.size(); ++il) {
    const int64_t w = layers_[il].window;
    if (w <= 0) continue;
    const int64_t need = std::max<int64_t>(0, new_len - w + 1);
    if (need < lo_[il * n_rows_ + row])
      return Status::error("[kv_cache] trim " + std::to_string(n) + " of row " + std::to_string(row) +
                           ": layer " + std::to_string(il) + " window needs position " +
                           std::to_string(need) + " but the ring holds from " +
                           std::to_string(lo_[il * n_rows_ + row]));
  }
  len_[row] = new_len;
  return Status::ok();
}

void KvCache::clear(int32_t row) {
  len_[row] = 0;
  for (size_t il = 0; il < layers_.size(); ++il) lo_[il * n_rows_ + row] = 0;
}

}  // namespace specula
