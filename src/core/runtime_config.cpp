// core/runtime_config.cpp — see runtime_config.h. The only file that reads the environment.
#include "core/runtime_config.h"

#include <cstdlib>

namespace specula {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

RuntimeConfig RuntimeConfig::from_environment() {
  RuntimeConfig c;
  // (built by append: GCC 12's -Wrestrict misfires on assigning short literals here)
  const std::string home_env = env("HOME");
  const std::string home = home_env.empty() ? std::string(1, '.') : home_env;
  c.models_dir = env("SPECULA_MODELS");
  if (c.models_dir.empty()) c.models_dir.append(home).append("/.cache/specula/models");
  c.cache_dir = env("SPECULA_CACHE");
  if (c.cache_dir.empty()) c.cache_dir.append(home).append("/.cache/specula");
  c.isa = env("SPECULA_ISA");
  c.repack = env("SPECULA_REPACK") != "0";
  c.decode_prefetch = env("SPECULA_DECODE_PREFETCH");
  c.hf_endpoint = env("HF_ENDPOINT");
  if (c.hf_endpoint.empty()) c.hf_endpoint = "https://huggingface.co";
  while (!c.hf_endpoint.empty() && c.hf_endpoint.back() == '/') c.hf_endpoint.pop_back();
  c.hf_token = env("HF_TOKEN");
  c.aip_mode = env("AIP_MODE");
  c.aip_predict_route = env("AIP_PREDICT_ROUTE");
  c.aip_health_route = env("AIP_HEALTH_ROUTE");
  c.aip_http_port = env("AIP_HTTP_PORT");
  return c;
}

const RuntimeConfig& runtime_config() {
  static const RuntimeConfig kConfig = RuntimeConfig::from_environment();
  return kConfig;
}

}  // namespace specula
