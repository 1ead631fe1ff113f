// decoding/round.cpp — see round.h.
#include "decoding/round.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/fault.h"

namespace specula {

int32_t AdaptiveDepth::next(int32_t max_depth, int64_t limit) {
  if (skip > 0) {  // backing off after rounds that accepted nothing
    --skip;
    return 0;
  }
  if (cap <= 0) cap = max_depth;
  return static_cast<int32_t>(std::max<int64_t>(0, std::min<int64_t>(cap, limit)));
}

void AdaptiveDepth::update(int32_t proposed, int32_t accepted, int32_t max_depth) {
  if (accepted == proposed) {
    cap = std::min(max_depth, cap + 1);
    misses = 0;
  } else if (accepted > 0) {
    cap = std::min(max_depth, accepted + 1);
    misses = 0;
  } else {
    cap = std::max(1, cap / 2);
    ++misses;
    if (misses >= 2) skip = 1 << std::min(misses - 1, 4);
  }
}

Round::Round(Model& model, StateRows& state, DraftSource* draft, std::vector<int32_t> eog)
    : model_(&model), state_(&state), draft_(draft), eog_(std::move(eog)) {
  if (draft_ != nullptr) tap_layers_ = draft_->hidden_taps();
}

Status Round::prepare(std::span<const RoundRow> rows) {
  SPECULA_CHECK(!open_);  // commit() the previous round first
  const int64_t E = model_->info().n_embd;
  const int32_t n_vocab = static_cast<int32_t>(model_->info().n_vocab);
  rows_.assign(rows.begin(), rows.end());
  results_.assign(rows_.size(), RoundResult{});

  // 1. Drafts for decoding rows with depth > 0, all in one call (rows with draft_sampling
  // get sampled drafts and their distributions, the others greedy ones).
  std::vector<std::vector<TokenDist>> draft_q(rows_.size());
  if (draft_ != nullptr) {
    std::vector<DraftRow> drows;
    std::vector<size_t> didx;
    for (size_t i = 0; i < rows_.size(); ++i) {
      const RoundRow& r = rows_[i];
      if (r.chunk > 0 || r.depth <= 0) continue;
      drows.push_back(DraftRow{r.id, r.context, r.depth, r.draft_sampling});
      didx.push_back(i);
    }
    std::vector<std::vector<int32_t>> got;
    std::vector<std::vector<TokenDist>> got_q;
    // A failing draft source only costs speed: those rows decode without drafts.
    // (an injected propose failure: as the source's own, the rows run without drafts)
    if (!drows.empty() && !fault::fire(fault::Point::kDraftPropose) && draft_->draft_sampled(drows, got, got_q).is_ok()) {
      for (size_t j = 0; j < didx.size() && j < got.size(); ++j) {
        auto& prop = results_[didx[j]].drafts;
        prop = std::move(got[j]);
        if (static_cast<int64_t>(prop.size()) > drows[j].max_depth) prop.resize(drows[j].max_depth);
        // Distributions only when there is one per proposal; otherwise exact match.
        if (j < got_q.size() && got_q[j].size() >= prop.size() && !prop.empty()) {
          got_q[j].resize(prop.size());
          draft_q[didx[j]] = std::move(got_q[j]);
        }
      }
    }
  }

  // 1b. Structured outputs: forced tokens are free drafts; other drafts stop where they
  // leave the grammar.
  for (size_t i = 0; i < rows_.size(); ++i) {
    const RoundRow& r = rows_[i];
    if (r.constraint == nullptr || r.chunk > 0 || r.depth <= 0) continue;
    auto& prop = results_[i].drafts;
    std::vector<int32_t> forced = r.constraint->forced_tokens(r.depth);
    if (!forced.empty()) {
      prop = std::move(forced);
      draft_q[i].clear();
    } else if (!prop.empty()) {
      const int32_t n = r.constraint->valid_prefix(prop);
      prop.resize(static_cast<size_t>(n));
      if (!draft_q[i].empty()) draft_q[i].resize(static_cast<size_t>(n));
      if (prop.empty()) draft_q[i].clear();
    }
  }

  // 2. Windows, in row order: decoding rows feed pending + drafts, prompt chunks their chunk.
  ids_.clear();
  brows_.clear();
  counts_.clear();
  offset_.assign(1, 0);
  tx_rows_.clear();
  tx_index_.clear();
  std::vector<int64_t> out_first(rows_.size(), -1), out_count(rows_.size(), 0);
  for (size_t i = 0; i < rows_.size(); ++i) {
    const RoundRow& r = rows_[i];
    brows_.push_back(r.row);
    if (r.chunk > 0) {
      ids_.insert(ids_.end(), r.context.end() - r.chunk, r.context.end());
      counts_.push_back(r.chunk);
      if (r.samples) {
        out_first[i] = static_cast<int64_t>(ids_.size()) - 1;
        out_count[i] = 1;
      }
    } else {
      const auto& prop = results_[i].drafts;
      out_first[i] = static_cast<int64_t>(ids_.size());
      out_count[i] = 1 + static_cast<int64_t>(prop.size());
      ids_.push_back(r.context.back());
      ids_.insert(ids_.end(), prop.begin(), prop.end());
      counts_.push_back(out_count[i]);
      tx_rows_.push_back(r.row);
      tx_index_.push_back(i);
    }
    offset_.push_back(static_cast<int64_t>(ids_.size()));
  }
  if (rows_.empty()) return Status::ok();

  // 3. Transaction, one forward, one projection; the grammar masks meanwhile.
  bool any_constraint = false;
  for (size_t i = 0; i < rows_.size(); ++i) any_constraint |= rows_[i].constraint != nullptr && out_count[i] > 0;
  std::thread mask_worker;
  if (any_constraint)
    mask_worker = std::thread([this, &out_count] {
      try {
        compute_masks(out_count);
      } catch (const std::exception& e) {  // (out of memory): those rows fail, not the process
        mask_errors_.assign(rows_.size(), std::string("[grammar] mask worker: ") + e.what());
      }
    });
  state_->begin(tx_rows_);
  open_ = true;
  Batch batch;
  batch.B = static_cast<int32_t>(rows_.size());
  batch.ids = ids_.data();
  batch.rows = brows_.data();
  batch.n_tokens = counts_.data();
  lora_.clear();
  for (const RoundRow& r : rows_) lora_.push_back(r.lora);
  batch.lora = lora_.data();
  if (!tap_layers_.empty()) {
    batch.tap_layers = tap_layers_.data();
    batch.n_taps = static_cast<int32_t>(tap_layers_.size());
    batch.taps = &taps_;
  }
  Status st = fault::fire(fault::Point::kBegin) ? Status::error("[fault] injected: the state transaction's begin")
                                                : model_->forward(batch, *state_, hidden_);
  if (st.is_ok() && fault::fire(fault::Point::kForward)) st = Status::error("[fault] injected: the forward");
  if (mask_worker.joinable()) {
    const auto w0 = std::chrono::steady_clock::now();
    mask_worker.join();
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  if (!st.is_ok()) {
    std::vector<int64_t> zero(tx_rows_.size(), 0);
    (void)state_->resolve(tx_rows_, zero);  // back to the pre-round state
    open_ = false;
    return st;
  }
  std::vector<int64_t> out_offset(rows_.size(), 0);
  int64_t n_out = 0;
  for (size_t i = 0; i < rows_.size(); ++i) {
    out_offset[i] = n_out;
    n_out += out_count[i];
  }
  if (n_out > 0) {
    logit_hidden_.resize(static_cast<size_t>(n_out * E));
    for (size_t i = 0; i < rows_.size(); ++i)
      if (out_count[i] > 0)
        std::memcpy(logit_hidden_.data() + out_offset[i] * E, hidden_.data() + out_first[i] * E,
                    static_cast<size_t>(out_count[i] * E) * sizeof(float));
    logits_.resize(static_cast<size_t>(n_out) * n_vocab);
    model_->project_logits(logit_hidden_.data(), n_out, logits_.data());
  }
  // Prompt logprobs: the chunk's positions projected a block at a time (a 512-token chunk
  // of a 150k vocabulary would need 300 MB at once).
  for (size_t i = 0; i < rows_.size(); ++i) {
    const RoundRow& r = rows_[i];
    if (r.chunk <= 0 || r.prompt_logprobs < 0) continue;
    const int64_t s = static_cast<int64_t>(r.context.size()) - r.chunk;  // first position of the chunk
    const int64_t first = offset_[i];                                     // its first packed position
    constexpr int64_t kBlock = 16;
    std::vector<float> block;
    for (int64_t j0 = 0; j0 < r.chunk; j0 += kBlock) {
      const int64_t nb = std::min(kBlock, r.chunk - j0);
      block.resize(static_cast<size_t>(nb * n_vocab));
      model_->project_logits(hidden_.data() + (first + j0) * E, nb, block.data());
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t p = s + j0 + j;  // this position predicts token p + 1
        const int32_t next = p + 1 < static_cast<int64_t>(r.context.size()) ? r.context[static_cast<size_t>(p + 1)]
                                                                              : r.next_prompt_token;
        if (next < 0) continue;  // the prompt's last position: it samples
        const float* lg = block.data() + j * n_vocab;
        WalkToken t;
        t.id = next;
        t.logprob = token_logprob(lg, n_vocab, next);
        if (r.prompt_logprobs > 0) t.top = top_logprobs(lg, n_vocab, r.prompt_logprobs);
        results_[i].prompt.push_back(std::move(t));
      }
    }
  }
  // The draft source follows the prompt chunk by chunk. A failure only costs speed.
  if (draft_ != nullptr) {
    std::vector<DraftRow> prompt_rows;
    std::vector<int64_t> first, pos, kept;
    for (size_t i = 0; i < rows_.size(); ++i) {
      const RoundRow& r = rows_[i];
      if (r.chunk <= 0 || !r.speculative) continue;
      prompt_rows.push_back(DraftRow{r.id, r.context, 0});
      first.push_back(offset_[i]);
      pos.push_back(static_cast<int64_t>(r.context.size()) - r.chunk);
      kept.push_back(r.chunk);
    }
    if (!prompt_rows.empty()) {
      const VerifyContext vc = verify_context(first, pos, kept);
      (void)draft_->prefill(prompt_rows, &vc);
    }
  }

  // 4. Walks with each row's own sampler.
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (out_count[i] == 0) continue;
    const RoundRow& r = rows_[i];
    RoundResult& res = results_[i];
    float* lg = logits_.data() + out_offset[i] * n_vocab;
    bool ignore_eos = r.ignore_eos;
    if (r.constraint != nullptr) {
      if (!mask_errors_[i].empty()) {
        res.error = mask_errors_[i];
        res.sampled = true;
        continue;
      }
      const int32_t words = r.constraint->mask_words();
      for (int64_t j = 0; j < out_count[i]; ++j)
        apply_token_mask(lg + j * n_vocab, n_vocab, masks_[i].data() + j * words);
      if (r.constraint->governs_eos()) ignore_eos = false;  // the grammar says where the text ends
    }
    res.walk = draft_q[i].empty() ? speculative_walk(*r.sampler, lg, n_vocab, res.drafts, r.budget, eog_,
                                                     ignore_eos, r.top_logprobs, r.post_sampling)
                                  : speculative_walk_rejection(*r.sampler, lg, n_vocab, res.drafts, draft_q[i],
                                                               r.budget, eog_, ignore_eos, r.top_logprobs,
                                                               r.post_sampling);
    res.sampled = true;
    if (r.constraint != nullptr) {
      // Masked logits give -inf logprobs to refused ids: those are no alternatives.
      for (WalkToken& t : res.walk.tokens)
        t.top.erase(std::remove_if(t.top.begin(), t.top.end(), [](const auto& e) { return std::isinf(e.second); }),
                    t.top.end());
      std::vector<int32_t> emitted;
      for (const WalkToken& t : res.walk.tokens) emitted.push_back(t.id);
      if (Status cs = r.constraint->consume(emitted); !cs.is_ok()) {
        res.error = cs.message();
      } else if (!res.walk.hit_eog && r.constraint->stopped()) {
        res.walk.hit_eog = true;  // complete: the end of generation is forced (and counted
        ++res.walk.sampled;       // as sampled, as when a window samples it)
      }
    }
  }
  return Status::ok();
}

