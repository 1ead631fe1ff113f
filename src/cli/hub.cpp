// cli/hub.cpp — `specula pull ORG/NAME`: the Hugging Face Hub's HTTP API over cpp-httplib,
// into the hub cache layout (see hub.h for the protocol, the layout and what is refused).
// Does not parse model files: what it downloads is opened later by model/hf_folder.
#include "cli/hub.h"

#include "cli/hub_http.h"
#include "core/runtime_config.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

namespace specula::hub {
namespace {

namespace fs = std::filesystem;

using namespace detail;

// ---- cache ------------------------------------------------------------------------------

// Holds flock() on a lock file while one blob downloads (two pulls of one repo at once).
class FileLock {
 public:
  explicit FileLock(const fs::path& p) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

Status write_file_atomic(const fs::path& p, const std::string& text) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  const fs::path tmp = p.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return Status::error("[hub] cannot write " + tmp.string());
  }
  fs::rename(tmp, p, ec);
  if (ec) return Status::error("[hub] cannot rename " + tmp.string() + " to " + p.string() + ": " + ec.message());
  return Status::ok();
}

// snapshots/<commit>/<rfilename> -> ../../blobs/<etag> (one more ../ per folder in rfilename).
Status link_pointer(const fs::path& snapshot, const std::string& rfilename, const fs::path& blob) {
  std::error_code ec;
  const fs::path pointer = snapshot / rfilename;
  fs::create_directories(pointer.parent_path(), ec);
  if (ec) return Status::error("[hub] cannot create " + pointer.parent_path().string() + ": " + ec.message());
  std::string target = "../../";
  for (char c : rfilename)
    if (c == '/') target += "../";
  target += "blobs/" + blob.filename().string();
  const fs::path tmp = pointer.string() + ".link" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) {  // a file system without symlinks: a copy
    ec.clear();
    fs::copy_file(blob, tmp, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::error("[hub] cannot link or copy " + blob.string() + " to " + pointer.string() + ": " + ec.message());
  }
  fs::rename(tmp, pointer, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::error("[hub] cannot create " + pointer.string() + " (is it a folder?)");
  }
  return Status::ok();
}

bool valid_commit(std::string_view c) {
  return !c.empty() && c.size() <= 64 && std::all_of(c.begin(), c.end(), is_alnum);
}

// ---- one file ---------------------------------------------------------------------------

struct FileMeta {
  std::string etag;  // normalized
  int64_t size = -1;
  Url location;      // where the bytes are fetched from
};

class Puller {
 public:
  Puller(const RepoId& id, const PullOptions& o, const Url& endpoint, const std::string& token)
      : id_(id), o_(o), endpoint_(endpoint), http_{o, endpoint.origin(), token} {}

  Result<nlohmann::json> repo_info() {
    Url u = endpoint_;
    u.path = base_path() + "/api/models/" + id_.repo() + "/revision/" + url_encode(id_.revision, false);
    const std::string what = "repository " + id_.repo() + " (revision " + id_.revision + ")";
    for (int hop = 0;; ++hop) {
      Reply r = http_.send(u, false, http_.headers_for(u), nullptr, nullptr, kMaxJsonBytes);
      if (!r.responded || r.error != httplib::Error::Success) return http_.transport_error(u, r, what);
      if (r.status >= 300 && r.status < 400) {
        if (hop >= o_.max_redirects)
          return Status::error("[hub] " + what + ": more than " + std::to_string(o_.max_redirects) + " redirects from " + u.str());
        auto next = resolve_location(u, header(r.headers, "Location"));
        if (!next) return next.status();
        u = *next;
        continue;
      }
      if (r.status == 404 || r.status == 401)
        return Status::error("[hub] " + what + " not found at " + o_endpoint() + " (" + Http::status_text(r) + ")");
      if (r.status != 200) return Status::error("[hub] " + what + ": " + Http::status_text(r) + " from " + u.str());
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return Status::error("[hub] " + what + ": the answer of " + u.str() + " is not a JSON object");
      return j;
    }
  }

