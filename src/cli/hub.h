// cli/hub.h — `specula pull ORG/NAME[@REVISION]`: downloads a model repository from the
// Hugging Face Hub (or any server speaking its HTTP API) into a cache laid out as
// huggingface_hub's, and finds a pulled snapshot again for `-m ORG/NAME`.
//
// Protocol (what huggingface_hub's snapshot_download does):
//   GET {endpoint}/api/models/{repo}/revision/{revision}  -> {"sha": COMMIT, "siblings": [{"rfilename": F}, ...]}
//   HEAD {endpoint}/{repo}/resolve/{COMMIT}/{F}          -> the file's identity: X-Linked-Etag, else ETag
//        (quotes and W/ stripped), and size: X-Linked-Size, else Content-Length; relative
//        redirects (renamed repos) are followed, an absolute one (the Hub's 302 to its CDN)
//        ends the metadata and is where the file is then fetched from;
//   GET  that location (redirects followed, at most max_redirects), with "Range: bytes=N-"
//        when an earlier download left N bytes.
// A 64-hex-digit etag is the sha256 of an LFS file's content: it is checked after the
// download; a mismatch (or a size other than the announced one) removes the partial file
// and is an error. HF_TOKEN is sent as "Authorization: Bearer ..." to the endpoint's own
// origin only (not to the CDN a redirect points to).
//
// Cache (${SPECULA_CACHE:-~/.cache/specula}/hub, the Hugging Face hub cache's layout):
//   models--ORG--NAME/blobs/<etag>                 the content (<etag>.incomplete while downloading)
//   models--ORG--NAME/snapshots/<commit>/<file>    relative symlink to ../../blobs/<etag>
//   models--ORG--NAME/refs/<revision>              the commit (written once every file is in place)
//   .locks/models--ORG--NAME/<etag>.lock           flock() held while one blob downloads
// A file whose snapshot link exists is not asked for again; one whose blob exists with the
// announced size is linked without downloading.
//
// Files: by default the ones `specula` reads from a model folder (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja,
// special_tokens_map.json, model.safetensors.index.json, *.safetensors); include globs
// (fnmatch, '*' matches '/' as in huggingface_hub's allow_patterns) replace that list.
// A file name that is empty, absolute, holds a backslash, NUL, a control character or a
// "." / ".." / empty path component is refused by name.
// Does not: upload, list or delete cache entries, verify non-LFS files (their etag is a
// git blob sha1), or download datasets / spaces.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "specula/status.h"

namespace specula::hub {

// "ORG/NAME[@REVISION]". ORG and NAME: 1-96 of [A-Za-z0-9._-], not starting or ending
// with '.' or '-', without ".." or "--". REVISION (default "main"): 1-256 of
// [A-Za-z0-9._/-] without "..", "//", or a leading / trailing '/'.
struct RepoId {
  std::string org, name, revision = "main";
  std::string repo() const { return org + "/" + name; }        // "ORG/NAME"
  std::string folder() const { return "models--" + org + "--" + name; }
};
Result<RepoId> parse_repo_id(const std::string& s);

// True when `s` parses as a RepoId and is not an existing path (a file or folder wins).
bool is_repo_name(const std::string& s);

// ${SPECULA_CACHE:-$HOME/.cache/specula}/hub
std::string default_cache_dir();

// --endpoint, else $HF_ENDPOINT, else https://huggingface.co (no trailing '/').
std::string default_endpoint();

struct PullOptions {
  std::string endpoint;              // "" = default_endpoint()
  std::string token;                 // "" = $HF_TOKEN (may be unset)
  std::vector<std::string> include;  // globs over file names; empty = the default set
  std::string cache_dir;             // "" = default_cache_dir()
  int max_redirects = 10;
  int retries = 3;                   // resumed re-tries of one file after a broken connection
  int connect_timeout_s = 10;
  int read_timeout_s = 60;
  std::FILE* log = stderr;           // progress lines; null = silent
};

struct PullReport {
  std::string snapshot;  // .../models--ORG--NAME/snapshots/<commit>
  std::string commit;
  int64_t files = 0;             // files in the snapshot that were wanted
  int64_t downloaded_files = 0;  // files whose bytes came over the network this time
  int64_t downloaded_bytes = 0;
};

// Downloads the wanted files of `name` ("ORG/NAME[@REVISION]"). Errors start with "[hub]"
// and name the endpoint, the repository or the file.
Result<PullReport> pull(const std::string& name, const PullOptions& options = {});

// The snapshot folder a previous pull of `name` left: refs/<revision> -> snapshots/<commit>
// (or snapshots/<revision> when the revision is itself a commit). `cache_dir` "" =
// default_cache_dir(). An error when `name` is not a RepoId or was not pulled.
Result<std::string> cached_snapshot(const std::string& name, const std::string& cache_dir = "");

// --- pieces, exposed for tests ---------------------------------------------------------

// An error naming `rfilename` when it could escape the snapshot folder or is not a plain
// relative path (see the header comment).
Status check_rfilename(const std::string& rfilename);

// Whether `rfilename` is downloaded: by `include` (fnmatch globs) when not empty, else by
// the default set.
bool wanted(const std::string& rfilename, const std::vector<std::string>& include);

// An ETag header value as a blob name: surrounding W/ and quotes removed. "" when what
// remains is not 1-256 of [A-Za-z0-9._-] or starts with '.'.
std::string normalize_etag(std::string_view etag);

// SHA-256 (FIPS 180-4) as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);
Result<std::string> sha256_file(const std::string& path);

}  // namespace specula::hub
