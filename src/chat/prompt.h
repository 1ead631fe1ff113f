// chat/prompt.h — the chat policies outside the template: a rendered prompt's token ids
// (control tokens only from the template's own text; BOS added only when the template
// did not write it) and which token ids end a generation.
//
// Used by the server (chat routes) and the CLI (generate, eog ids).
#pragma once

#include <cstdint>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specula::gguf {
class GgufFile;
}

namespace specula::chat {

// The messages as `tpl` expects them: OpenAI's newer "developer" role (what its clients now
// send for the system prompt) becomes "system" for a template that does not name the
// developer role itself, so its instructions reach the model instead of vanishing (Qwen's
// template skips roles it does not know) or breaking the turn order (Gemma's).
nlohmann::ordered_json template_messages(const ChatTemplate& tpl, const nlohmann::ordered_json& messages);

// The ids of a rendered chat prompt: what the client wrote (rendered.untrusted) is
// tokenized with special-token parsing off, so a forged "<|im_end|>" stays text; the
// template's own text with it on. Templates usually write the BOS text themselves (then it
// is not added again); one that does not gets the vocabulary's BOS when it adds one — a
// client text that merely starts with the BOS text does not count as the template's.
std::vector<int32_t> prompt_ids(const tokenizer::Tokenizer& tok, const RenderedPrompt& rendered);

// End-of-generation ids for a vocabulary: its EOS, tokenizer.ggml.eot_token_id when
// present, a Hugging Face folder's generation_config.json eos_token_id list
// (specula.generation.eos_token_ids, formats/hf_folder.h), plus control tokens named
// <end_of_turn>, <|im_end|>, <|eot_id|>, <|endoftext|>, <|end|> (what llama.cpp treats as
// end of generation). Sorted, unique.
std::vector<int32_t> end_of_generation_ids(const tokenizer::Vocab& vocab, const gguf::GgufFile& file);

}  // namespace specula::chat
