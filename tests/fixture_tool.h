// tests/fixture_tool.h — the fixtures the oracle tools in tools/ make: reading a committed
// reference (tests/fixtures/NAME.json) and running a tool that writes the model files a test
// loads (once per process: ctest runs every test in a process of its own, the tests of one
// file in a process share the files).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace specula::testing {

// tests/fixtures/<name> parsed; an empty object when the file is missing.
inline nlohmann::json read_fixture(const std::string& name) {
  std::ifstream in(std::string(SPECULA_FIXTURES_DIR) + "/" + name);
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

// Runs `python3 tools/<tool> <args> --out '<dir>'` (dir created) once per process and
// command; returns "" or the tool's output when it failed.
inline std::string run_fixture_tool(const std::string& tool, const std::string& args, const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::string> done;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = tool + " " + args + " " + dir;
  if (auto it = done.find(key); it != done.end()) return it->second;
  namespace fs = std::filesystem;
  const std::string src = fs::path(SPECULA_FIXTURES_DIR).parent_path().parent_path().string();
  fs::create_directories(dir);
  const std::string log = dir + "/make." + fs::path(tool).stem().string() + ".log";
  const std::string cmd = "python3 '" + src + "/tools/" + tool + "' " + args + " --out '" + dir + "' > '" + log + "' 2>&1";
  std::string err;
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    err = "tools/" + tool + " failed: " + ss.str();
  }
  fs::remove(log);
  return done[key] = err;
}

}  // namespace specula::testing
