// core/mmap.h — read-only memory map of a whole file (owning, move-only).
// Does not validate contents; formats/ checks every offset against size().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "specula/status.h"

namespace specula {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Errors: "[mmap] PATH: <strerror>" when the file cannot be opened, stat'ed or mapped.
  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace specula
