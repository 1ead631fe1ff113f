// state/kv_layout.cpp — the attention K/V layout and its rows (see kv_layout.h).
#include "state/kv_layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

namespace specula {

// One tier of stored positions (main: full or ring; recent f16: ring of `delay`).
struct KvTierStore {
  int64_t ring = 0;  // 0: slot = position
  size_t k_pos = 0, v_pos = 0;
  std::vector<std::unique_ptr<uint8_t[]>> kp, vp;  // pages
  std::vector<const uint8_t*> kptr, vptr;          // the same, for views
  int64_t lo = 0;  // oldest position held (positions < lo were overwritten)

  bool used() const { return k_pos > 0; }
  int64_t slot(int64_t pos) const { return ring > 0 ? pos % ring : pos; }
  uint8_t* k_at(int64_t slot) { return kp[slot / kPageTokens].get() + static_cast<size_t>(slot % kPageTokens) * k_pos; }
  uint8_t* v_at(int64_t slot) { return vp[slot / kPageTokens].get() + static_cast<size_t>(slot % kPageTokens) * v_pos; }
  // Pages for slots [0, slot]. Throws std::bad_alloc.
  void ensure(int64_t slot) {
    const size_t need = static_cast<size_t>(slot / kPageTokens + 1);
    while (kp.size() < need) {
      kp.emplace_back(new uint8_t[kPageTokens * k_pos]());
      vp.emplace_back(new uint8_t[kPageTokens * v_pos]());
      kptr.push_back(kp.back().get());
      vptr.push_back(vp.back().get());
    }
  }
  int64_t bytes() const { return static_cast<int64_t>(kp.size()) * kPageTokens * static_cast<int64_t>(k_pos + v_pos); }
  // A copy of the pages that hold positions of a row of `length` (pages past them — kept
  // after a truncation — are not copied; the copy allocates them again when it grows).
  KvTierStore copy(int64_t length) const {
    KvTierStore c;
    c.ring = ring;
    c.k_pos = k_pos;
    c.v_pos = v_pos;
    c.lo = lo;
    const int64_t slots = ring > 0 ? std::min(length, ring) : length;
    const size_t pages = std::min(kp.size(), static_cast<size_t>((slots + kPageTokens - 1) / kPageTokens));
    for (size_t p = 0; p < pages; ++p) {
      c.kp.emplace_back(new uint8_t[kPageTokens * k_pos]);
      c.vp.emplace_back(new uint8_t[kPageTokens * v_pos]);
      std::memcpy(c.kp.back().get(), kp[p].get(), kPageTokens * k_pos);
      std::memcpy(c.vp.back().get(), vp[p].get(), kPageTokens * v_pos);
      c.kptr.push_back(c.kp.back().get());
      c.vptr.push_back(c.vp.back().get());
    }
    return c;
  }
  KvTierView view(const uint8_t* const* pages, size_t pos_bytes, size_t head_bytes, const uint8_t* staged) const {
    KvTierView t;
    t.pages = pages;
    t.ring = ring;
    t.pos_bytes = pos_bytes;
    t.head_bytes = head_bytes;
    t.staged = staged;
    return t;
  }
};

class KvRow final : public LayerRow {
 public:
  explicit KvRow(const KvLayout* layout) : L_(layout) {
    main_.ring = layout->ring_;
    main_.k_pos = layout->k_pos_bytes_;
    main_.v_pos = layout->v_pos_bytes_;
    if (layout->delay_ > 0) {
      recent_.ring = layout->delay_;
      recent_.k_pos = layout->kr_pos_bytes_;
      recent_.v_pos = layout->vr_pos_bytes_;
    }
  }

  int64_t length() const override { return length_; }
  int64_t bytes() const override {
    return main_.bytes() + recent_.bytes() + static_cast<int64_t>(undo_bytes_.capacity());
  }
  Result<std::unique_ptr<LayerRow>> clone() const override {
    try {
      auto c = std::make_unique<KvRow>(L_);
      c->main_ = main_.copy(length_);
      c->recent_ = recent_.copy(length_);
      c->length_ = length_;
      c->tx_ = tx_;
      c->tx_base_ = tx_base_;
      c->tx_lo_main_ = tx_lo_main_;
      c->tx_lo_recent_ = tx_lo_recent_;
      c->undo_ = undo_;
      c->undo_bytes_ = undo_bytes_;
      return std::unique_ptr<LayerRow>(std::move(c));
    } catch (const std::bad_alloc&) {
      return Status::error("[kv_layout] out of memory cloning a row of " + std::to_string(length_) + " positions");
    }
  }

