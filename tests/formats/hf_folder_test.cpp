// Hugging Face folders (formats/hf_folder.h): the tiny models of tools/make_arch_fixtures.py (plus
// qwen2 and gemma3 ones, and tools/make_qwen35_fixtures.py's qwen35 ones, whose GGUF here has
// ssm_a as the converter makes it from the folder's A_log) written both as GGUF and as HF
// folders by tools/make_hf_folders.py
// (config.json + safetensors written with the `safetensors` package, names and transforms
// inverted from transformers' side) must give bitwise-equal logits in specula — so the
// folder's greedy continuations are the GGUF's, which arch_oracle_test holds to llama.cpp's.
// Also: bf16 folders against bf16 GGUFs, a sharded folder, and the errors for bad folders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <cstring>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "formats/hf_folder.h"
#include "sampling/params.h"
#include "model/model.h"
#include "../test_util.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

const std::string kDir = testing::process_temp_dir("specula_hf_models");

// The models of tools/make_hf_folders.py's HF_MODELS; name -> HF architecture.
const std::vector<std::pair<std::string, std::string>> kModels = {
    {"llama_a", "llama"},     {"llama_b", "llama"},       {"llama_c", "llama"},
    {"llama_d", "llama"},     {"qwen2_t", "qwen2"},       {"qwen2_t_bf16", "qwen2"},
    {"qwen3_a", "qwen3"},     {"qwen3_b", "qwen3"},       {"qwen3moe_a", "qwen3moe"},
    {"qwen3moe_b", "qwen3moe"}, {"qwen3moe_b_bf16", "qwen3moe"}, {"phi3_a", "phi3"},
    {"phi3_b", "phi3"},       {"gemma2_a", "gemma2"},     {"gemma2_b", "gemma2"},
    {"gemma3_t", "gemma3"},   {"smollm3_a", "smollm3"},   {"smollm3_b_bf16", "smollm3"},
    {"ernie4_5_a", "ernie4_5"}, {"gemma4_a", "gemma4"},     {"gemma4_b", "gemma4"},
    {"qwen35_tiny_a", "qwen35"}, {"qwen35_tiny_b", "qwen35"},
};

// Runs tools/make_hf_folders.py once per process and model.
std::string write_error(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::string> done;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = done.find(name); it != done.end()) return it->second;
  const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  fs::create_directories(kDir);
  const std::string log = kDir + "/" + name + "." + std::to_string(::getpid()) + ".log";
  const std::string cmd = "python3 '" + src + "/tools/make_hf_folders.py' --only " + name + " --out '" + kDir +
                          "' > '" + log + "' 2>&1";
  std::string err;
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    err = "tools/make_hf_folders.py failed: " + ss.str();
  }
  fs::remove(log);
  return done[name] = err;
}

// Teacher-forced logits of `ids` (one forward of the whole sequence, then 8 decode steps).
std::vector<float> logits_of(Model& m, const std::vector<int32_t>& ids) {
  auto st = testing::make_state(m, 1, 256);
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return {};
  const int64_t V = m.info().n_vocab;
  std::vector<float> out;
  Tensor h;
  const int32_t row[1] = {0};
  const size_t first = ids.size() - 8;
  for (size_t off = 0; off < ids.size();) {
    const size_t n = off == 0 ? first : 1;
    EXPECT_TRUE(m.forward(Batch{1, static_cast<int64_t>(n), ids.data() + off, row}, *st, h).is_ok());
    std::vector<float> l(n * V);
    m.project_logits(h.data(), static_cast<int64_t>(n), l.data());
    out.insert(out.end(), l.begin(), l.end());
    off += n;
  }
  return out;
}

class HfFolderTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(HfFolderTest, FolderLogitsEqualGgufBitwise) {
  const auto& [name, arch] = GetParam();
  ASSERT_EQ(write_error(name), "");
  auto g = load_model(kDir + "/arch_" + name + ".gguf", ModelOptions{2, nullptr});
  ASSERT_TRUE(g.is_ok()) << g.message();
  auto f = load_model(kDir + "/hf_" + name, ModelOptions{2, nullptr});
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->info().architecture, arch);
  EXPECT_EQ((*f)->info().n_vocab, (*g)->info().n_vocab);
  EXPECT_EQ((*f)->info().n_layers, (*g)->info().n_layers);
  std::mt19937 rng(11);
  for (int len : {9, 40}) {
    std::vector<int32_t> ids(static_cast<size_t>(len));
    for (auto& t : ids) t = 2 + static_cast<int32_t>(rng() % ((*g)->info().n_vocab - 2));
    const std::vector<float> a = logits_of(**g, ids), b = logits_of(**f, ids);
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0;
    float max_d = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      max_d = std::max(max_d, std::abs(a[i] - b[i]));
    }
    EXPECT_EQ(differ, 0u) << name << " len " << len << ": " << differ << " of " << a.size()
                          << " logits differ, max |d| " << max_d;
    EXPECT_EQ(testing::greedy(**g, ids, 12), testing::greedy(**f, ids, 12)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfFolderTest, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return info.param.first; });

