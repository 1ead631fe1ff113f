// chat/chat_template.cpp — the ChatTemplate API over the Jinja interpreter
// (jinja/parser.cpp, jinja/eval.cpp): JSON context conversion, defaults that mirror
// transformers' apply_chat_template, and the exception-to-Status boundary. Does not
// evaluate templates itself.
#include "chat/chat_template.h"

#include <new>

#include "formats/gguf.h"
#include "jinja/ast.h"
#include "jinja/eval.h"

namespace specula::chat {
namespace {

// untrusted: strings become untrusted (their text may never yield special tokens).
template <typename Json>
jinja::Value to_value(const Json& j, uint32_t depth, bool untrusted = false) {
  using jinja::Value;
  if (depth > jinja::kMaxValueDepth) throw jinja::JinjaError("context nested deeper than " + std::to_string(jinja::kMaxValueDepth));
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u)) : Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return untrusted ? Value::untrusted_string(j.template get<std::string>()) : Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      jinja::List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(to_value(x, depth + 1, untrusted));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      jinja::Dict d;
      d.keys_untrusted = untrusted;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), to_value(it.value(), depth + 1, untrusted));
      return Value::make_dict(std::move(d));
    }
    default: break;  // binary, discarded
  }
  throw jinja::JinjaError("unsupported JSON value in context");
}

// The context with what a client wrote marked untrusted: every string of "messages"
// except a message's role when it is one of the roles templates branch on (the server
// checks roles), and all of "tools" and "documents".
template <typename Json>
jinja::Value marked_context(const Json& context) {
  jinja::Dict top;
  for (auto it = context.begin(); it != context.end(); ++it) {
    const std::string& key = it.key();
    if (key == "tools" || key == "documents") {
      top.set(key, to_value(it.value(), 1, true));
    } else if (key == "messages" && it.value().is_array()) {
      jinja::List msgs;
      for (const auto& m : it.value()) {
        if (!m.is_object()) {
          msgs.push_back(to_value(m, 2, true));
          continue;
        }
        jinja::Dict d;
        d.keys_untrusted = true;  // a message's keys are the client's too
        for (auto f = m.begin(); f != m.end(); ++f) {
          const bool known_role = f.key() == "role" && f.value().is_string() &&
                                  (f.value() == "system" || f.value() == "user" || f.value() == "assistant" ||
                                   f.value() == "tool" || f.value() == "developer");
          d.set(f.key(), to_value(f.value(), 3, !known_role));
        }
        msgs.push_back(jinja::Value::make_dict(std::move(d)));
      }
      top.set(key, jinja::Value::make_list(std::move(msgs)));
    } else {
      top.set(key, to_value(it.value(), 1));
    }
  }
  return jinja::Value::make_dict(std::move(top));
}

template <typename Json>
Result<std::string> render_json(const jinja::Template& tpl, const ChatTemplateLimits& limits, const Json& context,
                                jinja::Spans* untrusted = nullptr) {
  if (!context.is_object()) return Status::error("[chat_template] context must be a JSON object");
  try {
    jinja::Value ctx = untrusted != nullptr ? marked_context(context) : to_value(context, 0);
    for (const char* key : {"tools", "documents"}) {
      if (ctx.dict->find(key) == nullptr) ctx.dict->set(key, jinja::Value::none());
    }
    if (ctx.dict->find("add_generation_prompt") == nullptr) ctx.dict->set("add_generation_prompt", jinja::Value::boolean(false));
    jinja::RenderLimits rl;
    rl.max_output_bytes = limits.max_output_bytes;
    rl.max_string_bytes = limits.max_string_bytes;
    rl.max_loop_iterations = limits.max_loop_iterations;
    rl.max_steps = limits.max_steps;
    rl.max_depth = limits.max_depth;
    return jinja::render(tpl, ctx, rl, untrusted);
  } catch (const jinja::JinjaError& e) {
    return Status::error(std::string("[chat_template] ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::error("[chat_template] out of memory while rendering");
  } catch (const std::exception& e) {
    return Status::error(std::string("[chat_template] internal error: ") + e.what());
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  ChatTemplate t;
  try {
    t.tpl_ = jinja::parse_template(source);
  } catch (const jinja::JinjaError& e) {
    return Status::error(std::string("[chat_template] ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::error("[chat_template] out of memory while parsing");
  }
  t.source_ = std::move(source);
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_json(*tpl_, limits_, context);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render_json(*tpl_, limits_, context);
}

template <typename Json>
Result<RenderedPrompt> render_marked_json(const jinja::Template& tpl, const ChatTemplateLimits& limits,
                                          const Json& context) {
  RenderedPrompt out;
  auto text = render_json(tpl, limits, context, &out.untrusted);
  if (!text) return text.status();
  out.text = std::move(text).value();
  return out;
}

Result<RenderedPrompt> ChatTemplate::render_marked(const nlohmann::ordered_json& context) const {
  return render_marked_json(*tpl_, limits_, context);
}

Result<RenderedPrompt> ChatTemplate::render_marked(const nlohmann::json& context) const {
  return render_marked_json(*tpl_, limits_, context);
}

std::optional<std::string> chat_template_from_gguf(const gguf::GgufFile& f) {
  const gguf::Value* v = f.find("tokenizer.chat_template");
  if (v == nullptr || v->type != gguf::ValueType::STRING) return std::nullopt;
  return v->str;
}

}  // namespace specula::chat