  void begin() override {
    tx_ = true;
    tx_base_ = length_;
    tx_lo_main_ = main_.lo;
    tx_lo_recent_ = recent_.lo;
    undo_.clear();
    undo_bytes_.clear();
  }
  bool in_transaction() const override { return tx_; }
  Status resolve(int64_t keep) override {
    if (!tx_) return Status::error("[kv_layout] resolve without a transaction");
    if (keep < 0 || tx_base_ + keep > length_)
      return Status::error("[kv_layout] resolve keeps " + std::to_string(keep) + " of " +
                           std::to_string(length_ - tx_base_) + " appended positions");
    const int64_t new_len = tx_base_ + keep;
    // Undo ring overwrites made by rejected positions, newest first (per tier, entries
    // were made in position order).
    for (size_t i = undo_.size(); i-- > 0;) {
      const Undo& u = undo_[i];
      if (u.pos < new_len) continue;
      KvTierStore& t = u.tier == 0 ? main_ : recent_;
      std::memcpy(t.k_at(u.slot), undo_bytes_.data() + u.off, t.k_pos);
      std::memcpy(t.v_at(u.slot), undo_bytes_.data() + u.off + t.k_pos, t.v_pos);
    }
    main_.lo = tx_lo_main_;
    recent_.lo = tx_lo_recent_;
    if (new_len > tx_base_) {
      if (main_.ring > 0) main_.lo = std::max(main_.lo, new_len - main_.ring);
      if (recent_.ring > 0) recent_.lo = std::max(recent_.lo, new_len - recent_.ring);
    }
    length_ = new_len;
    tx_ = false;
    undo_.clear();
    undo_bytes_.clear();
    return Status::ok();
  }

  int64_t min_length() const override {
    int64_t m = 0;
    if (main_.ring > 0 && main_.lo > 0) m = std::max(m, main_.lo + main_.ring - 1);
    if (recent_.ring > 0 && recent_.lo > 0) m = std::max(m, recent_.lo + recent_.ring - 1);
    return std::min(m, length_);
  }
  Status truncate(int64_t length) override {
    if (tx_) return Status::error("[kv_layout] truncate inside a transaction");
    if (length < min_length() || length > length_)
      return Status::error("[kv_layout] cannot cut a row of " + std::to_string(length_) + " positions back to " +
                           std::to_string(length) + " (shortest reusable length " + std::to_string(min_length()) + ")");
    length_ = length;
    return Status::ok();
  }

  void save(std::string& out) const override {
    put_bytes(out, "KVR1", 4);
    put_u64(out, static_cast<uint64_t>(length_));
    put_u64(out, main_.k_pos);
    put_u64(out, main_.v_pos);
    put_u64(out, static_cast<uint64_t>(main_.ring));
    put_u64(out, recent_.k_pos);
    put_u64(out, static_cast<uint64_t>(recent_.ring));
    for (const KvTierStore* t : {&main_, &recent_}) {
      if (!t->used()) continue;
      const int64_t from = held_from(*t);
      put_u64(out, static_cast<uint64_t>(from));
      for (int64_t p = from; p < length_; ++p) {
        const int64_t s = t->slot(p);
        put_bytes(out, t->kp[s / kPageTokens].get() + (s % kPageTokens) * t->k_pos, t->k_pos);
        put_bytes(out, t->vp[s / kPageTokens].get() + (s % kPageTokens) * t->v_pos, t->v_pos);
      }
    }
  }
  Status load(std::string_view in) override {
    const auto bad = [](const std::string& why) { return Status::error("[kv_layout] cannot load row: " + why); };
    if (length_ != 0 || tx_) return bad("the row is not empty");
    char magic[4];
    uint64_t len, kpos, vpos, ring, rkpos, rring;
    if (!get_bytes(in, magic, 4) || std::memcmp(magic, "KVR1", 4) != 0) return bad("not a K/V row (bad magic)");
    if (!get_u64(in, len) || !get_u64(in, kpos) || !get_u64(in, vpos) || !get_u64(in, ring) || !get_u64(in, rkpos) ||
        !get_u64(in, rring))
      return bad("truncated header");
    if (kpos != main_.k_pos || vpos != main_.v_pos || ring != static_cast<uint64_t>(main_.ring) ||
        rkpos != recent_.k_pos || rring != static_cast<uint64_t>(recent_.ring))
      return bad("it was saved by another layout (geometry or cache type differs)");
    if (len > (uint64_t{1} << 31)) return bad("length " + std::to_string(len) + " out of range");
    const int64_t L = static_cast<int64_t>(len);
    try {
      for (KvTierStore* t : {&main_, &recent_}) {
        if (!t->used()) continue;
        uint64_t from;
        if (!get_u64(in, from) || from > len) return bad("bad tier range");
        const int64_t f = static_cast<int64_t>(from);
        if (t->ring > 0 ? f < std::max<int64_t>(0, L - t->ring) : f != 0) return bad("bad tier range");
        for (int64_t p = f; p < L; ++p) {
          const int64_t s = t->slot(p);
          t->ensure(s);
          if (!get_bytes(in, t->k_at(s), t->k_pos) || !get_bytes(in, t->v_at(s), t->v_pos))
            return bad("truncated data");
        }
        t->lo = f;
      }
    } catch (const std::bad_alloc&) {
      return bad("out of memory");
    }
    if (!in.empty()) return bad("trailing bytes");
    length_ = L;
    return Status::ok();
  }

