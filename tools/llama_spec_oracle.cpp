// tools/llama_spec_oracle.cpp — llama.cpp's speculative decoding (its common_speculative
// API: draft-mtp, draft-eagle3, draft models) on a prompt given as token ids, greedy,
// printing every draft it made and what the target accepted, as one JSON line:
//   {"prompt":[...],"tokens":[...generated: n-gen or a few more, or up to an end-of-generation token...],
//    "drafts":[{"n":CONTEXT_LENGTH,"draft":[...],"accepted":A}, ...]}
// where n counts the prompt and the tokens emitted so far, the pending one included (the
// token the drafts continue). The oracle of tests/decoding/mtp_test.cpp
// (tools/make_mtp_fixtures.py builds and runs it); not part of specula.
// Build: tools/make_mtp_fixtures.py compiles it against the llama.cpp that
// tools/build_llama_server.sh builds (the llama-cpp-python 0.3.36 sdist's).
// Usage: llama_spec_oracle --ids 5,17,3 --n-gen 24 -m TARGET.gguf --spec-type draft-mtp
//        --spec-draft-n-max 3 --spec-draft-n-min 0 --spec-draft-p-min 0 [other llama.cpp flags]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "arg.h"
#include "common.h"
#include "llama.h"
#include "sampling.h"
#include "speculative.h"

namespace {

std::string join(const std::vector<llama_token>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<llama_token> prompt;
  int n_gen = 24;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ids") == 0 && i + 1 < argc) {
      for (char* p = std::strtok(argv[++i], ","); p != nullptr; p = std::strtok(nullptr, ","))
        prompt.push_back(std::atoi(p));
    } else if (std::strcmp(argv[i], "--n-gen") == 0 && i + 1 < argc) {
      n_gen = std::atoi(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (prompt.size() < 2) {
    std::fprintf(stderr, "need --ids with at least 2 token ids\n");
    return 2;
  }
  common_params params;
  common_init();
  if (!common_params_parse(static_cast<int>(rest.size()), rest.data(), params, LLAMA_EXAMPLE_SPECULATIVE)) return 2;
  params.sampling.temp = 0.0f;  // greedy target
  const auto limits = common_speculative_get_output_limits(params.n_batch, params.n_parallel,
                                                           common_speculative_n_max(&params.speculative));
  params.n_outputs_max = limits.total;
  params.n_outputs_max_per_seq = limits.per_seq;
  llama_backend_init();

  auto init = common_init_from_params(params);
  llama_model* model = init->model();
  llama_context* ctx = init->context();
  if (model == nullptr || ctx == nullptr) return 3;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  common_params params_dft = common_base_params_to_speculative(params);
  auto spec_init = common_speculative_init_from_params(params_dft, model, ctx);
  params.speculative.draft.ctx_tgt = ctx;
  params.speculative.draft.ctx_dft = spec_init->context();
  llama_context* ctx_dft = params.speculative.draft.ctx_dft;
  const bool ckpt_tgt = common_context_can_seq_rm(ctx) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;
  const bool ckpt_dft = common_context_can_seq_rm(ctx_dft) == COMMON_CONTEXT_SEQ_RM_TYPE_FULL;

  const llama_seq_id seq = 0;
  common_sampler_ptr smpl(common_sampler_init(model, params.sampling));
  common_speculative* spec = common_speculative_init(params.speculative, 1);
  if (spec == nullptr) return 4;

  // The prompt but its last token, which stays pending.
  common_batch batch(ctx);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) batch.add(prompt[i], static_cast<llama_pos>(i), seq, false);
  if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) return 5;
  if (!common_speculative_process(spec, batch)) return 6;
  llama_token pending = prompt.back();
  llama_tokens context(prompt.begin(), prompt.end() - 1);  // what the target holds
  int n_past = static_cast<int>(context.size());
  common_speculative_begin(spec, seq, context);

  std::vector<llama_token> out;
  std::string records;
  llama_tokens draft;
  common_prompt_checkpoint ckpt;
  bool redo = false;  // draft holds tokens already known (after a partial acceptance restored a checkpoint)
  while (static_cast<int>(out.size()) < n_gen) {
    if (!redo) {
      ckpt.update_pos(static_cast<int64_t>(context.size()), llama_memory_seq_pos_min(llama_get_memory(ctx), seq),
                      llama_memory_seq_pos_max(llama_get_memory(ctx), seq));
      if (ckpt_dft) ckpt.update_dft(ctx_dft, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
      int n_max = static_cast<int>(llama_n_ctx(ctx)) - n_past - 2;
      n_max = std::max(0, std::min(n_max, n_gen - static_cast<int>(out.size()) - 1));
      draft.clear();
      common_speculative_get_draft_params(spec, seq) = {true, n_max, n_past, pending, &context, &draft};
      common_speculative_draft(spec);
      if (!draft.empty() && ckpt_tgt) ckpt.update_tgt(ctx, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
      if (ckpt_dft) ckpt.load_dft(ctx_dft, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
      llama_memory_seq_rm(llama_get_memory(ctx_dft), seq, ckpt.pos_max + 1, -1);
    }
    batch.clear();
    batch.add(pending, n_past++, seq, true);
    for (size_t i = 0; i < draft.size(); ++i) batch.add(draft[i], n_past + static_cast<llama_pos>(i), seq, true);
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get()) != 0) return 7;
    if (!common_speculative_process(spec, batch)) return 8;
    common_sampler_ptr saved;
    if (ckpt_tgt) saved.reset(common_sampler_clone(smpl.get()));
    const size_t n_draft = draft.size();
    auto ids = common_sampler_sample_and_accept_n(smpl.get(), ctx, draft);
    if (!redo) {
      if (!records.empty()) records += ",";
      records += "{\"n\":" + std::to_string(context.size() + 1) + ",\"draft\":[" + join(draft) +
                 "],\"accepted\":" + std::to_string(ids.size() - 1) + "}";
    }
    if (ckpt_tgt && ids.size() - 1 < n_draft) {  // restore, then verify the known tokens again
      draft = std::move(ids);
      ckpt.load_tgt(ctx, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
      llama_memory_seq_rm(llama_get_memory(ctx), seq, ckpt.pos_max + 1, -1);
      ckpt.load_dft(ctx_dft, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
      llama_memory_seq_rm(llama_get_memory(ctx_dft), seq, ckpt.pos_max + 1, -1);
      context.resize(static_cast<size_t>(ckpt.n_tokens));
      smpl = std::move(saved);
      n_past = static_cast<int>(context.size());
      redo = true;
      continue;
    }
    redo = false;
    common_speculative_accept(spec, seq, static_cast<uint16_t>(ids.size() - 1));
    n_past += static_cast<int>(ids.size()) - 1;
    bool eog = false;
    for (llama_token id : ids) {
      context.push_back(pending);
      pending = id;
      out.push_back(id);
      if (llama_vocab_is_eog(vocab, id)) {
        eog = true;
        break;
      }
    }
    draft.clear();
    llama_memory_seq_rm(llama_get_memory(ctx), seq, n_past, -1);
    llama_memory_seq_rm(llama_get_memory(ctx_dft), seq, n_past, -1);
    if (eog) break;
  }
  std::printf("{\"prompt\":[%s],\"tokens\":[%s],\"drafts\":[%s]}\n", join(prompt).c_str(), join(out).c_str(),
              records.c_str());
  common_speculative_free(spec);
  llama_backend_free();
  return 0;
}
