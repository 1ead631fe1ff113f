// state/layout.cpp — the layout registry and make_layout (see layout.h).
#include "state/layout.h"

#include <cstring>
#include <map>

namespace specula {
namespace {
std::map<LayerKind, LayoutFactory>& registry() {
  static std::map<LayerKind, LayoutFactory> r;
  return r;
}
}  // namespace

bool register_layout(LayerKind kind, LayoutFactory factory) {
  registry()[kind] = factory;
  return true;
}

Result<std::shared_ptr<const Layout>> make_layout(const LayerSpec& spec, const CacheOptions& options,
                                                  const kernels::KernelTable& kt) {
  auto it = registry().find(spec.kind);
  if (it == registry().end()) return Status::error("[layout] no layout registered for this layer kind");
  return it->second(spec, options, kt);
}

void put_u64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  out.append(b, 8);
}

bool get_u64(std::string_view& in, uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(8);
  return true;
}

void put_bytes(std::string& out, const void* p, size_t n) {
  if (n > 0) out.append(static_cast<const char*>(p), n);  // p may be null when n is 0
}

bool get_bytes(std::string_view& in, void* p, size_t n) {
  if (in.size() < n) return false;
  if (n == 0) return true;  // p may be null (an empty vector's data()): memcpy(null, _, 0) is undefined
  std::memcpy(p, in.data(), n);
  in.remove_prefix(n);
  return true;
}

}  // namespace specula
