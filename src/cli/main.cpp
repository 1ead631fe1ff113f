// cli/main.cpp — the `specula` command line (placeholder).
#include <cstdio>
int main() {
  std::puts("specula");
  return 0;
}
