// fuzz/prompt_cache_fuzz.cpp — libFuzzer target for the prompt cache's disk entries
// (state/prompt_cache.h PromptCache::decode_entry: what every read-back of a file in
// --cache-dir goes through, a file another process or a crash may have left) and the KV
// layouts' LayerRow::load it calls (f16, q8_0 with delayed f16 recent positions, turbo4,
// full and sliding-window ring layers).
// Input: a selector byte, then a file's bytes. Bit 0 set: the harness appends the file's
// CRC-32 (so that mutations reach the parser behind the checksum); the upper bits choose
// the layouts. Seeds: scripts/fuzz runs this target once with SPECULA_FUZZ_WRITE_SEEDS=DIR,
// which writes entries the real encoder made (PromptCache::encode_entry) for every layout.
// Properties: decode_entry returns a row or an error; a decoded row's length equals its
// token count; re-encoding a decoded entry and decoding that gives the same bytes again.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "fuzz_util.h"
#include "kernels/kernels.h"
#include "state/kv_layout.h"
#include "state/prompt_cache.h"
#include "state/state_rows.h"

namespace {
using namespace specula;

constexpr int64_t kDim = 32;
const std::string kFingerprint = "fuzz-fingerprint";

struct Group {
  const char* name;
  CacheOptions options;
};
const Group kGroups[] = {
    {"f16", {"f16", "f16", 0}},
    {"q8_0_delay4", {"q8_0", "q8_0", 4}},
    {"turbo4", {"turbo4", "turbo4", 0}},
};

const std::vector<StateRows>& groups() {
  static const std::vector<StateRows> g = [] {
    std::vector<StateRows> out;
    for (const Group& grp : kGroups) {
      std::vector<LayerSpec> specs(2);
      specs[0].attention = attention_spec(1, kDim, 0);
      specs[1].attention = attention_spec(1, kDim, 8);  // a ring of 8
      auto st = StateRows::create(specs, grp.options, kernels::active(), 4096);
      if (!st.is_ok()) fuzz::fail("cannot make a group", st.message());
      out.push_back(std::move(st).value());
    }
    return out;
  }();
  return g;
}

// A row of `g` holding `n` positions (K/V derived from position and channel).
RowState row_of(const StateRows& g, int64_t n) {
  static ThreadPool pool(1);
  RowState r = g.new_row().value();
  std::vector<float> k(static_cast<size_t>(n * kDim)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(static_cast<int64_t>(i * 7 % 23) - 11);
    v[i] = static_cast<float>(static_cast<int64_t>(i * 5 % 17) - 8) * 0.25f;
  }
  for (int64_t il = 0; il < g.n_layers(); ++il) {
    const KvLayout* L = g.layout_as<KvLayout>(il);
    KvStage stage;
    L->encode(pool, k.data(), v.data(), n, stage);
    L->commit(*r.layers[static_cast<size_t>(il)], stage, 0, n);
  }
  r.length = n;
  return r;
}

void write_seeds(const std::string& dir) {
  int k = 0;
  for (size_t gi = 0; gi < groups().size(); ++gi) {
    for (int64_t n : {0, 1, 5, 12}) {
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(i * 31 + 7);
      const bool checkpoint = n == 5;
      std::string file = PromptCache::encode_entry(kFingerprint, tokens, n, row_of(groups()[gi], n),
                                                   checkpoint ? "key-1" : "", checkpoint ? "{\"record\":1}" : "");
      // Two seeds per entry: whole (selector bit 0 clear) and without its CRC (bit 0 set).
      for (int with_crc : {0, 1}) {
        std::string seed(1, static_cast<char>((gi << 1) | static_cast<size_t>(with_crc)));
        seed += with_crc ? file.substr(0, file.size() - 4) : file;
        std::ofstream(dir + "/seed_" + std::to_string(k++), std::ios::binary) << seed;
      }
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("SPECULA_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t sel = in.byte();
  std::string bytes(in.rest());
  if (sel & 1) {
    const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                                                     static_cast<uInt>(bytes.size())));
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
  }
  const StateRows& g = groups()[(sel >> 1) % groups().size()];
  auto d = PromptCache::decode_entry(bytes, kFingerprint, g);
  if (!d.is_ok()) return 0;
  if (d->state.length != static_cast<int64_t>(d->tokens.size())) fuzz::fail("a row's length differs from its tokens");
  const std::string again = PromptCache::encode_entry(kFingerprint, d->tokens, d->min_length, d->state, d->key, d->record);
  auto d2 = PromptCache::decode_entry(again, kFingerprint, g);
  if (!d2.is_ok()) fuzz::fail("a re-encoded entry does not decode", d2.message());
  if (PromptCache::encode_entry(kFingerprint, d2->tokens, d2->min_length, d2->state, d2->key, d2->record) != again)
    fuzz::fail("encode(decode(encode(x))) differs from encode(x)");
  return 0;
}
