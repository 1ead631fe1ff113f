// chat/builtin_templates.h — chat templates by name, for models whose file has none or a
// wrong one (`specula serve --chat-template NAME`, as llama-server's): chatml, llama2,
// llama3, gemma, phi3, command-r. Each is a Jinja source written from the format's
// published layout (ChatML: OpenAI's; Llama 2 / 3: Meta's model cards; Gemma: Google's;
// Phi-3: Microsoft's; Command-R: Cohere's), rendered like a model's own template
// (chat/chat_template.h).
#pragma once

#include <string>

#include "specula/status.h"

namespace specula::chat {

// The Jinja source of the template `name`. Errors: kInvalidArgument naming the known ones.
Result<std::string> builtin_chat_template(const std::string& name);

// "chatml, llama2, ..." (for help texts and errors).
std::string builtin_chat_template_names();

}  // namespace specula::chat
