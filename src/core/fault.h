// core/fault.h — fault injection for tests: a seam at each place a step of the engine can
// fail (the round's forward, grammar masks, the draft source's propose and commit, the
// state transaction's begin and resolve, delivery to a request's consumer, the prompt
// cache's extract and its disk write), so tests can make each fail at chosen moments and
// check what the engine promises (a state failure fails the whole group and publishes
// nothing; a consumer or grammar failure ends only its request; a draft failure costs
// speed — a released draft model rebuilds its state from the context, and with rejection
// sampling its random stream restarts: a seed's text may change, its distribution not; a
// cache failure only costs the cache).
//
// Off unless a test installs a hook: each point then costs one relaxed atomic load.
// Thread-safe: the hook is called from whichever thread reaches the point (the engine
// thread, the mask worker, the prompt cache's writer) and must be thread-safe itself.
// Does not: decide what a failure means (each point's caller does, as for a real failure).
#pragma once

#include <atomic>

namespace specula::fault {

enum class Point : int {
  kForward = 0,   // decoding/round.cpp: the target's forward of a round
  kMask,          // decoding/round.cpp: one row's grammar mask
  kDraftPropose,  // decoding/round.cpp: the draft source's proposals
  kDraftCommit,   // decoding/round.cpp: the draft source's commit after a round
  kBegin,         // decoding/round.cpp: the state transaction's begin
  kResolve,       // decoding/round.cpp: the state transaction's resolve
  kDeliver,       // engine/step.cpp: a token's delivery to the request's consumer
  kCacheExtract,  // engine: a row's state copied for the prompt cache
  kCacheWrite,    // state/prompt_cache.cpp: an entry's file written to the disk tier
};
inline constexpr int kPoints = 9;
const char* point_name(Point p);

// Whether `p` fails now. Called only while a hook is installed.
using Hook = bool (*)(Point p, void* user);
// Installs a hook (null: off), at any time: a point reached meanwhile sees the old hook or
// the new one (with its own user pointer), never a mix.
void set_hook(Hook hook, void* user);

extern std::atomic<bool> g_armed;
bool fire_slow(Point p);
// True when the installed hook says this point fails now.
inline bool fire(Point p) { return g_armed.load(std::memory_order_relaxed) && fire_slow(p); }

}  // namespace specula::fault
