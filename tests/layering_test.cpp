// tests/layering_test.cpp — the layers of docs/ARCHITECTURE.md, checked: every
// `#include "folder/..."` in src/ names the file's own folder or a layer below it, and no
// source file but core/runtime_config.cpp reads the environment.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

namespace {

namespace fs = std::filesystem;

// Lower numbers are lower layers; a folder may include its own and lower ones.
const std::map<std::string, int> kLayer = {
    {"specula", -1}, {"core", 0},     {"formats", 1}, {"jinja", 1},    {"tokenizer", 2}, {"kernels", 2},
    {"chat", 3},    {"ops", 3},      {"state", 4},   {"model", 5},    {"grammar", 5},   {"sampling", 6},
    {"decoding", 7}, {"engine", 8},  {"server", 9},  {"capi", 10},  {"cli", 11},
};

fs::path repo_root() { return fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path(); }

TEST(Layering, IncludesRunOnlyDownward) {
  const std::regex include_re(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  int checked = 0;
  for (const auto& e : fs::recursive_directory_iterator(repo_root() / "src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".h" && ext != ".cpp" && ext != ".inc") continue;
    const std::string folder = fs::relative(e.path(), repo_root() / "src").begin()->string();
    ASSERT_TRUE(kLayer.count(folder)) << "src/" << folder << " is not a layer of docs/ARCHITECTURE.md";
    std::ifstream in(e.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      const std::string to = m[1];
      if (!kLayer.count(to)) continue;  // a system or third-party header
      ++checked;
      EXPECT_TRUE(to == folder || kLayer.at(to) < kLayer.at(folder))
          << e.path().string() << ":" << n << " (" << folder << ") includes " << to << "/, a layer above or beside it";
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Layering, OnlyTheRuntimeConfigReadsTheEnvironment) {
  for (const auto& e : fs::recursive_directory_iterator(repo_root() / "src")) {
    if (!e.is_regular_file() || e.path().filename() == "runtime_config.cpp") continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("getenv("), std::string::npos) << e.path().string() << " reads the environment";
  }
}

TEST(Layering, CodeCitesOnlyDocsInTheRepository) {
  for (const auto& e : fs::recursive_directory_iterator(repo_root() / "src")) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("DESIGN.md"), std::string::npos) << e.path().string();
  }
}

}  // namespace
