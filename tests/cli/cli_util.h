// tests/cli/cli_util.h — runs a shell command for the CLI tests: its exit code and what it
// printed on stdout (the command's own redirections decide where stderr goes).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace specula::testing {

struct CliRun {
  int code = -1;
  std::string out, err;  // err: filled by callers that capture it apart
};

inline CliRun run_shell(const std::string& cmd) {
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace specula::testing
