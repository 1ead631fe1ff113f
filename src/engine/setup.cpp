// engine/setup.cpp — see setup.h.
#include "engine/setup.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace specula {

Result<std::shared_ptr<DraftSource>> make_draft_source(const std::string& spec, const std::string& draft_model_path,
                                                       Model& target, int64_t n_ctx) {
  if (!spec.empty() && spec != "ngram" && spec != "draft" && spec != "eagle3" && spec != "mtp" && spec != "none")
    return Status::invalid_argument("[setup] --spec must be ngram, draft, eagle3, mtp or none, got '" + spec + "'");
  if (spec == "none" || (spec.empty() && draft_model_path.empty())) return std::shared_ptr<DraftSource>();
  if (spec == "ngram") return std::shared_ptr<DraftSource>(make_ngram_draft());
  if (spec == "mtp") {
    if (!draft_model_path.empty())
      return Status::invalid_argument("[setup] --spec mtp drafts with the model's own MTP layers: drop --draft-model");
    auto d = make_mtp_draft(target, n_ctx);
    if (!d) return d.status();
    return std::shared_ptr<DraftSource>(std::move(d).value());
  }
  if (draft_model_path.empty())
    return Status::invalid_argument("[setup] --spec " + (spec.empty() ? std::string("draft") : spec) +
                                    " needs --draft-model FILE");
  // An EAGLE-3 head given as --draft-model is one, whichever --spec named it.
  const bool eagle3 = is_eagle3_file(draft_model_path);
  if (spec == "eagle3" || eagle3) {
    if (!eagle3)
      return Status::invalid_argument("[setup] --spec eagle3: " + draft_model_path +
                                      " is not an EAGLE-3 head (a GGUF with general.architecture 'eagle3')");
    auto d = make_eagle3_draft(target, draft_model_path, n_ctx);
    if (!d) return d.status();
    return std::shared_ptr<DraftSource>(std::move(d).value());
  }
  ModelOptions mo;
  mo.pool = target.pool();
  auto dm = load_model(draft_model_path, mo);
  if (!dm) return dm.status();
  SPECULA_RETURN_IF_ERROR(check_same_vocabulary(target, **dm));
  auto d = make_model_draft(std::move(dm).value(), n_ctx);
  if (!d) return d.status();
  return std::shared_ptr<DraftSource>(std::move(d).value());
}

std::string prompt_cache_fingerprint(const std::string& model_path, const Model& model, const CacheOptions& cache) {
  uint64_t h = 1469598103934665603ULL;
  const auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 1099511628211ULL;
    }
  };
  std::error_code ec;
  std::vector<std::string> files;
  uintmax_t size = 0;
  const bool folder = std::filesystem::is_directory(model_path, ec);
  if (folder) {
    for (const auto& e : std::filesystem::directory_iterator(model_path, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(model_path);
  }
  std::vector<char> buf(1 << 20);
  for (const std::string& f : files) {
    const uintmax_t n = std::filesystem::file_size(f, ec);
    size += ec ? 0 : n;
    if (folder) {
      const std::string name = std::filesystem::path(f).filename().string();
      mix(name.data(), name.size());
    }
    std::ifstream in(f, std::ios::binary);
    for (int k = 0; k < 4 && in; ++k) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      mix(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  auto st = new_state(model, cache, 16);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return "specula-1 model " + std::string(hex) + " " + std::to_string(size) + " bytes; layouts " +
         (st ? st->describe() : std::string("?"));
}

int64_t default_prompt_cache_ram_mib() {
  const int64_t phys = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  return std::min<int64_t>(8192, phys / 4 / (1 << 20));
}

}  // namespace specula
