// chat/builtin_templates.cpp — see builtin_templates.h.
#include "chat/builtin_templates.h"

#include <utility>

namespace specula::chat {

namespace {

struct Builtin {
  const char* name;
  const char* source;
};

// <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
constexpr const char* kChatml = R"({%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%})";

// <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST]
constexpr const char* kLlama2 = R"({%- if messages and messages[0]['role'] == 'system' -%}
{%- set sys = '<<SYS>>\n' + messages[0]['content'] + '\n<</SYS>>\n\n' -%}{%- set msgs = messages[1:] -%}
{%- else -%}{%- set sys = '' -%}{%- set msgs = messages -%}{%- endif -%}
{%- for message in msgs -%}
{%- if message['role'] == 'user' -%}{{- bos_token + '[INST] ' + (sys if loop.first else '') + message['content'] + ' [/INST]' -}}
{%- elif message['role'] == 'assistant' -%}{{- ' ' + message['content'] + ' ' + eos_token -}}{%- endif -%}
{%- endfor -%})";

// <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>... (BOS: the tokenizer's)
constexpr const char* kLlama3 = R"({%- for message in messages -%}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%})";

// <start_of_turn>user\n(system\n\n)content<end_of_turn>\n<start_of_turn>model\n...
constexpr const char* kGemma = R"({%- set ns = namespace(sys='') -%}
{%- for message in messages -%}
{%- if message['role'] == 'system' -%}{%- set ns.sys = ns.sys + message['content'] + '\n\n' -%}
{%- else -%}
{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' + (ns.sys if message['role'] == 'user' else '') + (message['content'] | trim) + '<end_of_turn>\n' -}}
{%- if message['role'] == 'user' -%}{%- set ns.sys = '' -%}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%})";

// <|role|>\ncontent<|end|>\n ... <|assistant|>\n
constexpr const char* kPhi3 = R"({%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})";

// <|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>content<|END_OF_TURN_TOKEN|>...
constexpr const char* kCommandR = R"({%- for message in messages -%}
{%- set role = 'SYSTEM' if message['role'] == 'system' else ('CHATBOT' if message['role'] == 'assistant' else 'USER') -%}
{{- '<|START_OF_TURN_TOKEN|><|' + role + '_TOKEN|>' + (message['content'] | trim) + '<|END_OF_TURN_TOKEN|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%})";

constexpr Builtin kBuiltins[] = {{"chatml", kChatml}, {"llama2", kLlama2}, {"llama3", kLlama3},
                                 {"gemma", kGemma},   {"phi3", kPhi3},     {"command-r", kCommandR}};

}  // namespace

std::string builtin_chat_template_names() {
  std::string out;
  for (const Builtin& b : kBuiltins) out += std::string(out.empty() ? "" : ", ") + b.name;
  return out;
}

Result<std::string> builtin_chat_template(const std::string& name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return std::string(b.source);
  return Status::invalid_argument("[chat] no built-in chat template '" + name + "' (known: " + builtin_chat_template_names() +
                                  "; or give a file with --chat-template-file)");
}

}  // namespace specula::chat
