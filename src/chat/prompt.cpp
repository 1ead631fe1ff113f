// chat/prompt.cpp — see prompt.h.
#include "chat/prompt.h"

#include <algorithm>

#include "formats/gguf.h"

namespace specula::chat {

nlohmann::ordered_json template_messages(const ChatTemplate& tpl, const nlohmann::ordered_json& messages) {
  const std::string& src = tpl.source();
  if (!messages.is_array() || src.find("'developer'") != std::string::npos ||
      src.find("\"developer\"") != std::string::npos)
    return messages;
  nlohmann::ordered_json out = messages;
  for (auto& m : out)
    if (m.is_object() && m.contains("role") && m["role"] == "developer") m["role"] = "system";
  return out;
}

std::vector<int32_t> prompt_ids(const tokenizer::Tokenizer& tok, const RenderedPrompt& rendered) {
  const tokenizer::Vocab& vocab = tok.vocab();
  const std::string bos = vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : "";
  const std::string& text = rendered.text;
  const bool has_bos = !bos.empty() && text.rfind(bos, 0) == 0 &&
                       (rendered.untrusted.empty() || rendered.untrusted.front().first >= bos.size());
  return tok.encode_segments(text, rendered.untrusted, /*add_special=*/!has_bos);
}

std::vector<int32_t> end_of_generation_ids(const tokenizer::Vocab& vocab, const gguf::GgufFile& file) {
  std::vector<int32_t> ids;
  if (vocab.valid_id(vocab.eos_id())) ids.push_back(vocab.eos_id());
  if (auto v = file.get_uint("tokenizer.ggml.eot_token_id"); v && vocab.valid_id(static_cast<int32_t>(*v)))
    ids.push_back(static_cast<int32_t>(*v));
  if (auto v = file.get_i32_array("specula.generation.eos_token_ids"))
    for (int32_t id : *v)
      if (vocab.valid_id(id)) ids.push_back(id);
  for (const char* name : {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end|>"}) {
    const int32_t id = vocab.find(name);
    if (id >= 0 && vocab.is_control(id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace specula::chat
