// core/strings.h — small text helpers shared across layers.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace specula {

// A comma-separated list as flags and options give it: "a, b,,c,a" -> {"a", "b", "c"}.
// Items are trimmed of spaces and tabs; empty items and repeats are dropped; order is kept.
// `sep`: another separator ('&' for a query string).
inline std::vector<std::string> split_list(std::string_view text, char sep = ',') {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace specula
