// decoding/eagle3.cpp — see eagle3.h.
#include "decoding/eagle3.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include "decoding/draft_rows.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "model/attention.h"
#include "ops/ops.h"

namespace specula {
namespace {

constexpr const char* kWho = "[eagle3]";

Status head_error(const std::string& what) { return Status::error(std::string(kWho) + " " + what); }

// The head's weights and geometry (eagle3.h lists the tensors).
struct Head {
  std::shared_ptr<gguf::GgufFile> file;
  int64_t E = 0, Et = 0, H = 0, Hkv = 0, hd = 0, F = 0, n_rot = 0;
  int64_t Vt = 0;  // target vocabulary
  int64_t Vd = 0;  // draft vocabulary (rows of the output projection)
  float eps = 1e-6f, base = 10000.0f, freq_scale = 1.0f;
  bool norm_before_residual = false, norm_before_fc = false;
  std::vector<int32_t> target_layers;
  std::vector<int32_t> d2t;  // [Vd] target id of each draft index; empty: the identity
  std::vector<float> enc_norm, attn_norm, hidden_norm, ffn_norm, output_norm, rope_freqs;
  TensorView fc, tok_embd, wq, wk, wv, wo, gate, up, down;
  TensorView output;  // data null: the target's projection (Model::project_logits)
};

Result<std::unique_ptr<Head>> load_head(Model& target, const std::string& path, const kernels::KernelTable& kt) {
  auto opened = open_model_file(path);
  if (!opened) return head_error(opened.message());
  auto h = std::make_unique<Head>();
  h->file = std::make_shared<gguf::GgufFile>(std::move(opened).value());
  const gguf::GgufFile& f = *h->file;
  auto arch = f.get_string("general.architecture");
  if (!arch || *arch != "eagle3")
    return head_error(path + " is not an EAGLE-3 head (general.architecture '" + (arch ? *arch : std::string()) +
                      "', expected 'eagle3')");
  auto hp = read_transformer_hparams(f, "eagle3", kWho);
  if (!hp) return hp.status();
  if (hp->n_layers != 1)
    return head_error("eagle3.block_count is " + std::to_string(hp->n_layers) + ", an EAGLE-3 head has 1 layer");
  SPECULA_RETURN_IF_ERROR(check_block_tensors(f, 1, "eagle3.block_count", kWho));
  h->E = hp->n_embd;
  h->F = hp->n_ff;
  h->H = hp->n_heads;
  h->Hkv = hp->n_kv_heads;
  if (h->H % h->Hkv != 0)
    return head_error("attention.head_count " + std::to_string(h->H) + " is not a multiple of head_count_kv " +
                      std::to_string(h->Hkv));
  SPECULA_HPARAM_INT(h->hd, f, "eagle3.attention.key_length", 2, 4096, kWho, h->E / h->H);
  SPECULA_HPARAM_INT(h->n_rot, f, "eagle3.rope.dimension_count", 2, h->hd, kWho, h->hd);
  if (h->hd < 2 || h->n_rot < 2 || h->n_rot > h->hd || h->hd % 2 != 0 || h->n_rot % 2 != 0)
    return head_error("head_dim " + std::to_string(h->hd) + " and rope.dimension_count " + std::to_string(h->n_rot) +
                      " must be even, at least 2, the second at most the first");
  double v = 0;
  {
    auto eps = hparam_float(f, "eagle3.attention.layer_norm_rms_epsilon", 0.0, 1.0, kWho);
    if (!eps) return eps.status();
    h->eps = static_cast<float>(*eps);
    auto b = hparam_float(f, "eagle3.rope.freq_base", 0.0, 1e12, kWho, 10000.0);
    if (!b) return b.status();
    h->base = static_cast<float>(*b);
    auto fs = hparam_float(f, "eagle3.rope.scaling.factor", 0.0, 1e6, kWho, 1.0);
    if (!fs) return fs.status();
    v = *fs;
    h->freq_scale = static_cast<float>(1.0 / v);
  }
  for (auto [key, dst] : {std::pair<const char*, bool*>{"eagle3.norm_before_residual", &h->norm_before_residual},
                          {"eagle3.norm_before_fc", &h->norm_before_fc}}) {
    if (f.find(key) == nullptr) continue;
    auto b = f.get_bool(key);
    if (!b) return head_error(b.message());
    *dst = *b;
  }

  // The target: its hidden size, layers and vocabulary.
  const ModelInfo& ti = target.info();
  h->Vt = ti.n_vocab;
  // (A folder may leave these two out: then, as the converter, the target's hidden size and
  // layers 2, N/2, N-3.)
  SPECULA_HPARAM_INT(h->Et, f, "eagle3.target_hidden_size", 1, int64_t{1} << 20, kWho, ti.n_embd);
  if (h->Et != ti.n_embd)
    return head_error("the head was made for a target of hidden size " + std::to_string(h->Et) +
                      ", this target's is " + std::to_string(ti.n_embd));
  if (!target.gives_hidden_taps())
    return head_error("the target's architecture gives no hidden taps (EAGLE-3 reads its layers' states)");
  Result<std::vector<int32_t>> layers = std::vector<int32_t>{
      2, static_cast<int32_t>(ti.n_layers / 2), static_cast<int32_t>(ti.n_layers - 3)};
  if (f.find("eagle3.target_layers") != nullptr) layers = f.get_i32_array("eagle3.target_layers");
  if (!layers) return head_error(layers.message());
  if (layers->size() != 3)
    return head_error("eagle3.target_layers has " + std::to_string(layers->size()) + " entries, expected 3");
  for (int32_t l : *layers)
    if (l < 0 || l > ti.n_layers)
      return head_error("eagle3.target_layers entry " + std::to_string(l) + " is outside [0, " +
                        std::to_string(ti.n_layers) + "] (the target has " + std::to_string(ti.n_layers) + " layers)");
  h->target_layers = std::move(layers).value();
  if (const gguf::Value* tok = f.find("tokenizer.ggml.tokens"); tok != nullptr && tok->is_array()) {
    const auto n = static_cast<int64_t>(tok->count);
    if (n != h->Vt)
      return head_error("the head's vocabulary has " + std::to_string(n) + " tokens, the target's " +
                        std::to_string(h->Vt));
  }

  // Weights.
  const int64_t E = h->E, QD = h->H * h->hd, KD = h->Hkv * h->hd;
  Status st = load_weights(f, kt,
                           {{&h->attn_norm, "blk.0.attn_norm.weight", E},
                            {&h->hidden_norm, "blk.0.attn_norm_2.weight", E},
                            {&h->ffn_norm, "blk.0.ffn_norm.weight", E},
                            {&h->output_norm, "output_norm.weight", E}},
                           {{&h->fc, "fc.weight", 3 * h->Et, E},
                            {&h->wq, "blk.0.attn_q.weight", 2 * E, QD},
                            {&h->wk, "blk.0.attn_k.weight", 2 * E, KD},
                            {&h->wv, "blk.0.attn_v.weight", 2 * E, KD},
                            {&h->wo, "blk.0.attn_output.weight", QD, E},
                            {&h->gate, "blk.0.ffn_gate.weight", E, h->F},
                            {&h->up, "blk.0.ffn_up.weight", E, h->F},
                            {&h->down, "blk.0.ffn_down.weight", h->F, E}});
  if (!st.is_ok()) return head_error(st.message());
  if (h->norm_before_fc) {
    auto w = weight_1d_f32(f, kt, "enc.output_norm.weight", 3 * h->Et);
    if (!w) return head_error(w.message());
    h->enc_norm = std::move(w).value();
  }
  if (f.find_tensor("blk.0.rope_freqs.weight") != nullptr || f.find_tensor("rope_freqs.weight") != nullptr) {
    const std::string name = f.find_tensor("rope_freqs.weight") != nullptr ? "rope_freqs.weight" : "blk.0.rope_freqs.weight";
    auto w = weight_1d_f32(f, kt, name, h->n_rot / 2);
    if (!w) return head_error(w.message());
    h->rope_freqs = std::move(w).value();
  }
  // The token embedding: the head's own, or the target's (then the widths must agree).
  if (f.find_tensor("token_embd.weight") != nullptr) {
    auto w = weight_2d(f, kt, "token_embd.weight", E, h->Vt);
    if (!w) return head_error(w.message());
    h->tok_embd = *w;
  } else {
    if (E != h->Et)
      return head_error("the head has no token_embd.weight and its hidden size " + std::to_string(E) +
                        " is not the target's " + std::to_string(h->Et));
    auto w = weight_2d(target.file(), kt, "token_embd.weight", E, h->Vt);
    if (!w) return head_error("the target's token embedding: " + w.message());
    h->tok_embd = *w;
  }
  // The output projection and the draft -> target vocabulary map.
  const gguf::TensorInfo* d2t = f.find_tensor("d2t");
  if (const gguf::TensorInfo* out = f.find_tensor("output.weight"); out != nullptr) {
    const int64_t vd = out->shape.size() == 2 ? out->shape[1] : 0;
    auto w = weight_2d(f, kt, "output.weight", E, vd);
    if (!w || vd < 1) return head_error(w ? "tensor 'output.weight' has no rows" : w.message());
    h->output = *w;
    h->Vd = vd;
  } else {
    if (E != h->Et)
      return head_error("the head has no output.weight and its hidden size " + std::to_string(E) +
                        " is not the target's " + std::to_string(h->Et) + " (the target's projection reads " +
                        std::to_string(h->Et) + "-wide rows)");
    h->Vd = h->Vt;
  }
  if (d2t != nullptr) {
    if (d2t->type != DType::I64 || d2t->shape.size() != 1 || d2t->shape[0] != h->Vd)
      return head_error("tensor 'd2t': " + std::string(dtype_name(d2t->type)) + " " + shape_str(d2t->shape) +
                        ", expected I64 " + shape_str({h->Vd}) + " (one target id per draft token)");
    h->d2t.resize(static_cast<size_t>(h->Vd));
    std::vector<bool> seen(static_cast<size_t>(h->Vt), false);
    for (int64_t i = 0; i < h->Vd; ++i) {
      int64_t id = 0;
      std::memcpy(&id, d2t->data + i * 8, 8);
      if (id < 0 || id >= h->Vt)
        return head_error("d2t[" + std::to_string(i) + "] = " + std::to_string(id) + " is outside the target vocabulary (" +
                          std::to_string(h->Vt) + " tokens)");
      if (seen[static_cast<size_t>(id)]) return head_error("d2t maps two draft tokens to target id " + std::to_string(id));
      seen[static_cast<size_t>(id)] = true;
      h->d2t[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
  } else if (h->Vd != h->Vt) {
    return head_error("the head's output has " + std::to_string(h->Vd) + " rows but the file has no d2t map to the target's " +
                      std::to_string(h->Vt) + " tokens");
  }
  // Every tensor must be one the graph reads: a head with extras (biases, more norms) is
  // another architecture, refused rather than run without them.
  static const char* const kKnown[] = {"fc.weight", "enc.output_norm.weight", "blk.0.attn_norm.weight",
                                       "blk.0.attn_norm_2.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                       "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_norm.weight",
                                       "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                                       "output_norm.weight", "output.weight", "token_embd.weight", "d2t",
                                       "rope_freqs.weight", "blk.0.rope_freqs.weight"};
  for (const gguf::TensorInfo& t : f.tensors())
    if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return t.name == k; }))
      return head_error("tensor '" + t.name + "' is not part of an EAGLE-3 head (llama.cpp's eagle3 graph)");
  return h;
}

class Eagle3Draft final : public DraftSource {
 public:
  Eagle3Draft(Model& target, std::unique_ptr<Head> head, StateRows state)
      : target_(&target), h_(std::move(head)), state_(std::move(state)), kt_(&kernels::active()), pool_(target.pool()) {
    if (pool_ == nullptr) pool_ = std::make_shared<ThreadPool>(1);
  }
  std::string name() const override { return "eagle3"; }
  std::vector<int32_t> hidden_taps() const override { return h_->target_layers; }
  int64_t bytes_for(int64_t n_tokens) const override { return state_.bytes_for(n_tokens); }

