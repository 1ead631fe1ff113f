// End-to-end tests of the `specula` binary: output and exit codes, and one clear error
// line (never a crash) for bad files and bad arguments.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../test_util.h"
#include "cli_util.h"

namespace {

using specula::testing::CliRun;

// Runs the binary; stderr is merged into out unless stdout_only.
CliRun run(const std::string& args, bool stdout_only = false) {
  return specula::testing::run_shell(std::string(SPECULA_CLI_PATH) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

std::string tmp_file(const std::string& name, const std::string& bytes) {
  const auto path = std::filesystem::temp_directory_path() / ("specula_cli_test_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

TEST(Cli, MissingFileIsOneClearError) {
  CliRun r = run("info /nonexistent/x.gguf");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("specula: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/x.gguf"), std::string::npos) << r.out;
  r = run("generate -m /nonexistent/x.gguf -p hi");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("model file not found"), std::string::npos) << r.out;
}

// KV cache types: llama.cpp's -ctk/-ctv spelling works; an unknown type is one error line
// listing the valid ones; info reports bytes per token per type.
TEST(Cli, CacheTypesAndTheirErrors) {
  if (!specula::testing::default_model_present()) GTEST_SKIP() << "model not found";
  CliRun r = run("generate --greedy -n 4 -p hi -ctk q9_0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("unknown cache type 'q9_0' (valid: f16, f32, bf16, q8_0, q4_0, turbo3, turbo3.5, turbo4, turbo4.5, turbo5)"), std::string::npos)
      << r.out;
  r = run("generate --greedy -n 4 -p hi -ctk q8_0 -ctv turbo3 --kv-delay 16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("KV cache: 15 x kv q8_0/turbo3 ring 512 delay 16 centred, 3 x kv q8_0/turbo3 delay 16 centred"), std::string::npos)
      << r.out;
  r = run("generate --greedy -n 4 -p hi --kv-delay 16");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("needs a quantized"), std::string::npos) << r.out;
  r = run("info " + specula::testing::default_model_path(), true);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("f16/f16: 18432 bytes per token"), std::string::npos) << r.out.substr(r.out.size() - 600);
  EXPECT_NE(r.out.find("q8_0/q8_0: 9792 bytes per token"), std::string::npos);
}

// `specula info` on a Hugging Face model folder: config, tokenizer kind and the tensor table;
// a config.json that is not JSON is one error naming the file.
TEST(Cli, InfoOnASafetensorsFolder) {
  const auto dir = std::filesystem::temp_directory_path() / ("specula_cli_test_folder_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string header = R"({"model.norm.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(8, '\0');
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "hidden_size": 2, "quantization": {"bits": 4, "group_size": 64}})";
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE"}, "added_tokens": []})";
  CliRun r = run("info " + dir.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"model_type\":\"qwen2\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"quantization\":{\"bits\":4,\"group_size\":64}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"type\":\"BPE\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.norm.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("F32    [2]"), std::string::npos) << r.out;
  std::ofstream(dir / "config.json") << "{\"model_type\": ";
  r = run("info " + dir.string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("config.json: not valid JSON"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, NotAGgufIsOneClearError) {
  const std::string f = tmp_file("not.gguf", "hello, this is not a model file at all\n");
  CliRun r = run("info " + f);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a GGUF file"), std::string::npos) << r.out;
  r = run("generate -m " + f + " -p hi -n 2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a GGUF file"), std::string::npos) << r.out;
}

TEST(Cli, BadArgumentsAreRejected) {
  EXPECT_NE(run("generate -n 0 -p hi").code, 0);
  EXPECT_NE(run("generate --top-p 2 -p hi").code, 0);
  EXPECT_NE(run("generate --logit-bias x+1 -p hi").code, 0);
  EXPECT_NE(run("frobnicate").code, 0);
}

// --version prints the version, the commit and the kernel tier; an unknown command is
// named, with the list of the valid ones; no command at all prints the list.
TEST(Cli, VersionAndUnknownCommands) {
  CliRun r = run("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("specula 0."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(commit "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kernels: "), std::string::npos) << r.out;
  EXPECT_EQ(run("-V").out, r.out);
  r = run("frobnicate");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown command 'frobnicate'"), std::string::npos) << r.out;
  for (const char* verb : {"generate", "chat", "serve", "bench", "kld", "tokenize", "info", "pull"})
    EXPECT_NE(r.out.find(verb), std::string::npos) << verb << " not listed: " << r.out;
  r = run("");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("chat"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
}

class CliModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!specula::testing::default_model_present())
      GTEST_SKIP() << "model not found: " << specula::testing::default_model_path();
  }
};

TEST_F(CliModel, TruncatedModelIsOneClearError) {
  std::ifstream in(specula::testing::default_model_path(), std::ios::binary);
  std::string head(1000000, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const std::string f = tmp_file("trunc.gguf", head);
  CliRun r = run("generate -m " + f + " -p hi -n 2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("[gguf]"), std::string::npos) << r.out;
}

// A prompt that starts with the BOS text (parsed as special) gets one BOS, said once.
TEST_F(CliModel, TokenizeAddsNoSecondBos) {
  CliRun r = run("tokenize --json --parse-special '<bos>Hello'", true);
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "[2,9259]\n");
  r = run("tokenize --json --parse-special '<bos>Hello'");
  EXPECT_NE(r.out.find("not adding a second one"), std::string::npos) << r.out;
  EXPECT_EQ(run("tokenize --json --no-bos --parse-special '<bos>Hello'", true).out, "[2,9259]\n");
}

// The sampling flags come from the one table (sampling/params.h): the OpenAI fields as
// flags, in their ranges, and they change the text as they should.
TEST_F(CliModel, SamplingFlagsFromTheFieldTable) {
  CliRun help = run("generate --help", true);
  for (const char* flag : {"--temp", "--top-k", "--repeat-last-n", "--presence-penalty", "--xtc-probability",
                           "--dry-multiplier", "--dry-sequence-breaker", "--logit-bias", "--seed"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  const std::string base = "generate -p 'The capital of France is' -n 6 --greedy -t 1";
  CliRun plain = run(base, true);
  CliRun banned = run(base + " --logit-bias 506-inf", true);  // bans " the"
  EXPECT_EQ(plain.code, 0);
  EXPECT_EQ(banned.code, 0);
  EXPECT_NE(plain.out, banned.out);
  EXPECT_EQ(banned.out.find("is the"), std::string::npos) << banned.out;
  EXPECT_NE(run(base + " --temp 3", true).code, 0);  // the API's range: [0, 2]
  // DRY's breakers become token ids as on the server: "." ends the repeats, "none" nothing.
  const std::string dry = "generate -p 'The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat' "
                          "-n 20 --greedy -t 1 --dry-multiplier 2 --dry-allowed-length 2 --dry-sequence-breaker ";
  CliRun none = run(dry + "none", true), dot = run(dry + ".", true);
  EXPECT_EQ(none.code, 0);
  EXPECT_EQ(dot.code, 0);
  EXPECT_NE(none.out, dot.out);
  EXPECT_NE(run(dry + "''").code, 0);  // an empty breaker
}

TEST_F(CliModel, TokenizeJsonPrintsIds) {
  CliRun r = run("tokenize --json 'Hello world'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "[2,9259,1902]\n");
}

// kld --base-model: the model against a second copy of itself scores exactly zero; against its
// KV cache in q4_0 (the plain mode) it does not.
TEST_F(CliModel, KldAgainstABaseModel) {
  const std::string src = std::filesystem::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  const std::string m = specula::testing::default_model_path();
  CliRun r = run("kld -m " + m + " --base-model " + m + " -f " + src + "/README.md -c 128 --chunks 2 -t 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Mean KLD: 0.000000 ± 0.000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Same top: 100.000%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vs base model " + m), std::string::npos) << r.out;
  r = run("kld -m " + m + " -f " + src + "/README.md -c 128 --chunks 2 -t 2 -ctk q4_0 -ctv q4_0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("Mean KLD: 0.000000 "), std::string::npos) << r.out;
}

TEST_F(CliModel, InfoShowsMetadataAndTensors) {
  CliRun r = run("info " + specula::testing::default_model_path());
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("gemma3"), std::string::npos);
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
}

TEST_F(CliModel, GreedyGenerateStreamsTextAndStats) {
  CliRun r = run("generate -p 'The capital of France is' -n 8 --temp 0 -t 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("The capital of France is the capital of the country of France.", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("prefill"), std::string::npos);
  EXPECT_NE(r.out.find("decode"), std::string::npos);
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos);
}

TEST_F(CliModel, SameSeedSameText) {
  const CliRun a = run("generate -p 'Once upon a time' -n 12 --temp 1.0 --seed 42", true);
  const CliRun b = run("generate -p 'Once upon a time' -n 12 --temp 1.0 --seed 42", true);
  const CliRun c = run("generate -p 'Once upon a time' -n 12 --temp 1.0 --seed 43", true);
  EXPECT_EQ(a.code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

// generate --lora: a random adapter for Gemma 3 270M (tools/make_lora_fixtures.py
// --adapter-for) changes the greedy text; at --lora-scale 0 the text is the base model's
// exactly (every delta is multiplied by 0); an adapter of another architecture is one error.
TEST_F(CliModel, GenerateWithALoraAdapter) {
  const std::string src = std::filesystem::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  const std::string adapter = (std::filesystem::temp_directory_path() / "specula_cli_test_gemma3_lora.gguf").string();
  const CliRun made = specula::testing::run_shell("python3 '" + src + "/tools/make_lora_fixtures.py' --adapter-for '" +
                                                  specula::testing::default_model_path() + "' --out '" + adapter +
                                                  "' 2>&1");
  ASSERT_EQ(made.code, 0) << made.out;
  const std::string gen = "generate -p 'The capital of France is' -n 8 --temp 0 -t 2";
  const CliRun base = run(gen, true), with = run(gen + " --lora '" + adapter + "'", true),
               zero = run(gen + " --lora '" + adapter + "' --lora-scale 0", true);
  EXPECT_EQ(base.code, 0);
  EXPECT_EQ(with.code, 0) << with.out;
  EXPECT_NE(with.out, base.out);
  EXPECT_EQ(zero.out, base.out);
  const CliRun logged = run(gen + " --lora '" + adapter + "'");
  EXPECT_NE(logged.out.find("36 projections, rank 4, alpha 8, scale 1"), std::string::npos) << logged.out;
  const CliRun wrong = run(gen + " --lora '" + tmp_file("not_lora.gguf", "GGUF") + "'");
  EXPECT_EQ(wrong.code, 1) << wrong.out;
  EXPECT_NE(wrong.out.find("[lora]"), std::string::npos) << wrong.out;
  const CliRun nan = run(gen + " --lora '" + adapter + "' --lora-scale nan");
  EXPECT_EQ(nan.code, 1) << nan.out;
  EXPECT_NE(nan.out.find("--lora-scale must be a finite number"), std::string::npos) << nan.out;
}

TEST_F(CliModel, PromptLongerThanContextIsAnError) {
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "word ";
  CliRun r = run("generate --ctx 16 -p '" + prompt + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does not fit the context"), std::string::npos) << r.out;
}

}  // namespace

namespace {
TEST_F(CliModel, GenericIsaFallbackGivesTheSameGreedyText) {
  // SPECULA_ISA=generic forces the reference kernels end to end.
  const std::string cmd = std::string("SPECULA_ISA=generic ") + SPECULA_CLI_PATH +
                          " generate -p 'The capital of France is' -n 6 --temp 0 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("ISA generic"), std::string::npos) << out;
  EXPECT_EQ(out.rfind("The capital of France is the capital of the country of", 0), 0u) << out;
}
}  // namespace
