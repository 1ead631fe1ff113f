// decoding/mtp.h — a model's own multi-token-prediction (MTP, "nextn") block as a draft
// source (docs/ARCHITECTURE.md, Draft sources).
//
// Multi-token prediction (Gloeckle et al. 2024, "Better & Faster Large Language Models via
// Multi-token Prediction"; DeepSeek-V3 technical report §2.2; the Qwen3.5 model cards):
// the model ships one extra decoder block trained to predict the token after next from the
// final hidden state and the next token. Here: Qwen3.5 (`qwen35`) GGUF files with
// `qwen35.nextn_predict_layers` = 1, the block stored after the trunk as blk.N (N = the
// trunk's layers), as llama.cpp's converter writes it:
//   blk.N.nextn.eh_proj [E, 2E], nextn.enorm / nextn.hnorm [E], nextn.embed_tokens and
//   nextn.shared_head_head [V, E] (optional: the model's token_embd / output are used),
//   nextn.shared_head_norm [E] (optional: the model's output_norm), and a gated attention
//   decoder block: attn_norm, attn_q [2·H·hd, E] (per head [q | gate]), attn_k, attn_v,
//   attn_q_norm, attn_k_norm, attn_output, post_attention_norm, ffn_gate/up/down.
// The forward follows llama.cpp's src/models/qwen35.cpp graph_mtp: with h_p the target's
// final hidden state at position p after output_norm (VerifyContext::hidden),
//   x   = eh_proj · concat(RMSNorm_enorm(embd(x_{p+1})), RMSNorm_hnorm(h_p))
//   x  += GatedAttention(RMSNorm_attn_norm(x))            (model/arch/qwen35.h)
//   x  += FFN(RMSNorm_post_attention_norm(x))             (SwiGLU)
//   y   = RMSNorm_shared_head_norm(x);  logits = shared_head_head · y
// and y stands in for h at the next draft position, as llama.cpp's draft-mtp feeds it.
// A Hugging Face Qwen3.5 folder's mtp.* tensors load as this block (model/arch/qwen35.cpp).
// The rounds are decoding/feature_draft.h's (pairs (x_{p+1}, h_p) in the block's own KV
// rows, with rollback, after a leading (x_0, zeros) pair as llama.cpp's MTP context has;
// greedy drafts verified by exact match, or drafts drawn for rejection sampling).
// Thread-compatible: one thread (the engine's) calls a source at a time.
#pragma once

#include <memory>

#include "decoding/draft.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

// The MTP block of `target` (which must outlive the source: it shares the target's file,
// thread pool and, where the block has none of its own, its token embedding, output norm
// and output projection). Its rows use `cache` and hold at most max_length positions.
// Errors (prefixed "[mtp]"): a target that is not qwen35, one without MTP layers
// (nextn_predict_layers 0 or absent: "convert it with its MTP layers"), more than one MTP
// layer, a missing or misshapen tensor of the block (named).
Result<std::unique_ptr<DraftSource>> make_mtp_draft(Model& target, int64_t max_length, const CacheOptions& cache = {});

}  // namespace specula