// generation_config.json: end-of-generation ids and sampling defaults reach the metadata;
// tokenizer_config.json's chat template (a named list) and texts too; bad values are errors
// naming the file and key.
TEST(HfFolder, GenerationAndTokenizerConfigs) {
  ASSERT_EQ(write_error("qwen2_t"), "");
  const fs::path src = kDir + "/hf_qwen2_t";
  const fs::path dir = kDir + "/hf_qwen2_t_configs." + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), dir / e.path().filename());
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("generation_config.json", R"({"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                      "eos_token_id": [1, 5]})");
  write("tokenizer_config.json", R"({"add_bos_token": false, "eos_token": {"content": "tok1"},
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto f = open_model_file(dir.string());
  ASSERT_TRUE(f.is_ok()) << f.message();
  const SamplingDefaults d = model_sampling_defaults(*f);
  EXPECT_FLOAT_EQ(d.temperature.value_or(-1), 0.7f);
  EXPECT_FLOAT_EQ(d.top_p.value_or(-1), 0.8f);
  EXPECT_EQ(d.top_k.value_or(-1), 20);
  EXPECT_FALSE(d.min_p.has_value());
  EXPECT_EQ(f->get_i32_array("specula.generation.eos_token_ids").value(), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(f->get_string("tokenizer.chat_template").value(), "D");
  EXPECT_EQ(f->get_string("specula.tokenizer.eos_token").value(), "tok1");
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_bos_token").value());
  write("generation_config.json", R"({"do_sample": false, "temperature": 0.7})");
  auto g = open_model_file(dir.string());
  ASSERT_TRUE(g.is_ok()) << g.message();
  EXPECT_FLOAT_EQ(model_sampling_defaults(*g).temperature.value_or(-1), 0.0f);  // greedy
  write("generation_config.json", R"({"eos_token_id": "x"})");
  auto h = open_model_file(dir.string());
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.message().find("generation_config.json: 'eos_token_id'"), std::string::npos) << h.message();
  write("generation_config.json", R"({"top_p": 7})");
  auto i = open_model_file(dir.string());
  ASSERT_FALSE(i.is_ok());
  EXPECT_NE(i.message().find("'top_p' must be a number in [0, 1], got 7"), std::string::npos) << i.message();
  fs::remove_all(dir);
}

TEST(HfFolder, EveryArchitectureWithAFolderMappingIsCovered) {
  std::set<std::string> covered;
  for (const auto& [n, a] : kModels) covered.insert(a);
  for (const char* a : {"llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3", "smollm3",
                               "ernie4_5", "gemma4", "qwen35"})
    EXPECT_TRUE(covered.count(a)) << a;
  EXPECT_GE(hf::hf_architectures().size(), 15u);
}

}  // namespace
}  // namespace specula

