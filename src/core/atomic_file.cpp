// core/atomic_file.cpp — see atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace specula {

Status write_file_atomic(const std::string& path, std::string_view bytes, const char* component) {
  const std::string tag = std::string("[") + component + "] ";
  // Unique per write: the pid alone is not (threads of one process, containers sharing a
  // file system).
  static std::atomic<uint64_t> counter{std::random_device{}()};
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%d.%llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(0x9E3779B97F4A7C15ULL)));
  const std::string tmp = path + ".tmp." + suffix;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::error(tag + "cannot create " + tmp + ": " + std::strerror(errno));
  (void)::flock(fd, LOCK_EX | LOCK_NB);  // released by close (or by the process's end)
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string e = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::error(tag + "cannot write " + tmp + ": " + e);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::error(tag + "cannot sync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::error(tag + "cannot rename " + tmp + " to " + path + ": " + e);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

bool is_temporary_file_name(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

bool is_abandoned_temporary(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return free;
}

}  // namespace specula