  // --- used by KvLayout ---
  KvRowView view(const KvStage& stage, int64_t first) const {
    KvRowView v;
    v.base = length_;
    v.lo = main_.lo;
    const AttentionSpec& s = L_->spec_;
    v.k = main_.view(main_.kptr.data(), main_.k_pos, main_.k_pos / s.n_kv_heads, stage.k.data() + first * main_.k_pos);
    v.v = main_.view(main_.vptr.data(), main_.v_pos, main_.v_pos / s.n_kv_heads, stage.v.data() + first * main_.v_pos);
    v.k_codec = L_->k_codec_.get();
    v.v_codec = L_->v_codec_.get();
    v.value_offset = L_->v_offset_;
    v.key_scale = L_->k_scale_;
    if (L_->delay_ > 0) {
      v.delay = L_->delay_;
      v.k_recent = recent_.view(recent_.kptr.data(), recent_.k_pos, recent_.k_pos / s.n_kv_heads,
                                stage.k_recent.data() + first * recent_.k_pos);
      v.v_recent = recent_.view(recent_.vptr.data(), recent_.v_pos, recent_.v_pos / s.n_kv_heads,
                                stage.v_recent.data() + first * recent_.v_pos);
      v.k_recent_codec = L_->k_recent_codec_.get();
      v.v_recent_codec = L_->v_recent_codec_.get();
    }
    return v;
  }
  void commit(const KvStage& stage, int64_t first, int64_t n) {
    append(main_, 0, stage.k.data() + first * main_.k_pos, stage.v.data() + first * main_.v_pos, n);
    if (recent_.used())
      append(recent_, 1, stage.k_recent.data() + first * recent_.k_pos, stage.v_recent.data() + first * recent_.v_pos,
             n);
    length_ += n;
  }

 private:
  struct Undo {
    int tier;
    int64_t slot, pos;  // the slot, and the position whose write overwrote it
    size_t off;         // old K then V bytes in undo_bytes_
  };
  // Oldest position a tier holds for the current length.
  int64_t held_from(const KvTierStore& t) const {
    return t.ring > 0 ? std::max({t.lo, int64_t{0}, length_ - t.ring}) : 0;
  }
  void append(KvTierStore& t, int tier, const uint8_t* k, const uint8_t* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = length_ + i;
      const int64_t s = t.slot(pos);
      t.ensure(s);
      // Inside a transaction, a ring slot still holding a live position is saved first.
      if (tx_ && t.ring > 0 && pos - t.ring >= t.lo && pos - t.ring >= 0) {
        const size_t off = undo_bytes_.size();
        undo_bytes_.insert(undo_bytes_.end(), t.k_at(s), t.k_at(s) + t.k_pos);
        undo_bytes_.insert(undo_bytes_.end(), t.v_at(s), t.v_at(s) + t.v_pos);
        undo_.push_back(Undo{tier, s, pos, off});
      }
      std::memcpy(t.k_at(s), k + i * t.k_pos, t.k_pos);
      std::memcpy(t.v_at(s), v + i * t.v_pos, t.v_pos);
      if (t.ring > 0) t.lo = std::max(t.lo, pos + 1 - t.ring);
    }
  }

  const KvLayout* L_;
  KvTierStore main_, recent_;
  int64_t length_ = 0;
  bool tx_ = false;
  int64_t tx_base_ = 0, tx_lo_main_ = 0, tx_lo_recent_ = 0;
  std::vector<Undo> undo_;
  std::vector<uint8_t> undo_bytes_;
};