  // HEAD: the etag, the size and where to GET the bytes (relative redirects followed).
  Result<FileMeta> file_meta(const std::string& commit, const std::string& rfilename) {
    Url u = endpoint_;
    u.path = base_path() + "/" + id_.repo() + "/resolve/" + commit + "/" + url_encode(rfilename, true);
    const std::string what = id_.repo() + ": " + rfilename;
    for (int hop = 0;; ++hop) {
      Reply r = http_.send(u, true, http_.headers_for(u), nullptr, nullptr, kMaxErrorBody);
      if (!r.responded || r.error != httplib::Error::Success) return http_.transport_error(u, r, what);
      const bool redirect = r.status >= 300 && r.status < 400;
      const std::string loc = header(r.headers, "Location");
      if (redirect && !loc.empty() && loc.find("://") == std::string::npos && loc.rfind("//", 0) != 0) {
        if (hop >= o_.max_redirects)
          return Status::error("[hub] " + what + ": more than " + std::to_string(o_.max_redirects) + " redirects from " + u.str());
        auto next = resolve_location(u, loc);
        if (!next) return next.status();
        u = *next;
        continue;
      }
      if (r.status == 404)
        return Status::error("[hub] " + what + ": not found at commit " + commit + " (" + Http::status_text(r) + " from " + u.str() + ")");
      if (!redirect && r.status != 200) return Status::error("[hub] " + what + ": " + Http::status_text(r) + " from " + u.str());
      FileMeta m;
      std::string raw = header(r.headers, "X-Linked-Etag");
      if (raw.empty()) raw = header(r.headers, "ETag");
      if (raw.empty()) return Status::error("[hub] " + what + ": the server sent no ETag (from " + u.str() + ")");
      m.etag = normalize_etag(raw);
      if (m.etag.empty()) return Status::error("[hub] " + what + ": unusable ETag '" + printable(raw) + "'");
      m.size = header_int(r.headers, "X-Linked-Size");
      if (m.size < 0 && !redirect) m.size = header_int(r.headers, "Content-Length");
      if (redirect) {
        auto next = resolve_location(u, loc);
        if (!next) return next.status();
        m.location = *next;
      } else {
        m.location = u;
      }
      return m;
    }
  }