VerifyContext Round::verify_context(std::span<const int64_t> first, std::span<const int64_t> pos,
                                    std::span<const int64_t> kept) const {
  VerifyContext vc;
  vc.hidden = hidden_.data();
  vc.n_embd = model_->info().n_embd;
  if (!tap_layers_.empty()) {
    vc.taps = taps_.data();
    vc.n_taps = static_cast<int32_t>(tap_layers_.size());
  }
  vc.first = first;
  vc.pos = pos;
  vc.kept = kept;
  return vc;
}

void Round::compute_masks(const std::vector<int64_t>& out_count) {
  const auto t0 = std::chrono::steady_clock::now();
  masks_.resize(rows_.size());
  mask_errors_.assign(rows_.size(), std::string());
  for (size_t i = 0; i < rows_.size(); ++i) {
    TokenConstraint* c = rows_[i].constraint;
    if (c == nullptr || out_count[i] == 0) continue;
    const int32_t words = c->mask_words();
    masks_[i].assign(static_cast<size_t>(out_count[i] * words), 0);
    // Position j: after the pending token and drafts 1..j (the drafts were validated).
    const auto& prop = results_[i].drafts;
    int32_t consumed = 0;
    Status st = Status::ok();
    for (int64_t j = 0; j < out_count[i] && st.is_ok(); ++j) {
      st = c->compute_mask(masks_[i].data() + j * words);
      if (st.is_ok() && j + 1 < out_count[i]) {
        st = c->consume(std::span<const int32_t>(&prop[static_cast<size_t>(j)], 1));
        if (st.is_ok()) ++consumed;
      }
    }
    if (Status rb = c->rollback(consumed); st.is_ok() && !rb.is_ok()) st = rb;
    if (st.is_ok() && fault::fire(fault::Point::kMask)) st = Status::error("[grammar] [fault] injected: a mask");
    for (int64_t j = 0; j < out_count[i] && st.is_ok(); ++j) {
      const uint32_t* m = masks_[i].data() + j * words;
      if (std::all_of(m, m + words, [](uint32_t w) { return w == 0; }))
        st = Status::error("[grammar] no token can continue the output");
    }
    if (!st.is_ok()) mask_errors_[i] = st.message();
    n_masks_ += static_cast<uint64_t>(out_count[i]);
  }
  mask_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Status Round::commit(std::span<const int64_t> keep, std::span<const std::span<const int32_t>> contexts) {
  SPECULA_CHECK(keep.size() == rows_.size() && contexts.size() == rows_.size());
  Status st = Status::ok();
  if (open_) {
    std::vector<int64_t> tx_keep(tx_rows_.size());
    for (size_t t = 0; t < tx_index_.size(); ++t) {
      const size_t i = tx_index_[t];
      const int64_t window = offset_[i + 1] - offset_[i];
      tx_keep[t] = std::clamp<int64_t>(keep[i], 0, window);
    }
    st = state_->resolve(tx_rows_, tx_keep);
    if (st.is_ok() && fault::fire(fault::Point::kResolve)) st = Status::error("[fault] injected: resolve");
    open_ = false;
  }
  if (draft_ != nullptr) {
    std::vector<DraftRow> commits;
    std::vector<int64_t> first, pos, kept;
    for (size_t i = 0; i < rows_.size(); ++i) {
      const RoundRow& r = rows_[i];
      if (r.chunk > 0 || contexts[i].empty()) continue;
      if (r.speculative || !results_[i].drafts.empty()) {
        commits.push_back(DraftRow{r.id, contexts[i], 0});
        first.push_back(offset_[i]);
        pos.push_back(static_cast<int64_t>(r.context.size()) - 1);  // the pending token's
        kept.push_back(st.is_ok() ? std::clamp<int64_t>(keep[i], 0, offset_[i + 1] - offset_[i]) : 0);
      }
    }
    if (!commits.empty()) {
      const VerifyContext vc = verify_context(first, pos, kept);
      if (fault::fire(fault::Point::kDraftCommit)) {
        for (const DraftRow& c : commits) draft_->release(c.id);  // (its state is rebuilt: only speed lost)
      } else {
        draft_->commit(commits, &vc);
      }
    }
  }
  return st;
}

}  // namespace specula
