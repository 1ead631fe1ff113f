// core/fault.cpp — see fault.h.
#include "core/fault.h"

#include <memory>

namespace specula::fault {

std::atomic<bool> g_armed{false};

namespace {
// The hook and its user pointer, published together: a call racing set_hook sees the old
// pair or the new one, never a mix.
struct Installed {
  Hook hook;
  void* user;
};
std::atomic<std::shared_ptr<const Installed>> g_installed;
}  // namespace

const char* point_name(Point p) {
  static const char* const kNames[kPoints] = {"forward",        "mask",   "draft_propose", "draft_commit", "begin",
                                              "resolve",        "deliver", "cache_extract", "cache_write"};
  const int i = static_cast<int>(p);
  return i >= 0 && i < kPoints ? kNames[i] : "?";
}

void set_hook(Hook hook, void* user) {
  g_armed.store(false);
  g_installed.store(hook != nullptr ? std::make_shared<const Installed>(Installed{hook, user}) : nullptr);
  g_armed.store(hook != nullptr);
}

bool fire_slow(Point p) {
  const std::shared_ptr<const Installed> in = g_installed.load();
  return in != nullptr && in->hook(p, in->user);
}

}  // namespace specula::fault