  Status prefill(std::span<const DraftRow> rows, const VerifyContext* context) override {
    Status st = take_features(rows, context);
    if (st.is_ok()) st = feed_backlog(rows, 0);
    if (!st.is_ok())
      for (const DraftRow& r : rows) release(r.id);
    return st;
  }

  Status draft(std::span<const DraftRow> rows, std::vector<std::vector<int32_t>>& proposals) override {
    proposals.assign(rows.size(), {});
    std::vector<size_t> which;
    std::vector<int64_t> upto;
    for (size_t b = 0; b < rows.size(); ++b) {
      const DraftRow& r = rows[b];
      const auto L = static_cast<int64_t>(r.context.size());
      if (L < 2 || r.max_depth <= 0 || L - 1 + r.max_depth > state_.max_length()) continue;
      auto row = ensure_row(r.id);
      if (!row) return fail(rows, row.status());
      close_tx(r.id);  // (each of these may reset the row: look it up after them)
      settle(r.id, r.context);
      rewind(r.id, L - 2);  // the boundary pair (x_{L-1}, g_{L-2}) samples: it is fed now
      RowInfo* found = find(r.id);
      if (found == nullptr) continue;  // (a reset that could not make the row again: no drafts)
      RowInfo& info = *found;
      pad_features(info, L - 1);
      const int32_t sr = row_of(r.id);
      state_.begin(std::span<const int32_t>(&sr, 1));
      info.tx_base = fed(info);
      which.push_back(b);
      upto.push_back(L - 1);
    }
    if (which.empty()) return Status::ok();
    const int64_t E = h_->E;
    std::vector<float> y(which.size() * static_cast<size_t>(E));
    Status st = feed(rows, which, upto, y.data());
    if (!st.is_ok()) return fail(rows, st);
    std::vector<int32_t> next(which.size());
    pick(y.data(), static_cast<int64_t>(which.size()), next.data());
    for (size_t a = 0; a < which.size(); ++a) proposals[which[a]].push_back(next[a]);
    // The chain: (d_j, y_{j-1}) at the next position, all rows together, up to each row's depth.
    std::vector<int32_t> ids, brows;
    std::vector<int64_t> counts;
    std::vector<float> g;
    for (int32_t step = 1;; ++step) {
      std::vector<size_t> going;  // index into which
      for (size_t a = 0; a < which.size(); ++a)
        if (step < rows[which[a]].max_depth) going.push_back(a);
      if (going.empty()) break;
      ids.clear();
      brows.clear();
      counts.assign(going.size(), 1);
      g.resize(going.size() * static_cast<size_t>(E));
      for (size_t k = 0; k < going.size(); ++k) {
        const size_t a = going[k];
        ids.push_back(proposals[which[a]].back());
        brows.push_back(row_of(rows[which[a]].id));
        std::memcpy(g.data() + k * E, y.data() + a * E, static_cast<size_t>(E) * sizeof(float));
      }
      st = forward(ids, g.data(), brows, counts, y_step_);
      if (!st.is_ok()) return fail(rows, st);
      next.resize(going.size());
      pick(y_step_.data(), static_cast<int64_t>(going.size()), next.data());
      for (size_t k = 0; k < going.size(); ++k) {
        const size_t a = going[k];
        proposals[which[a]].push_back(next[k]);
        std::memcpy(y.data() + a * E, y_step_.data() + k * E, static_cast<size_t>(E) * sizeof(float));
      }
    }
    return Status::ok();
  }