Result<std::shared_ptr<const KvLayout>> KvLayout::create(const AttentionSpec& spec, const CacheOptions& o,
                                                         const kernels::KernelTable& kt) {
  if (spec.n_kv_heads <= 0 || spec.head_dim_k <= 0 || spec.head_dim_v <= 0 || spec.window < 0 ||
      spec.n_kv_heads > 4096 || spec.head_dim_k > 4096 || spec.head_dim_v > 4096 || spec.window > (int64_t{1} << 30))
    return Status::error("[kv_layout] invalid attention geometry: kv heads " + std::to_string(spec.n_kv_heads) +
                         ", head_dim " + std::to_string(spec.head_dim_k) + "/" + std::to_string(spec.head_dim_v) +
                         ", window " + std::to_string(spec.window));
  std::shared_ptr<KvLayout> L(new KvLayout());
  L->spec_ = spec;
  auto k = make_kv_codec(o.type_k, spec.head_dim_k, kt);
  if (!k) return Status::error(k.message() + " (--cache-type-k)");
  auto v = make_kv_codec(o.type_v, spec.head_dim_v, kt);
  if (!v) return Status::error(v.message() + " (--cache-type-v)");
  L->k_codec_ = *k;
  L->v_codec_ = *v;
  if (o.delay < 0 || o.delay > (int64_t{1} << 20))
    return Status::error("[kv_layout] --kv-delay " + std::to_string(o.delay) + " out of range [0, 1048576]");
  const auto is_f16 = [](const std::string& t) { return t == "f16" || t == "f32" || t == "bf16"; };
  if (o.delay > 0) {
    if (is_f16(o.type_k) && is_f16(o.type_v))
      return Status::error("[kv_layout] --kv-delay " + std::to_string(o.delay) +
                           " needs a quantized --cache-type-k or --cache-type-v (both are " + o.type_k + "/" + o.type_v +
                           ")");
    L->delay_ = o.delay;
    L->k_recent_codec_ = make_f16_codec_like(L->k_codec_, kt);
    L->v_recent_codec_ = make_f16_codec_like(L->v_codec_, kt);
  }
  L->ring_ = spec.window;
  const auto quantizes = [&](const std::string& t) { return !is_f16(t); };
  const auto offset_ok = [&](const std::shared_ptr<const std::vector<float>>& o, int64_t hd) {
    return o != nullptr && static_cast<int64_t>(o->size()) == spec.n_kv_heads * hd;
  };
  if (quantizes(o.type_k) && offset_ok(spec.key_offset, spec.head_dim_k)) L->k_offset_ = spec.key_offset->data();
  if (quantizes(o.type_v) && offset_ok(spec.value_offset, spec.head_dim_v)) L->v_offset_ = spec.value_offset->data();
  if (quantizes(o.type_k) && offset_ok(spec.key_scale, spec.head_dim_k)) {
    for (float x : *spec.key_scale)
      if (!(x > 0.0f) || !std::isfinite(x)) return Status::error("[kv_layout] key scales must be positive and finite");
    L->k_scale_ = spec.key_scale->data();
  }
  L->k_pos_bytes_ = L->k_codec_->bytes() * static_cast<size_t>(spec.n_kv_heads);
  L->v_pos_bytes_ = L->v_codec_->bytes() * static_cast<size_t>(spec.n_kv_heads);
  if (L->delay_ > 0) {
    L->kr_pos_bytes_ = L->k_recent_codec_->bytes() * static_cast<size_t>(spec.n_kv_heads);
    L->vr_pos_bytes_ = L->v_recent_codec_->bytes() * static_cast<size_t>(spec.n_kv_heads);
  }
  LayoutInfo& I = L->info_;
  I.kind = LayerKind::kAttention;
  I.name = "kv " + o.type_k + "/" + o.type_v;
  if (spec.window > 0) I.name += " ring " + std::to_string(spec.window);
  if (L->delay_ > 0) I.name += " delay " + std::to_string(L->delay_);
  if (L->k_offset_ != nullptr || L->v_offset_ != nullptr || L->k_scale_ != nullptr) I.name += " centred";
  I.bytes_per_token = static_cast<double>(L->k_pos_bytes_ + L->v_pos_bytes_);
  I.max_positions = spec.window;
  if (L->delay_ > 0) {
    const int64_t pages = (L->delay_ + kPageTokens - 1) / kPageTokens;
    I.fixed_bytes_per_row = pages * kPageTokens * static_cast<int64_t>(L->kr_pos_bytes_ + L->vr_pos_bytes_);
  }
  I.needs_snapshot = false;
  I.any_prefix = spec.window == 0 && L->delay_ == 0;  // a ring or the f16 tier forgets old positions
  I.persistable = true;
  return std::shared_ptr<const KvLayout>(std::move(L));
}

