// engine/embeddings.cpp — see embeddings.h.
#include "engine/embeddings.h"

#include <algorithm>
#include <cmath>

namespace specula {

Result<std::vector<float>> embed(Engine& engine, std::span<const int32_t> ids, Pooling pooling, bool normalize) {
  const ModelInfo& info = engine.model().info();
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) return Status::invalid_argument("[embeddings] no tokens");
  for (int32_t id : ids)
    if (id < 0 || id >= info.n_vocab)
      return Status::invalid_argument("[embeddings] token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                      std::to_string(info.n_vocab) + ")");
  const int64_t E = info.n_embd;
  std::vector<float> out(static_cast<size_t>(E), 0.0f);
  Status failure = Status::ok();
  const bool ran = engine.run_exclusive([&](Model& m) {
    auto st = new_state(m, engine.options().cache, n + 1);
    if (!st) {
      failure = st.status();
      return;
    }
    auto row = st->new_row();
    if (!row || !st->reserve(1).is_ok()) {
      failure = Status::internal("[embeddings] out of memory");
      return;
    }
    st->insert(std::move(row).value());
    std::vector<double> acc(static_cast<size_t>(E), 0.0);
    Tensor hidden;
    const int32_t rows[1] = {0};
    for (int64_t off = 0; off < n; off += 512) {
      Batch b;
      b.B = 1;
      b.T = std::min<int64_t>(512, n - off);
      b.ids = ids.data() + off;
      b.rows = rows;
      failure = m.forward(b, *st, hidden);
      if (!failure.is_ok()) return;
      const float* h = hidden.data();
      if (pooling == Pooling::kMean) {
        for (int64_t t = 0; t < b.T; ++t)
          for (int64_t e = 0; e < E; ++e) acc[static_cast<size_t>(e)] += h[t * E + e];
      } else if (off + b.T == n) {
        for (int64_t e = 0; e < E; ++e) acc[static_cast<size_t>(e)] = h[(b.T - 1) * E + e];
      }
    }
    double norm = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (pooling == Pooling::kMean) acc[static_cast<size_t>(e)] /= static_cast<double>(n);
      norm += acc[static_cast<size_t>(e)] * acc[static_cast<size_t>(e)];
    }
    norm = !normalize ? 1.0 : norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
    for (int64_t e = 0; e < E; ++e) out[static_cast<size_t>(e)] = static_cast<float>(acc[static_cast<size_t>(e)] * norm);
  });
  if (!ran) return Status::unavailable("[embeddings] the engine is shutting down");
  if (!failure.is_ok()) return failure;
  return out;
}

}  // namespace specula