  void commit(std::span<const DraftRow> rows, const VerifyContext* context) override {
    for (const DraftRow& r : rows) {
      if (!ensure_row(r.id)) {
        release(r.id);
        continue;
      }
      close_tx(r.id);
      settle(r.id, r.context);
    }
    // Rows that commit without drafting (throttled, near their end) would pile up features:
    // past a chunk they are paired now.
    if (!take_features(rows, context).is_ok() || !feed_backlog(rows, kChunk).is_ok())
      for (const DraftRow& r : rows) release(r.id);
  }

  void release(uint64_t id) override { rows_.release(id, state_); }

 private:
  // A request's row: pair p (p < fed) in the state holds (tokens[p] = x_{p+1}, g_p); feats
  // holds g of positions fed .. fed + n - 1 (not paired yet).
  struct RowInfo {
    std::vector<int32_t> tokens;
    int64_t zeros = 0;         // features of positions fed .. fed + zeros - 1 are zero (never computed)
    std::vector<float> feats;  // [n, E] the features after those
    int64_t tx_base = -1;      // fed at begin(); -1: no transaction open
  };
  static int64_t fed(const RowInfo& info) { return static_cast<int64_t>(info.tokens.size()); }
  int64_t feat_end(const RowInfo& info) const {
    return fed(info) + info.zeros + static_cast<int64_t>(info.feats.size()) / h_->E;
  }
  // Zero features up to position `end` (a count, not memory, when nothing follows them).
  void pad_features(RowInfo& info, int64_t end) {
    const int64_t gap = end - feat_end(info);
    if (gap <= 0) return;
    if (info.feats.empty())
      info.zeros += gap;
    else
      info.feats.resize(info.feats.size() + static_cast<size_t>(gap * h_->E), 0.0f);
  }
  RowInfo* find(uint64_t id) { return rows_.find(id); }

