// cli/tokenize.cpp — `specula tokenize`: the token ids of a text (with BOS when the model
// adds one), one per line with its piece, or as one JSON array.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "tokenizer/hf_tokenizer.h"

namespace specula::cli {
namespace {

struct TokenizeArgs {
  std::string model, text;
  bool json = false, parse_special = false, no_bos = false;
};

int run_tokenize(const RuntimeConfig& config, const TokenizeArgs& a) {
  auto path = resolve_model(config, a.model);
  if (!path) return fail(path.message());
  auto f = open_model_file(*path);
  if (!f) return fail(f.message());
  auto tok = tokenizer::load_tokenizer(*f);
  if (!tok) return fail(tok.message());
  const auto ids = a.no_bos ? (*tok)->encode(a.text, false, a.parse_special) : (*tok)->encode_prompt(a.text, a.parse_special);
  if (a.json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return 0;
  }
  for (int32_t id : ids) {
    const std::string piece = (*tok)->token_to_piece(id, true);
    std::printf("%6d -> %s\n", id,
                nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

Verb add_tokenize(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", a->model, kModelHelp);
  cmd->add_option("text", a->text, "Text to tokenize")->required();
  cmd->add_flag("--json", a->json, "Print the ids as one JSON array");
  cmd->add_flag("--parse-special", a->parse_special, "Parse special tokens in the text");
  cmd->add_flag("--no-bos", a->no_bos, "Do not add BOS");
  return Verb{cmd, [a, &config] { return run_tokenize(config, *a); }};
}

}  // namespace specula::cli