  // Fetches m into `incomplete` (resuming what is there), then checks its size and sha256.
  Status download(const std::string& rfilename, const FileMeta& m, const fs::path& incomplete, int64_t& fetched) {
    const std::string what = id_.repo() + ": " + rfilename;
    std::error_code ec;
    for (int attempt = 0;; ++attempt) {
      int64_t have = fs::exists(incomplete, ec) ? static_cast<int64_t>(fs::file_size(incomplete, ec)) : 0;
      if (ec) have = 0;
      if (m.size >= 0 && have > m.size) {
        fs::resize_file(incomplete, 0, ec);
        have = 0;
      }
      if (m.size >= 0 && have == m.size && have > 0) break;  // an earlier run got every byte
      std::FILE* f = std::fopen(incomplete.c_str(), "ab");
      if (f == nullptr) return Status::error("[hub] cannot write " + incomplete.string() + ": " + std::strerror(errno));
      if (have > 0) log("[hub] " + rfilename + ": resuming at byte " + std::to_string(have));
      int64_t pos = have;
      const int64_t start = have;
      const double t0 = now_s();
      double last_print = t0;
      Status failure;
      std::string sink_error;  // why the sink stopped the transfer
      bool discard = false;    // what arrived cannot be trusted to resume from
      Url u = m.location;
      Reply r;
      for (int hop = 0;; ++hop) {
        httplib::Headers h = http_.headers_for(u);
        if (pos > 0) h.emplace("Range", "bytes=" + std::to_string(pos) + "-");
        const int64_t asked = pos;
        auto on_response = [&](Reply& rep) {
          if (rep.status == 206) {
            const std::string cr = header(rep.headers, "Content-Range");
            const size_t sp = cr.find(' '), dash = cr.find('-');
            const std::string first = sp != std::string::npos && dash != std::string::npos && dash > sp
                                          ? cr.substr(sp + 1, dash - sp - 1)
                                          : std::string();
            if (first != std::to_string(asked)) {
              rep.cancel_reason = "asked for bytes from " + std::to_string(asked) + ", got Content-Range '" +
                                  printable(cr) + "'";
              discard = true;
              return false;
            }
          } else if (rep.status == 200 && asked > 0) {
            log("[hub] " + rfilename + ": the server does not resume (HTTP 200 to a Range request); starting over");
            if (::ftruncate(::fileno(f), 0) != 0) {
              rep.cancel_reason = "cannot truncate " + incomplete.string();
              return false;
            }
            pos = 0;
          }
          return true;
        };
        auto sink = [&](const char* data, size_t n) {
          if (std::fwrite(data, 1, n, f) != n) {
            sink_error = "cannot write " + incomplete.string() + ": " + std::strerror(errno);
            return false;
          }
          pos += static_cast<int64_t>(n);
          fetched += static_cast<int64_t>(n);
          if (m.size >= 0 && pos > m.size) {
            sink_error = "the server sent more than the announced " + std::to_string(m.size) + " bytes";
            discard = true;
            return false;
          }
          const double t = now_s();
          if (t - last_print >= 2.0) {
            last_print = t;
            progress(rfilename, pos, m.size, static_cast<double>(pos - start) / std::max(1e-9, t - t0));
          }
          return true;
        };
        r = http_.send(u, false, h, on_response, sink, kMaxErrorBody);
        if (!sink_error.empty()) r.cancel_reason = sink_error;
        if (r.responded && r.status >= 300 && r.status < 400 && r.error == httplib::Error::Success) {
          if (hop >= o_.max_redirects) {
            failure = Status::error("[hub] " + what + ": more than " + std::to_string(o_.max_redirects) +
                                    " redirects from " + u.str());
            break;
          }
          auto next = resolve_location(u, header(r.headers, "Location"));
          if (!next) {
            failure = next.status();
            break;
          }
          u = *next;
          continue;
        }
        break;
      }
      std::fflush(f);
      const bool write_ok = std::ferror(f) == 0;
      std::fclose(f);
      if (!failure.is_ok()) return failure;
      if (!write_ok) return Status::error("[hub] cannot write " + incomplete.string());
      if (r.responded && r.status == 416 && pos > 0) {  // the partial file does not fit what is served now
        fs::resize_file(incomplete, 0, ec);
        if (attempt < o_.retries) continue;
      }
      if (r.responded && (r.status < 200 || r.status >= 300)) {
        if (r.status == 404)
          return Status::error("[hub] " + what + ": not found (" + Http::status_text(r) + " from " + u.str() + ")");
        return Status::error("[hub] " + what + ": " + Http::status_text(r) + " from " + u.str());
      }
      if (r.error == httplib::Error::Success && r.cancel_reason.empty()) {
        const double dt = std::max(1e-9, now_s() - t0);
        progress(rfilename, pos, m.size, static_cast<double>(pos - start) / dt);
        break;
      }
      // A broken transfer: what arrived stays in the .incomplete file; resume from there.
      Status st = http_.transport_error(u, r, what);
      if (discard) {
        fs::remove(incomplete, ec);
        return Status::error(st.message() + " (partial file removed)");
      }
      if (!r.cancel_reason.empty() || attempt >= o_.retries)
        return Status::error(st.message() + " after " + std::to_string(pos) + " bytes (" + incomplete.string() +
                             " is kept; pull again to resume)");
      log("[hub] " + rfilename + ": connection lost after " + std::to_string(pos) + " bytes (" +
          httplib::to_string(r.error) + "); retrying");
      std::this_thread::sleep_for(std::chrono::milliseconds(200 * (attempt + 1)));
    }
    // Checks: the announced size, and the sha256 an LFS etag is.
    const int64_t got = static_cast<int64_t>(fs::file_size(incomplete, ec));
    if (ec) return Status::error("[hub] cannot stat " + incomplete.string() + ": " + ec.message());
    if (m.size >= 0 && got != m.size) {
      fs::remove(incomplete, ec);
      return Status::error("[hub] " + what + ": got " + std::to_string(got) + " bytes, the server announced " +
                           std::to_string(m.size) + " (partial file removed)");
    }
    if (m.etag.size() == 64 && is_hex(m.etag)) {
      auto sha = sha256_file(incomplete.string());
      if (!sha) return sha.status();
      if (*sha != m.etag) {
        fs::remove(incomplete, ec);
        return Status::error("[hub] " + what + ": sha256 mismatch: the download's is " + *sha +
                             ", the server's etag says " + m.etag + " (file removed; pull again)");
      }
    }
    return Status::ok();
  }

  void log(const std::string& line) const {
    if (o_.log == nullptr) return;
    std::fprintf(o_.log, "%s\n", line.c_str());
    std::fflush(o_.log);
  }

  void progress(const std::string& rfilename, int64_t pos, int64_t size, double bytes_per_s) const {
    std::string line = "[hub] " + rfilename + ": " + human_bytes(static_cast<uint64_t>(pos));
    if (size > 0) {
      char pct[32];
      std::snprintf(pct, sizeof(pct), " (%.0f%%)", 100.0 * static_cast<double>(pos) / static_cast<double>(size));
      line += " / " + human_bytes(static_cast<uint64_t>(size)) + pct;
    }
    char rate[32];
    std::snprintf(rate, sizeof(rate), ", %.1f MB/s", bytes_per_s / 1e6);
    log(line + rate);
  }

  std::string o_endpoint() const { return endpoint_.shown_origin() + base_path(); }

 private:
  std::string base_path() const {
    std::string p = endpoint_.path;
    while (!p.empty() && p.back() == '/') p.pop_back();
    return p;
  }

