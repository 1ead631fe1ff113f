// cli/main.cpp — the `specula` command: the runtime configuration (core/runtime_config.h)
// read first, then one verb (each in its own file, cli/common.h lists them) parsed and
// run. `specula --version` prints the version, the commit and the kernel tier; an unknown
// verb is named with the list of the valid ones.
// Every failure is one line on stderr ("specula: [component] message") and a non-zero exit.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "cli/common.h"
#include "kernels/kernels.h"
#include "specula_version.h"

namespace {

using namespace specula;

int print_version() {
  std::printf("specula %s (commit %s)\nkernels: %s (CPU features: %s)\n", SPECULA_VERSION, SPECULA_COMMIT,
              kernels::active().isa, kernels::cpu_features());
  return 0;
}

// llama.cpp spells the cache types -ctk / -ctv (one dash, several letters); CLI11 takes
// only one-letter short options, so those two are renamed before parsing.
std::vector<std::string> llama_cpp_spellings(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (auto& x : args) {
    if (x == "-ctk") x = "--cache-type-k";
    if (x == "-ctv") x = "--cache-type-v";
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const RuntimeConfig& config = runtime_config();  // the environment, read once
  CLI::App app{"specula: run open-weight language models fast on the CPU"};
  app.set_version_flag("-V,--version", [] {
    print_version();
    std::exit(0);
    return std::string();
  });
  std::vector<cli::Verb> verbs = {cli::add_generate(app, config), cli::add_chat(app, config),
                                  cli::add_serve(app, config),    cli::add_bench(app, config),
                                  cli::add_kld(app, config),      cli::add_tokenize(app, config),
                                  cli::add_info(app, config),     cli::add_pull(app, config)};
  std::string names;
  for (const cli::Verb& v : verbs) names += (names.empty() ? "" : ", ") + v.command->get_name();
  bool known = false;
  for (const cli::Verb& v : verbs) known = known || (argc > 1 && v.command->get_name() == argv[1]);
  if (argc > 1 && argv[1][0] != '-' && !known)
    return cli::fail("[cli] unknown command '" + std::string(argv[1]) + "'; the commands are: " + names);
  app.require_subcommand(1);
  std::vector<std::string> args = llama_cpp_spellings(argc, argv);
  std::vector<char*> argv2;
  for (auto& x : args) argv2.push_back(x.data());
  try {
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::ParseError& e) {
    if (argc == 1) {  // no verb: the list of them
      std::fputs(app.help().c_str(), stderr);
      return 1;
    }
    return app.exit(e);
  }
  try {
    for (const cli::Verb& v : verbs)
      if (*v.command) return v.run();
  } catch (const std::bad_alloc&) {
    return cli::fail("[cli] out of memory");
  } catch (const std::exception& e) {
    return cli::fail(std::string("[cli] ") + e.what());
  }
  return 1;
}