  int32_t row_of(uint64_t id) const { return rows_.row_of(id); }
  Result<int32_t> ensure_row(uint64_t id) { return rows_.ensure(id, state_); }
  // Drop every row of the batch (their state is rebuilt from later features: only speed is lost).
  Status fail(std::span<const DraftRow> rows, Status st) {
    for (const DraftRow& r : rows) release(r.id);
    return st;
  }
  // Resolve an open drafting transaction: the real pairs fed in it stay, the chain goes.
  void close_tx(uint64_t id) {
    RowInfo* found = find(id);
    if (found == nullptr || found->tx_base < 0) return;
    RowInfo& info = *found;
    const int32_t r = row_of(id);
    const int64_t k = fed(info) - info.tx_base;
    info.tx_base = -1;
    if (!state_.resolve(std::span<const int32_t>(&r, 1), std::span<const int64_t>(&k, 1)).is_ok()) reset(id);
  }
  // Keep the pairs whose tokens still match the context (x_{p+1} == context[p + 1]).
  void settle(uint64_t id, std::span<const int32_t> context) {
    const RowInfo* found = find(id);
    if (found == nullptr) return;
    const RowInfo& info = *found;
    int64_t keep = 0;
    const int64_t lim = std::min<int64_t>(fed(info), static_cast<int64_t>(context.size()) - 1);
    while (keep < lim && info.tokens[keep] == context[keep + 1]) ++keep;
    if (keep < fed(info)) rewind(id, keep);
  }
  // Cut the row back to its first n pairs (features from position n on are dropped).
  void rewind(uint64_t id, int64_t n) {
    RowInfo* found = find(id);
    if (found == nullptr) return;
    RowInfo& info = *found;
    n = std::max<int64_t>(n, 0);
    if (n >= fed(info)) return;
    if (!state_.truncate(row_of(id), n).is_ok()) {
      reset(id);
      return;
    }
    info.tokens.resize(static_cast<size_t>(n));
    info.feats.clear();
    info.zeros = 0;
  }
  void reset(uint64_t id) {
    release(id);
    (void)ensure_row(id);
  }

