// core/fault.cpp — see fault.h.
#include "core/fault.h"

namespace specula::fault {

std::atomic<bool> g_armed{false};

namespace {
std::atomic<Hook> g_hook{nullptr};
std::atomic<void*> g_user{nullptr};
}  // namespace

const char* point_name(Point p) {
  static const char* const kNames[kPoints] = {"forward",        "mask",   "draft_propose", "draft_commit", "begin",
                                              "resolve",        "deliver", "cache_extract", "cache_write"};
  const int i = static_cast<int>(p);
  return i >= 0 && i < kPoints ? kNames[i] : "?";
}

void set_hook(Hook hook, void* user) {
  g_user.store(user);
  g_hook.store(hook);
  g_armed.store(hook != nullptr);
}

bool fire_slow(Point p) {
  const Hook h = g_hook.load();
  return h != nullptr && h(p, g_user.load());
}

}  // namespace specula::fault
