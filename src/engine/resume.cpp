// engine/resume.cpp — generation checkpoints: storing the state of an in-flight request in
// the prompt cache every EngineOptions::generation_checkpoint tokens, and continuing an
// identical request from it (see engine.h).
//
// The key hashes every EngineRequest field that shapes the output (prompt ids, max_tokens,
// ignore_eos, top_logprobs, speculative), the sampling fields sampling_fields() marks as part
// of it (generation_key_bytes) and the caller's resume_key. The record holds the generated-token count,
// the pending token, the sampler's RNG position and the emitted tokens as delivered (ids,
// logprobs); the sampler's penalty history is rebuilt from the prompt and emitted tokens,
// as it was built. Draft sources start over (speed only; exact-match acceptance keeps the
// tokens).
#include <cstring>

#include "core/fault.h"
#include "engine/engine.h"

namespace specula {
namespace {

struct Hasher {
  uint64_t a = 1469598103934665603ULL, b = 0x9E3779B97F4A7C15ULL;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      a = (a ^ c[i]) * 1099511628211ULL;
      b = (b ^ c[i]) * 0x100000001B3ULL + 0x2545F4914F6CDD1DULL;
    }
  }
  template <class T>
  void pod(const T& v) {
    bytes(&v, sizeof(v));
  }
  std::string hex() const {
    char s[40];
    std::snprintf(s, sizeof(s), "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
    return s;
  }
};

void put_i64(std::string& out, int64_t v) { put_u64(out, static_cast<uint64_t>(v)); }
bool get_i64(std::string_view& in, int64_t& v) {
  uint64_t u;
  if (!get_u64(in, u)) return false;
  v = static_cast<int64_t>(u);
  return true;
}
void put_f32(std::string& out, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_u64(out, u);
}
bool get_f32(std::string_view& in, float& f) {
  uint64_t u;
  if (!get_u64(in, u)) return false;
  const uint32_t w = static_cast<uint32_t>(u);
  std::memcpy(&f, &w, 4);
  return true;
}

}  // namespace

std::string Engine::generation_key(const EngineRequest& r) const {
  if (r.resume_key.empty() || !options_.prompt_cache || options_.generation_checkpoint <= 0) return {};
  if (r.constraint) return {};  // the grammar's state is not part of a checkpoint
  if (has_lora(r)) return {};     // checkpoints hold base-model states
  if (r.prompt_logprobs >= 0) return {};  // a resumed request would not see its prompt again
  if (options_.spec_rejection && options_.draft && r.speculative && r.sampling.temperature > 0.0f) return {};
  Hasher h;
  h.bytes(r.resume_key.data(), r.resume_key.size());
  h.bytes(r.prompt.data(), r.prompt.size() * sizeof(int32_t));
  h.pod(r.max_tokens);
  h.pod(r.top_logprobs);
  if (r.post_sampling_probs) h.pod(r.post_sampling_probs);  // (keys of other requests unchanged)
  h.pod(r.ignore_eos);
  h.pod(r.speculative);
  const std::string sampling = generation_key_bytes(r.sampling);  // the fields sampling/params.cpp marks
  h.bytes(sampling.data(), sampling.size());
  return "gen2-" + h.hex();
}

void Engine::store_generation_checkpoint(size_t index) {
  Active& a = running_[index];
  const int32_t row = static_cast<int32_t>(index);
  if (state_.length(row) + 1 != static_cast<int64_t>(a.context.size())) return;  // not at a step boundary
  if (fault::fire(fault::Point::kCacheExtract)) return;  // (a failed copy only costs the checkpoint)
  auto copy = state_.extract(row);
  if (!copy) return;
  std::string rec;
  put_i64(rec, a.n_generated);
  put_i64(rec, a.next);
  for (uint64_t w : a.sampler.rng_state()) put_u64(rec, w);
  put_u64(rec, a.events.size());
  for (const TokenEvent& ev : a.events) {
    put_i64(rec, ev.id);
    put_f32(rec, ev.logprob);
    put_u64(rec, ev.top.size());
    for (const auto& [id, lp] : ev.top) {
      put_i64(rec, id);
      put_f32(rec, lp);
    }
  }
  std::vector<int32_t> tokens(a.context.begin(), a.context.end() - 1);
  options_.prompt_cache->put_checkpoint(a.gen_key, std::move(tokens), std::move(copy).value(), std::move(rec));
}

bool Engine::resume_generation(Active& a, RowState& row) {
  auto cp = options_.prompt_cache->find_checkpoint(a.gen_key, state_);
  if (!cp) return false;
  const auto& prompt = a.p.request.prompt;
  if (cp->tokens.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), cp->tokens.begin())) return false;
  std::string_view in(cp->record);
  int64_t n_generated, next, n_events;
  std::array<uint64_t, 4> rng;
  if (!get_i64(in, n_generated) || !get_i64(in, next)) return false;
  for (uint64_t& w : rng)
    if (!get_u64(in, w)) return false;
  if (!get_i64(in, n_events) || n_events < 0 || n_events > (int64_t{1} << 24)) return false;
  std::vector<TokenEvent> events(static_cast<size_t>(n_events));
  for (TokenEvent& ev : events) {
    int64_t id, n_top;
    if (!get_i64(in, id) || !get_f32(in, ev.logprob) || !get_i64(in, n_top) || n_top < 0 || n_top > 64) return false;
    ev.id = static_cast<int32_t>(id);
    for (int64_t k = 0; k < n_top; ++k) {
      int64_t tid;
      float lp;
      if (!get_i64(in, tid) || !get_f32(in, lp)) return false;
      ev.top.push_back({static_cast<int32_t>(tid), lp});
    }
  }
  // The emitted tokens are the checkpoint's tokens past the prompt, then the pending one.
  std::vector<int32_t> emitted(cp->tokens.begin() + static_cast<ptrdiff_t>(prompt.size()), cp->tokens.end());
  emitted.push_back(static_cast<int32_t>(next));
  if (!in.empty() || static_cast<int64_t>(events.size()) != static_cast<int64_t>(emitted.size()) ||
      n_generated < static_cast<int64_t>(emitted.size()) || n_generated >= a.p.request.max_tokens)
    return false;
  for (size_t i = 0; i < emitted.size(); ++i)
    if (events[i].id != emitted[i]) return false;
  // Replay the emitted tokens to the consumer, as they were delivered. (A consumer that
  // stops during the replay — it cannot for an identical request — ends the request.)
  for (const TokenEvent& ev : events) {
    bool keep = false;
    try {
      keep = a.p.sink->on_tokens(std::span<const TokenEvent>(&ev, 1));
    } catch (...) {
      keep = false;
    }
    if (!keep) {
      a.stop_after_replay = true;
      break;
    }
  }
  // Restore: state, context, sampler (history rebuilt from the tokens; RNG position).
  Sampler sampler(a.p.request.sampling);
  for (int32_t id : prompt) sampler.accept_prompt(id);
  for (int32_t id : emitted) sampler.accept(id);
  sampler.set_rng_state(rng);
  a.sampler = std::move(sampler);
  a.context = cp->tokens;
  a.context.push_back(static_cast<int32_t>(next));
  a.next = static_cast<int32_t>(next);
  a.n_generated = n_generated;
  a.events = std::move(events);
  a.prefilled = static_cast<int64_t>(prompt.size());
  a.cached = static_cast<int64_t>(prompt.size());
  a.next_gen_checkpoint = (n_generated / options_.generation_checkpoint + 1) * options_.generation_checkpoint;
  row = std::move(cp->state);
  return true;
}

}  // namespace specula