  // Feeds the pairs of each row whose unpaired features number more than `above`, all but
  // the last available pair (draft() feeds that one with an output).
  Status feed_backlog(std::span<const DraftRow> rows, int64_t above) {
    std::vector<size_t> which;
    std::vector<int64_t> upto;
    for (size_t b = 0; b < rows.size(); ++b) {
      const RowInfo* info = find(rows[b].id);
      if (info == nullptr || info->tx_base >= 0) continue;
      const int64_t avail = std::min<int64_t>(feat_end(*info), static_cast<int64_t>(rows[b].context.size()) - 1);
      if (avail - 1 > fed(*info) + above && avail <= state_.max_length()) {
        which.push_back(b);
        upto.push_back(avail - 1);
      }
    }
    return which.empty() ? Status::ok() : feed(rows, which, upto, nullptr);
  }

  // Stores the forward's features (g = fc(taps)) of each row's kept positions, one fc
  // matmul for all rows.
  Status take_features(std::span<const DraftRow> rows, const VerifyContext* vc) {
    if (vc == nullptr || vc->taps == nullptr || vc->n_taps != 3 || vc->n_embd != h_->Et ||
        vc->first.size() != rows.size() || vc->pos.size() != rows.size() || vc->kept.size() != rows.size())
      return Status::ok();
    const int64_t W = 3 * h_->Et, E = h_->E;
    int64_t n = 0;
    for (size_t b = 0; b < rows.size(); ++b) n += std::max<int64_t>(vc->kept[b], 0);
    if (n == 0) return Status::ok();
    x_.resize(static_cast<size_t>(n * W));
    int64_t at = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
      if (vc->kept[b] <= 0) continue;
      std::memcpy(x_.data() + at * W, vc->taps + vc->first[b] * W, static_cast<size_t>(vc->kept[b] * W) * sizeof(float));
      at += vc->kept[b];
    }
    if (h_->norm_before_fc) ops::rms_norm(x_.data(), h_->enc_norm.data(), n, W, h_->eps, x_.data());
    g_.resize(static_cast<size_t>(n * E));
    ops::matmul(*pool_, *kt_, h_->fc, x_.data(), n, g_.data(), ws_);
    at = 0;
    for (size_t b = 0; b < rows.size(); ++b) {
      const int64_t k = vc->kept[b];
      if (k <= 0) continue;
      const float* g = g_.data() + at * E;
      at += k;
      auto row = ensure_row(rows[b].id);
      if (!row) return row.status();
      const int64_t p = vc->pos[b];
      rewind(rows[b].id, p);  // positions computed again: their pairs go
      RowInfo* found = find(rows[b].id);
      if (found == nullptr) continue;
      RowInfo& now = *found;
      const int64_t base = fed(now) + now.zeros;  // the position of feats' first row
      if (p < base) {
        now.zeros = p - fed(now);
        now.feats.clear();
      } else if (p > feat_end(now)) {
        pad_features(now, p);  // the target skipped them (a prompt-cache hit, a step without taps)
      } else {
        now.feats.resize(static_cast<size_t>((p - base) * E));
      }
      now.feats.insert(now.feats.end(), g, g + k * E);
    }
    return Status::ok();
  }