Result<std::unique_ptr<LayerRow>> KvLayout::new_row() const {
  try {
    return std::unique_ptr<LayerRow>(new KvRow(this));
  } catch (const std::bad_alloc&) {
    return Status::error("[kv_layout] out of memory");
  }
}

int64_t KvLayout::bytes_for(int64_t n_tokens) const {
  const auto pages = [](int64_t n) { return (n + kPageTokens - 1) / kPageTokens; };
  const int64_t held = ring_ > 0 ? std::min(n_tokens, ring_) : n_tokens;
  int64_t b = pages(held) * kPageTokens * static_cast<int64_t>(k_pos_bytes_ + v_pos_bytes_);
  if (delay_ > 0) b += pages(std::min(n_tokens, delay_)) * kPageTokens * static_cast<int64_t>(kr_pos_bytes_ + vr_pos_bytes_);
  return b;
}

void KvLayout::encode(ThreadPool& pool, const float* k, const float* v, int64_t M, KvStage& stage) const {
  const int64_t nkv = spec_.n_kv_heads, hk = spec_.head_dim_k, hv = spec_.head_dim_v;
  stage.k.resize(static_cast<size_t>(M) * k_pos_bytes_);
  stage.v.resize(static_cast<size_t>(M) * v_pos_bytes_);
  if (delay_ > 0) {
    stage.k_recent.resize(static_cast<size_t>(M) * kr_pos_bytes_);
    stage.v_recent.resize(static_cast<size_t>(M) * vr_pos_bytes_);
  }
  const auto run = [&](int64_t a, int64_t b) {
    float kc[4096], vc[4096];  // head_dim <= 4096 (create)
    for (int64_t i = a; i < b; ++i) {
      const int64_t m = i / nkv, g = i % nkv;
      const float* kx = k + (m * nkv + g) * hk;
      const float* vx = v + (m * nkv + g) * hv;
      if (k_offset_ != nullptr || k_scale_ != nullptr) {
        for (int64_t d = 0; d < hk; ++d) {
          const float x = kx[d] - (k_offset_ != nullptr ? k_offset_[g * hk + d] : 0.0f);
          kc[d] = k_scale_ != nullptr ? x / k_scale_[g * hk + d] : x;
        }
        kx = kc;
      }
      if (v_offset_ != nullptr) {
        for (int64_t d = 0; d < hv; ++d) vc[d] = vx[d] - v_offset_[g * hv + d];
        vx = vc;
      }
      k_codec_->encode(kx, stage.k.data() + m * k_pos_bytes_ + g * k_codec_->bytes());
      v_codec_->encode(vx, stage.v.data() + m * v_pos_bytes_ + g * v_codec_->bytes());
      if (delay_ > 0) {
        k_recent_codec_->encode(kx, stage.k_recent.data() + m * kr_pos_bytes_ + g * k_recent_codec_->bytes());
        v_recent_codec_->encode(vx, stage.v_recent.data() + m * vr_pos_bytes_ + g * v_recent_codec_->bytes());
      }
    }
  };
  const int64_t n = M * nkv;
  if (n < 8) {
    run(0, n);
  } else {
    pool.run([&](int ith, int nth) {
      auto [a, b] = ThreadPool::split(n, ith, nth);
      if (a < b) run(a, b);
    });
  }
}

KvRowView KvLayout::view(const LayerRow& row, const KvStage& stage, int64_t first, int64_t n_new) const {
  (void)n_new;
  return static_cast<const KvRow&>(row).view(stage, first);
}

void KvLayout::commit(LayerRow& row, const KvStage& stage, int64_t first, int64_t n_new) const {
  static_cast<KvRow&>(row).commit(stage, first, n_new);
}

namespace {
Result<std::shared_ptr<const Layout>> make_kv(const LayerSpec& spec, const CacheOptions& o,
                                              const kernels::KernelTable& kt) {
  auto l = KvLayout::create(spec.attention, o, kt);
  if (!l) return l.status();
  return std::shared_ptr<const Layout>(*l);
}
const bool kRegistered = register_layout(LayerKind::kAttention, &make_kv);
}  // namespace

}  // namespace specula
