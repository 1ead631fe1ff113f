// decoding/eagle3.h — an EAGLE-3 draft head as a draft source (docs/ARCHITECTURE.md,
// Draft sources).
//
// EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language
// Models via Training-Time Test") drafts with one decoder layer that reads three of the
// target's hidden states. The file is llama.cpp's `eagle3` GGUF, as its converter writes
// it (convert_hf_to_gguf.py HEAD_DIR --target-model-dir TARGET_DIR):
//   eagle3.target_layers [3]    the target layers tapped, llama.cpp's "layer input" ids
//                               (L = the residual stream entering layer L; L = n_layers the
//                               final pre-norm state; Batch::tap_layers)
//   eagle3.target_hidden_size   the target's n_embd (Et)
//   eagle3.norm_before_residual, eagle3.norm_before_fc (optional bools, default false)
//   fc.weight [E, 3 Et], enc.output_norm.weight [3 Et] (norm_before_fc only),
//   blk.0.{attn_norm, attn_norm_2 (hidden_norm), ffn_norm}.weight [E],
//   blk.0.attn_{q,k,v}.weight [*, 2 E] (Q/K rows permuted for NORM RoPE, as llama's),
//   blk.0.attn_output, ffn_{gate,up,down}, output_norm.weight [E],
//   output.weight [Vd, E] and token_embd.weight [Vt, E] (optional: the target's are used),
//   d2t (I64 [Vd], optional): draft index -> absolute target token id.
// Or a Hugging Face EAGLE-3 folder (config.json architectures LlamaForCausalLMEagle3,
// Eagle3LlamaForCausalLM or Eagle3DraftModel; model.safetensors with fc, d2t as offsets,
// midlayer.* ...), read as the converter would write it (formats/hf_folder.h); without
// target_hidden_size / eagle_aux_hidden_state_layer_ids the target's hidden size and layers
// 2, N/2, N-3 are used, as the converter does.
// Per token p the target's taps give g_p = fc(concat(taps)) [E]. The head's KV row pairs
// position p with (token x_{p+1}, g_p): its layer reads
//   h = attn(concat(RMSNorm(embd(x_{p+1})), RMSNorm(g_p))) + (norm_before_residual ? RMSNorm(g_p) : g_p)
//   y = h + FFN(RMSNorm(h))                    (the pre-norm output, E)
//   logits = output · RMSNorm(y)               (draft vocabulary, mapped through d2t)
// and y stands in for g at the next draft position (the chain feeds (d_j, y_{j-1})).
// The rounds (the head's own KV rows of pairs (x_{p+1}, g_p) with rollback, greedy drafts
// verified by exact match, zero features where the target computed none) are
// decoding/feature_draft.h's.
// Thread-compatible: one thread (the engine's) calls a source at a time.
#pragma once

#include <memory>
#include <string>

#include "decoding/draft.h"
#include "model/model.h"
#include "specula/status.h"

namespace specula {

// The EAGLE-3 head in the GGUF file or folder at `path`, bound to `target` (which must outlive it; the
// head shares its thread pool and, when the file has none, its token embedding and output
// projection). Its rows use `cache` and hold at most max_length positions.
// Errors (prefixed "[eagle3]"): not an eagle3 file, a missing or misshapen tensor (named),
// target_layers not 3 ids within [0, target layers], a target_hidden_size or vocabulary
// that is not the target's, a d2t id outside the target vocabulary, a target architecture
// that gives no hidden taps.
Result<std::unique_ptr<DraftSource>> make_eagle3_draft(Model& target, const std::string& path, int64_t max_length,
                                                       const CacheOptions& cache = {});

// True when `path` is an EAGLE-3 head: a GGUF file whose general.architecture is "eagle3",
// or a folder whose config.json names an EAGLE-3 architecture.
bool is_eagle3_file(const std::string& path);

}  // namespace specula