  // Feeds rows[which[a]]'s pairs p in [fed, upto[a]) (chunks, all rows batched); y_last
  // (optional, [which.size(), E]) gets each row's last pair's pre-norm output.
  Status feed(std::span<const DraftRow> rows, std::span<const size_t> which, std::span<const int64_t> upto, float* y_last) {
    const int64_t E = h_->E;
    std::vector<int32_t> ids, brows;
    std::vector<int64_t> counts;
    std::vector<float> g;
    for (;;) {
      ids.clear();
      brows.clear();
      counts.clear();
      g.clear();
      std::vector<size_t> in;  // index into which
      for (size_t a = 0; a < which.size(); ++a) {
        const DraftRow& r = rows[which[a]];
        const RowInfo& info = rows_.at(r.id);
        const int64_t p0 = fed(info), n = std::min<int64_t>(upto[a] - p0, kChunk);
        if (n <= 0) continue;
        in.push_back(a);
        brows.push_back(row_of(r.id));
        counts.push_back(n);
        ids.insert(ids.end(), r.context.begin() + p0 + 1, r.context.begin() + p0 + 1 + n);
        const int64_t z = std::min(n, info.zeros);
        g.resize(g.size() + static_cast<size_t>(z * E), 0.0f);
        g.insert(g.end(), info.feats.begin(), info.feats.begin() + (n - z) * E);
      }
      if (in.empty()) return Status::ok();
      SPECULA_RETURN_IF_ERROR(forward(ids, g.data(), brows, counts, y_step_));
      int64_t at = 0;
      for (size_t k = 0; k < in.size(); ++k) {
        const size_t a = in[k];
        const DraftRow& r = rows[which[a]];
        RowInfo& info = rows_.at(r.id);
        const int64_t p0 = fed(info), n = counts[k];
        info.tokens.insert(info.tokens.end(), r.context.begin() + p0 + 1, r.context.begin() + p0 + 1 + n);
        const int64_t z = std::min(n, info.zeros);
        info.zeros -= z;
        info.feats.erase(info.feats.begin(), info.feats.begin() + (n - z) * E);
        at += n;
        if (y_last != nullptr && fed(info) == upto[a])
          std::memcpy(y_last + a * E, y_step_.data() + (at - 1) * E, static_cast<size_t>(E) * sizeof(float));
      }
    }
  }

  // One forward of the head's layer: rows brows[b] append counts[b] pairs (ids, g [M, E]);
  // y [M, E] gets the pre-norm outputs.
  Status forward(const std::vector<int32_t>& ids, const float* g, const std::vector<int32_t>& brows,
                 const std::vector<int64_t>& counts, std::vector<float>& y) {
    const Head& h = *h_;
    Batch batch{static_cast<int32_t>(brows.size()), 0, ids.data(), brows.data(), counts.data()};
    SPECULA_RETURN_IF_ERROR(plan_batch(batch, state_, h.tok_embd.rows, kWho, layout_));
    const int64_t M = layout_.M, E = h.E, QD = h.H * h.hd, KD = h.Hkv * h.hd, F = h.F, half = h.n_rot / 2;
    const auto grow = [M](std::vector<float>& v, int64_t w) { v.resize(static_cast<size_t>(M * w)); };
    grow(cat_, 2 * E);
    grow(q_, QD);
    grow(k_, KD);
    grow(v_, KD);
    grow(attn_, QD);
    grow(o_, E);
    grow(gate_, F);
    grow(up_, F);
    grow(cos_, half);
    grow(sin_, half);
    grow(y, E);
    ThreadPool& pool = *pool_;
    // concat(RMSNorm(embd(x)), RMSNorm(g)) [M, 2E]; the embedding goes to y as scratch.
    ops::get_rows(*kt_, h.tok_embd, ids.data(), M, 1.0f, y.data());
    for (int64_t m = 0; m < M; ++m) {
      ops::rms_norm(y.data() + m * E, h.attn_norm.data(), 1, E, h.eps, cat_.data() + m * 2 * E);
      ops::rms_norm(g + m * E, h.hidden_norm.data(), 1, E, h.eps, cat_.data() + m * 2 * E + E);
    }
    ops::matmul(pool, *kt_, h.wq, cat_.data(), M, q_.data(), ws_);
    ops::matmul(pool, *kt_, h.wk, cat_.data(), M, k_.data(), ws_);
    ops::matmul(pool, *kt_, h.wv, cat_.data(), M, v_.data(), ws_);
    ops::rope_table(layout_.pos.data(), M, h.n_rot, h.base, h.freq_scale, cos_.data(), sin_.data(),
                    h.rope_freqs.empty() ? nullptr : h.rope_freqs.data());
    ops::rope_norm(q_.data(), M, h.H, h.hd, h.n_rot, cos_.data(), sin_.data());
    ops::rope_norm(k_.data(), M, h.Hkv, h.hd, h.n_rot, cos_.data(), sin_.data());
    AttentionArgs aa;
    aa.layer = 0;
    aa.n_heads = h.H;
    aa.n_kv_heads = h.Hkv;
    aa.head_dim = h.hd;
    aa.scale = 1.0f / std::sqrt(static_cast<float>(h.hd));
    aa.M = M;
    aa.B = batch.B;
    aa.rows = batch.rows;
    aa.offset = layout_.offset.data();
    aa.token_row = layout_.token_row.data();
    aa.kt = kt_;
    attention(pool, aa, state_, q_.data(), k_.data(), v_.data(), attn_.data(), attn_scratch_);
    for (int32_t b = 0; b < batch.B; ++b) state_.advance(batch.rows[b], batch.tokens_of(b));
    ops::matmul(pool, *kt_, h.wo, attn_.data(), M, o_.data(), ws_);
    // h = attn + residual (g, or its norm); y = h + FFN(RMSNorm(h)).
    for (int64_t m = 0; m < M; ++m) {
      const float* res = h.norm_before_residual ? cat_.data() + m * 2 * E + E : g + m * E;
      for (int64_t i = 0; i < E; ++i) o_[m * E + i] += res[i];
      ops::rms_norm(o_.data() + m * E, h.ffn_norm.data(), 1, E, h.eps, y.data() + m * E);
    }
    ops::matmul(pool, *kt_, h.gate, y.data(), M, gate_.data(), ws_);
    ops::matmul(pool, *kt_, h.up, y.data(), M, up_.data(), ws_);
    for (int64_t m = 0; m < M; ++m) ops::silu_mul(F, gate_.data() + m * F, up_.data() + m * F, gate_.data() + m * F);
    ops::matmul(pool, *kt_, h.down, gate_.data(), M, y.data(), ws_);
    for (int64_t i = 0; i < M * E; ++i) y[i] += o_[i];
    return Status::ok();
  }

