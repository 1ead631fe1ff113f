// core/json_text.h — scanning JSON text without parsing it: JsonBrackets tells, byte by
// byte, where arrays and objects open and close outside strings. Used to bound a request
// body's nesting before it is parsed (server/json_util.h) and to find where a JSON value
// ends inside a model's output (chat/tool_calls.h).
// Does not: validate JSON or decode strings (nlohmann::json does).
#pragma once

namespace specula {

// Walks JSON text one byte at a time: step() is +1 at an opening bracket outside strings,
// -1 at a closing one, 0 otherwise.
struct JsonBrackets {
  bool in_string = false, escaped = false;
  int step(char ch) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      return 0;
    }
    if (ch == '"') in_string = true;
    return ch == '[' || ch == '{' ? 1 : ch == ']' || ch == '}' ? -1 : 0;
  }
};

}  // namespace specula
