// core/runtime_config.h — the environment specula reads, in one place: every variable
// is read once, into an immutable RuntimeConfig taken at the first call of
// runtime_config() (the CLI's main() makes that call before anything else), and passed
// down from there. No other file calls getenv.
//
//   SPECULA_MODELS   folder of model files (default ~/.cache/specula/models)
//   SPECULA_CACHE    root of specula's caches; the Hugging Face hub cache is $SPECULA_CACHE/hub
//                    (default ~/.cache/specula)
//   SPECULA_ISA      generic | avx2 | avxvnni | avx512: force a kernel tier (kernels/dispatch.cpp)
//   SPECULA_REPACK   0: do not repack weights at load (model/model.cpp)
//   SPECULA_DECODE_PREFETCH  0 | 1: force the packed decode tile's software prefetch off / on
//                    (default: on for Intel CPUs, off for others; kernels/dispatch.cpp)
//   HF_ENDPOINT      Hugging Face hub (or mirror) URL for `specula pull` (default https://huggingface.co)
//   HF_TOKEN         token sent to the hub (gated repositories)
//   HOME             where the defaults above live
//   AIP_MODE, AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE, AIP_HTTP_PORT
//                    Vertex AI's custom-container variables (cloud.google.com/vertex-ai/docs/
//                    predictions/custom-container-requirements): with AIP_MODE=PREDICTION,
//                    `specula serve` answers the predict route (server/server.cpp)
// Does not: parse command-line flags (cli/ does; a flag overrides the variable it names).
#pragma once

#include <string>

namespace specula {

struct RuntimeConfig {
  std::string models_dir;   // SPECULA_MODELS, else $HOME/.cache/specula/models
  std::string cache_dir;    // SPECULA_CACHE, else $HOME/.cache/specula
  std::string isa;          // SPECULA_ISA ("" = the best tier cpuid allows)
  bool repack = true;       // SPECULA_REPACK != "0"
  std::string decode_prefetch;  // SPECULA_DECODE_PREFETCH ("" = chosen by CPU vendor)
  std::string hf_endpoint;  // HF_ENDPOINT without trailing '/', else https://huggingface.co
  std::string hf_token;     // HF_TOKEN ("" = none)
  std::string aip_mode;           // AIP_MODE ("PREDICTION" turns the Vertex AI routes on)
  std::string aip_predict_route;  // AIP_PREDICT_ROUTE ("" = /predict)
  std::string aip_health_route;   // AIP_HEALTH_ROUTE ("" = none beyond /health)
  std::string aip_http_port;      // AIP_HTTP_PORT ("" = the --port flag)

  // Reads the variables now (the accessor below calls it once; tests may build their own).
  static RuntimeConfig from_environment();
};

// The process's snapshot, taken at the first call (thread-safe) and never changed.
const RuntimeConfig& runtime_config();

}  // namespace specula