  // The head's argmax for each of n pre-norm rows y [n, E], as target ids (ties: the
  // lower target id).
  void pick(const float* y, int64_t n, int32_t* out) {
    const Head& h = *h_;
    const int64_t E = h.E;
    yn_.resize(static_cast<size_t>(n * E));
    ops::rms_norm(y, h.output_norm.data(), n, E, h.eps, yn_.data());
    const int64_t V = h.output.data != nullptr ? h.Vd : h.Vt;
    logits_.resize(static_cast<size_t>(n * V));
    if (h.output.data != nullptr)
      ops::matmul(*pool_, *kt_, h.output, yn_.data(), n, logits_.data(), ws_);
    else
      target_->project_logits(yn_.data(), n, logits_.data());
    for (int64_t m = 0; m < n; ++m) {
      const float* l = logits_.data() + m * V;
      int64_t best = -1;
      int32_t best_id = 0;
      for (int64_t i = 0; i < V; ++i) {
        const int32_t id = h.d2t.empty() ? static_cast<int32_t>(i) : h.d2t[static_cast<size_t>(i)];
        if (best < 0 || l[i] > l[best] || (l[i] == l[best] && id < best_id)) {
          best = i;
          best_id = id;
        }
      }
      out[m] = best_id;
    }
  }

  static constexpr int64_t kChunk = 512;
  Model* target_;
  std::unique_ptr<Head> h_;
  StateRows state_;
  const kernels::KernelTable* kt_;
  std::shared_ptr<ThreadPool> pool_;
  RequestRows<RowInfo> rows_;  // each request's state row and RowInfo
  BatchLayout layout_;
  ops::Workspace ws_;
  AttentionScratch attn_scratch_;
  std::vector<float> x_, g_, cat_, q_, k_, v_, attn_, o_, gate_, up_, cos_, sin_, y_step_, yn_, logits_;
};

