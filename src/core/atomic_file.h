// core/atomic_file.h — files written whole or not at all, and the leftovers of writers that
// were killed mid-write: the prompt cache's disk tier (state/prompt_cache.h) and the
// Responses API's store (server/response_store.h) both write this way.
//
// A write goes to "<path>.tmp.<pid>.<n>" in the same folder, held with an exclusive flock
// while it is written, then fsync, rename over `path`, fsync of the folder (POSIX rename is
// atomic within one file system: a reader sees the old file or the new one). A writer
// killed mid-write leaves its temporary file behind, unlocked: is_abandoned_temporary()
// tells it from one a live process — of any pid namespace sharing the folder — is writing.
// Thread-safe (no shared state but a counter).
// Does not: lock `path` itself (two writers of one path: the last rename wins).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "specula/status.h"

namespace specula {

// Writes `bytes` to `path` atomically. Errors name the step and the file, prefixed with
// "[component] " (e.g. "[prompt_cache] cannot write DIR/x.spc.tmp.12.ab: No space left").
Status write_file_atomic(const std::string& path, std::string_view bytes, const char* component);

// Whether `name` (a file name) is one of write_file_atomic's temporary files.
bool is_temporary_file_name(const std::string& name);

// Whether the temporary file at `path` has no live writer (nobody holds its flock): a killed
// writer's, safe to delete. On a file system without flock every lock succeeds: a live
// writer whose file is deleted then loses that one write (its rename fails), nothing more.
bool is_abandoned_temporary(const std::filesystem::path& path);

}  // namespace specula