  const RepoId& id_;
  const PullOptions& o_;
  Url endpoint_;
  Http http_;
};

}  // namespace

// ---- public -----------------------------------------------------------------------------

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

Result<std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("[hub] cannot read " + path);
  Sha256 h;
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) return Status::error("[hub] error reading " + path);
  return h.hex();
}

std::string normalize_etag(std::string_view e) {
  while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
  while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
  if (e.size() >= 2 && (e[0] == 'W' || e[0] == 'w') && e[1] == '/') e.remove_prefix(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  if (e.empty() || e.size() > 256 || e.front() == '.') return "";
  for (char c : e)
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-') return "";
  return std::string(e);
}

namespace {
bool valid_repo_part(std::string_view s) {
  if (s.empty() || s.size() > 96) return false;
  if (s.front() == '.' || s.front() == '-' || s.back() == '.' || s.back() == '-') return false;
  if (s.find("..") != std::string_view::npos || s.find("--") != std::string_view::npos) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; });
}
}  // namespace

Result<RepoId> parse_repo_id(const std::string& s) {
  RepoId id;
  std::string repo = s;
  if (const size_t at = s.find('@'); at != std::string::npos) {
    repo = s.substr(0, at);
    id.revision = s.substr(at + 1);
    const std::string& r = id.revision;
    const bool ok = !r.empty() && r.size() <= 256 && r.front() != '/' && r.back() != '/' &&
                    r.find("..") == std::string::npos && r.find("//") == std::string::npos &&
                    std::all_of(r.begin(), r.end(), [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-' || c == '/'; });
    if (!ok) return Status::error("[hub] '" + printable(s) + "': bad revision after '@'");
  }
  const size_t slash = repo.find('/');
  if (slash == std::string::npos || repo.find('/', slash + 1) != std::string::npos)
    return Status::error("[hub] '" + printable(s) + "' is not ORG/NAME[@REVISION]");
  id.org = repo.substr(0, slash);
  id.name = repo.substr(slash + 1);
  if (!valid_repo_part(id.org) || !valid_repo_part(id.name))
    return Status::error("[hub] '" + printable(s) +
                         "' is not ORG/NAME[@REVISION] (names are letters, digits, '.', '_', '-')");
  return id;
}

bool is_repo_name(const std::string& s) {
  std::error_code ec;
  return parse_repo_id(s).is_ok() && !fs::exists(s, ec);
}

std::string default_cache_dir() { return runtime_config().cache_dir + "/hub"; }

std::string default_endpoint() { return runtime_config().hf_endpoint; }

Status check_rfilename(const std::string& f) {
  const std::string shown = "'" + printable(f) + "'";
  if (f.empty() || f.size() > 4096) return Status::error("[hub] refusing file name " + shown + ": empty or too long");
  if (f.front() == '/') return Status::error("[hub] refusing file name " + shown + ": an absolute path");
  for (char c : f) {
    if (c == '\\') return Status::error("[hub] refusing file name " + shown + ": holds a backslash");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return Status::error("[hub] refusing file name " + shown + ": holds a control character");
  }
  size_t b = 0;
  for (;;) {
    const size_t e = f.find('/', b);
    const std::string part = f.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (part.empty() || part == "." || part == "..")
      return Status::error("[hub] refusing file name " + shown + ": a path component is empty, '.' or '..'");
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return Status::ok();
}

bool wanted(const std::string& f, const std::vector<std::string>& include) {
  if (!include.empty()) {
    for (const std::string& g : include)
      if (::fnmatch(g.c_str(), f.c_str(), 0) == 0) return true;
    return false;
  }
  static const char* kDefault[] = {"config.json",          "generation_config.json", "tokenizer.json",
                                   "tokenizer_config.json", "chat_template.jinja",    "special_tokens_map.json",
                                   "model.safetensors.index.json"};
  for (const char* n : kDefault)
    if (f == n) return true;
  return f.size() > 12 && f.compare(f.size() - 12, 12, ".safetensors") == 0;
}

Result<std::string> cached_snapshot(const std::string& name, const std::string& cache_dir) {
  auto id = parse_repo_id(name);
  if (!id) return id.status();
  const fs::path repo = fs::path(cache_dir.empty() ? default_cache_dir() : cache_dir) / id->folder();
  std::error_code ec;
  std::string commit;
  const fs::path ref = repo / "refs" / id->revision;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    while (!commit.empty() && (commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
    if (!valid_commit(commit)) return Status::error("[hub] " + ref.string() + ": not a commit id");
  } else if (valid_commit(id->revision)) {
    commit = id->revision;
  }
  const fs::path snap = repo / "snapshots" / commit;
  if (commit.empty() || !fs::is_directory(snap, ec))
    return Status::error("[hub] " + id->repo() + "@" + id->revision + " is not in the cache " + repo.parent_path().string() +
                         " (run specula pull " + name + ")");
  return snap.string();
}

Result<PullReport> pull(const std::string& name, const PullOptions& o) {
  auto id = parse_repo_id(name);
  if (!id) return id.status();
  auto endpoint = parse_url(o.endpoint.empty() ? default_endpoint() : o.endpoint);
  if (!endpoint) return Status::error(endpoint.message() + " (the endpoint)");
  const std::string token = o.token.empty() ? runtime_config().hf_token : o.token;
  for (char c : token)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return Status::error("[hub] HF_TOKEN holds a control character");

  Puller p(*id, o, *endpoint, token);
  const std::string what = "repository " + id->repo() + " (revision " + id->revision + ")";
  auto info = p.repo_info();
  if (!info) return info.status();
  const nlohmann::json& j = *info;
  if (!j.contains("sha") || !j["sha"].is_string() || !valid_commit(j["sha"].get<std::string>()))
    return Status::error("[hub] " + what + ": the API answer has no 'sha' commit id (1-64 letters and digits)");
  if (!j.contains("siblings") || !j["siblings"].is_array())
    return Status::error("[hub] " + what + ": the API answer has no 'siblings' list");
  PullReport rep;
  rep.commit = j["sha"].get<std::string>();
  std::vector<std::string> files;
  for (const auto& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
      return Status::error("[hub] " + what + ": a 'siblings' entry has no 'rfilename' string");
    const std::string f = s["rfilename"].get<std::string>();
    if (!wanted(f, o.include)) continue;
    SPECULA_RETURN_IF_ERROR(check_rfilename(f));
    files.push_back(f);
  }
  if (files.empty())
    return Status::error("[hub] " + what + ": no file to download (" + std::to_string(j["siblings"].size()) +
                         " files in the repository, none wanted" + (o.include.empty() ? "; see --include" : " by --include") + ")");

  const fs::path cache = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  const fs::path repo = cache / id->folder();
  const fs::path blobs = repo / "blobs", snapshot = repo / "snapshots" / rep.commit;
  std::error_code ec;
  fs::create_directories(blobs, ec);
  if (ec) return Status::error("[hub] cannot create " + blobs.string() + ": " + ec.message());
  fs::create_directories(snapshot, ec);
  if (ec) return Status::error("[hub] cannot create " + snapshot.string() + ": " + ec.message());
  p.log("[hub] " + id->repo() + "@" + id->revision + " = commit " + rep.commit + ": " + std::to_string(files.size()) +
        " files from " + p.o_endpoint() + " into " + repo.string());

  for (const std::string& f : files) {
    ++rep.files;
    if (fs::is_regular_file(snapshot / f, ec)) {  // follows the link to its blob
      p.log("[hub] " + f + ": up to date");
      continue;
    }
    auto meta = p.file_meta(rep.commit, f);
    if (!meta) return meta.status();
    const fs::path blob = blobs / meta->etag;
    FileLock lock(cache / ".locks" / id->folder() / (meta->etag + ".lock"));
    const bool have_blob = fs::is_regular_file(blob, ec) &&
                           (meta->size < 0 || static_cast<int64_t>(fs::file_size(blob, ec)) == meta->size);
    if (!have_blob) {
      const fs::path incomplete = blob.string() + ".incomplete";
      int64_t fetched = 0;
      Status st = p.download(f, *meta, incomplete, fetched);
      rep.downloaded_bytes += fetched;
      if (!st.is_ok()) return st;
      fs::rename(incomplete, blob, ec);
      if (ec) return Status::error("[hub] cannot rename " + incomplete.string() + " to " + blob.string() + ": " + ec.message());
      ++rep.downloaded_files;
    } else {
      p.log("[hub] " + f + ": blob " + meta->etag + " already in the cache");
    }
    SPECULA_RETURN_IF_ERROR(link_pointer(snapshot, f, blob));
  }
  if (id->revision != rep.commit) SPECULA_RETURN_IF_ERROR(write_file_atomic(repo / "refs" / id->revision, rep.commit));
  p.log("[hub] " + id->repo() + "@" + id->revision + ": " + std::to_string(rep.files) + " files, " +
        std::to_string(rep.downloaded_files) + " downloaded (" + human_bytes(static_cast<uint64_t>(rep.downloaded_bytes)) + ")");
  rep.snapshot = snapshot.string();
  return rep;
}

}  // namespace specula::hub