namespace specula {
namespace {

// MLX affine-quantized folders (tools/make_hf_folders.py mlx*: qwen2_w quantized as mlx-lm stores
// it, packing checked against the real MLX by --check-mlx) against the same model with the
// dequantized weights in f32 (hf_<name>_deq). 4-bit codes in groups of 32/64 become Q4_1 blocks,
// 8-bit ones Q8_A blocks (the matmul then quantizes activations to Q8_1, as for any such weight:
// close, not bitwise; the blocks themselves dequantize to the same weights); other widths
// become exact f32 rows: bitwise-equal logits.
struct MlxCase {
  const char* name;
  bool bitwise;
};

class MlxFolderTest : public ::testing::TestWithParam<MlxCase> {};

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (a[i] - b[i]) * (a[i] - b[i]), r += a[i] * a[i];
  return std::sqrt(e / r);
}

TEST_P(MlxFolderTest, LogitsMatchTheDequantizedWeights) {
  const MlxCase c = GetParam();
  ASSERT_EQ(write_error(c.name), "");
  auto q = load_model(kDir + "/hf_" + c.name, ModelOptions{2, nullptr});
  ASSERT_TRUE(q.is_ok()) << q.message();
  auto d = load_model(kDir + "/hf_" + std::string(c.name) + "_deq", ModelOptions{2, nullptr});
  ASSERT_TRUE(d.is_ok()) << d.message();
  // Every converted tensor dequantizes to the folder's dequantized weights (Q8_A: up to the f32
  // rounding of m = bias + 128 * scale, one unit in the last place).
  {
    const auto& kt = kernels::active();
    int64_t checked = 0;
    for (const gguf::TensorInfo& t : (*q)->file().tensors()) {
      const gguf::TensorInfo* r = (*d)->file().find_tensor(t.name);
      ASSERT_NE(r, nullptr) << t.name;
      if (t.type == DType::F32 || r->type != DType::F32 || t.shape.size() != 2) continue;
      const int64_t K = t.shape[0];
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t i = 0; i < t.shape[1]; ++i) {
        kt.of(t.type).dequantize_row(t.data + static_cast<size_t>(i) * row_bytes(t.type, K), row.data(), K);
        const float* want = reinterpret_cast<const float*>(r->data) + i * K;
        for (int64_t k = 0; k < K; ++k)
          ASSERT_LE(std::fabs(row[k] - want[k]), 2e-7f * (std::fabs(want[k]) + 1.0f)) << t.name << " [" << i << ", " << k << "]";
      }
      ++checked;
    }
    if (!c.bitwise) {  // (the f32 rows are the bitwise case)
      EXPECT_GT(checked, 0) << c.name;
    }
  }
  auto n_mlx = (*q)->file().get_uint("specula.source.mlx_quantized_tensors");
  ASSERT_TRUE(n_mlx.is_ok()) << n_mlx.message();
  EXPECT_GT(n_mlx.value(), 10u);
  std::mt19937 rng(13);
  std::vector<int32_t> ids(40);
  for (auto& t : ids) t = 2 + static_cast<int32_t>(rng() % 500);
  const std::vector<float> a = logits_of(**q, ids), b = logits_of(**d, ids);
  ASSERT_EQ(a.size(), b.size());
  const int64_t V = (*d)->info().n_vocab;
  int top1 = 0;
  for (size_t p = 0; p < a.size() / V; ++p)
    top1 += testing::argmax(a.data() + p * V, V) == testing::argmax(b.data() + p * V, V);
  const double err = rel_rms(b, a);
  std::printf("[mlx %s] logits vs the dequantized f32 model: relative RMS %.5f, top-1 %d/%zu\n", c.name, err, top1,
              a.size() / V);
  // Against the float64 forward of the dequantized weights (tools/mlx_f64_reference.py, an
  // independent numpy forward): the MLX folder and the f32 folder of its dequantized weights.
  const auto f64 = [&](const std::vector<float>& logits, const char* what) -> nlohmann::json {
    const std::string bin = kDir + "/" + c.name + "_" + what + "." + std::to_string(::getpid()) + ".bin";
    std::ofstream(bin, std::ios::binary).write(reinterpret_cast<const char*>(logits.data()),
                                                static_cast<std::streamsize>(logits.size() * sizeof(float)));
    std::string id_list;
    for (int32_t t : ids) {
      if (!id_list.empty()) id_list.push_back(',');
      id_list.append(std::to_string(t));
    }
    const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
    const std::string out = bin + ".json";
    const std::string cmd = "python3 '" + src + "/tools/mlx_f64_reference.py' --models '" + kDir + "' --name " + c.name +
                            " --ids " + id_list + " --compare-bin '" + bin + "' > '" + out + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    fs::remove(bin);
    fs::remove(out);
    EXPECT_EQ(rc, 0) << ss.str();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  };
  const nlohmann::json fq = f64(a, "mlx"), fd = f64(b, "deq");
  std::printf("[mlx %s] vs float64 of the dequantized weights: MLX folder rel RMS %.5f max |d| %.4f top-1 %d/%zu; "
              "f32 folder of them rel RMS %.5f max |d| %.4f\n",
              c.name, fq.value("rel_rms", -1.0), fq.value("max_abs", -1.0), fq.value("top1", -1), a.size() / V,
              fd.value("rel_rms", -1.0), fd.value("max_abs", -1.0));
  // Stated tolerance, relative RMS of the logits vs float64: 0.005 for the f32 rows (f32
  // rounding only; measured 0.0011-0.0015), 0.08 for the Q4_1 / Q8_A paths (the Q8_1 activation
  // rounding, which these random models amplify; measured 0.033-0.036); top-1 on 85% of positions.
  EXPECT_LT(fq.value("rel_rms", 1.0), c.bitwise ? 0.005 : 0.08) << c.name;
  EXPECT_GE(fq.value("top1", 0), static_cast<int>(0.85 * static_cast<double>(a.size() / V))) << c.name;
  if (c.bitwise) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << c.name;
  } else {
    // Q8_1 activation rounding only (these random models amplify it ~10x): measured 0.02-0.04.
    EXPECT_LT(err, 0.08) << c.name;
    EXPECT_GE(top1, static_cast<int>(0.85 * static_cast<double>(a.size() / V))) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Mlx, MlxFolderTest,
                         ::testing::Values(MlxCase{"mlx4_g32", false}, MlxCase{"mlx4_g64", false},
                                           MlxCase{"mlx8_g32", false}, MlxCase{"mlx8_g64", false},
                                           MlxCase{"mlx2_g64", true}, MlxCase{"mlx3_g32", true},
                                           MlxCase{"mlx6_g64", true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace specula