// Hugging Face EAGLE-3 folders (config.json architectures LlamaForCausalLMEagle3 /
// Eagle3LlamaForCausalLM / Eagle3DraftModel, as the EAGLE-3 authors' and SpecForge's
// checkpoints; llama.cpp's conversion/llama.py): the llama keys, num_hidden_layers 1,
// target_hidden_size, eagle_aux_hidden_state_layer_ids -> target_layers, norm_before_residual
// and norm_before_fc; tensors fc, d2t (offsets: target id = i + d2t[i], stored absolute),
// t2d (dropped), norm -> output_norm, lm_head -> output, embed_tokens -> token_embd,
// input_norm -> enc.output_norm, and the layer under midlayer. / layers.0. / model.layers.0.
// (hidden_norm -> attn_norm_2; Q/K rows permuted to the NORM pairing as for llama). The
// speculators format (Eagle3Speculator, its layer config nested) is refused by name.
std::optional<hf::Target> eagle3_tensor(const std::string& name, const std::function<std::optional<hf::Target>(const std::string&)>& llama) {
  using T = hf::Transform;
  if (name == "fc.weight") return hf::Target{"fc.weight"};
  if (name == "d2t") return hf::Target{"d2t", T::kOffsetIds};
  if (name == "t2d") return hf::Target{""};
  if (name == "norm.weight") return hf::Target{"output_norm.weight"};
  if (name == "lm_head.weight") return hf::Target{"output.weight"};
  if (name == "embed_tokens.weight") return hf::Target{"token_embd.weight"};
  if (name == "input_norm.weight") return hf::Target{"enc.output_norm.weight"};
  std::string rest;
  for (const char* prefix : {"midlayer.", "layers.0.", "model.layers.0."})
    if (name.rfind(prefix, 0) == 0) rest = name.substr(std::strlen(prefix));
  if (rest.empty()) return std::nullopt;
  if (rest == "hidden_norm.weight") return hf::Target{"blk.0.attn_norm_2.weight"};
  return llama("model.layers.0." + rest);
}

void eagle3_hf(hf::Config& cfg, hf::Conversion& c) {
  hf::standard_config(cfg, c);
  if (cfg.i("num_hidden_layers", 1, 4096) != 1) cfg.fail("'num_hidden_layers' must be 1 for an EAGLE-3 head");
  if (cfg.has("target_hidden_size")) c.u32("target_hidden_size", cfg.i("target_hidden_size", 1, int64_t{1} << 20));
  if (auto ids = cfg.ints("eagle_aux_hidden_state_layer_ids")) {
    if (ids->size() != 3) cfg.fail("'eagle_aux_hidden_state_layer_ids' must list 3 layers");
    for (int64_t id : *ids)
      if (id < 0 || id > 4096) cfg.fail("'eagle_aux_hidden_state_layer_ids' entry " + std::to_string(id) + " is outside [0, 4096]");
    c.i32s("target_layers", *ids);
  }
  c.boolean("norm_before_residual", cfg.b("norm_before_residual", false));
  c.boolean("norm_before_fc", cfg.b("norm_before_fc", false));
  auto llama = hf::llama_tensor_rule(true, 0);
  c.map = [llama](const std::string& name) { return eagle3_tensor(name, llama); };
}

void speculators_hf(hf::Config& cfg, hf::Conversion&) {
  cfg.fail("the speculators format (Eagle3Speculator, its layer config under 'transformer_layer_config') is not "
           "supported; convert the head with llama.cpp's convert_hf_to_gguf.py --target-model-dir TARGET");
}

// The config.json architectures registered below (is_eagle3_file recognizes a folder by them).
const std::string kHfNames[] = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3DraftModel",
                                "Eagle3Speculator"};
const bool kHf = hf::register_hf_architecture("LlamaForCausalLMEagle3", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3LlamaForCausalLM", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3DraftModel", {"eagle3", &eagle3_hf, false, true}) &&
                 hf::register_hf_architecture("Eagle3Speculator", {"eagle3", &speculators_hf, false, true});

}  // namespace

bool is_eagle3_file(const std::string& path) {
  std::string dir = path;  // a folder, or one of its .safetensors files
  if (dir.size() > 12 && dir.compare(dir.size() - 12, 12, ".safetensors") == 0)
    dir = std::filesystem::path(dir).parent_path().string();
  if (hf::is_model_folder(dir)) {  // config.json alone (opening the folder converts its tensors)
    auto text = hf::read_text(dir + "/config.json", 1 << 20);
    if (!text) return false;
    auto cfg = hf::Config::parse(*text, dir + "/config.json");
    if (!cfg) return false;
    auto archs = cfg->strings("architectures");
    return archs && !archs->empty() &&
           std::find(std::begin(kHfNames), std::end(kHfNames), archs->front()) != std::end(kHfNames);
  }
  auto f = gguf::GgufFile::open(path);
  if (!f) return false;
  auto arch = f->get_string("general.architecture");
  return arch && *arch == "eagle3";
}

Result<std::unique_ptr<DraftSource>> make_eagle3_draft(Model& target, const std::string& path, int64_t max_length,
                                                       const CacheOptions& cache) {
  const kernels::KernelTable& kt = kernels::active();
  auto head = load_head(target, path, kt);
  if (!head) return head.status();
  LayerSpec spec;
  spec.attention = attention_spec((*head)->Hkv, (*head)->hd, 0);
  auto state = StateRows::create({spec}, cache, kt, max_length);
  if (!state) return head_error(state.message());
  return std::unique_ptr<DraftSource>(new Eagle3Draft(target, std::move(head).value(), std::move(state).value()));
}

}  // namespace specula
