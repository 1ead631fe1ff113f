// model/quantize.cpp — load-time weight quantization (see quantize.h).
#include "model/quantize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "kernels/generic/generic.h"
#include "kernels/kernels.h"

namespace specula {

Result<DType> parse_quantize_type(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "q8_0") return DType::Q8_0;
  if (n == "q4_k") return DType::Q4_K;
  return Status::error("[quantize] unknown type '" + name + "' (choices: q8_0, q4_k)");
}

Result<gguf::GgufFile> quantize_weights(const gguf::GgufFile& file, DType type, ThreadPool& pool,
                                        QuantizeStats* stats) {
  if (type != DType::Q8_0 && type != DType::Q4_K)
    return Status::error("[quantize] target type " + std::string(dtype_name(type)) + " is not supported (q8_0, q4_k)");
  const auto t0 = std::chrono::steady_clock::now();
  struct Owner {
    gguf::GgufFile source;
    std::vector<std::unique_ptr<uint8_t, AlignedFree>> buffers;
  };
  auto owner = std::make_shared<Owner>(Owner{file, {}});
  const kernels::KernelTable& kt = kernels::active();
  // Rows that are not whole blocks of `type` take the fallback (Q4_K -> Q5_0, as llama.cpp's
  // quantizer does), if they are whole blocks of that.
  const auto quantizer = [](DType t) {
    return t == DType::Q8_0 ? &kernels::generic::quantize_row_q8_0
                            : t == DType::Q4_K ? &kernels::generic::quantize_row_q4_k : &kernels::generic::quantize_row_q5_0;
  };
  const DType fallback = type == DType::Q4_K ? DType::Q5_0 : type;
  QuantizeStats st;
  std::vector<gguf::TensorInfo> out = owner->source.tensors();
  struct Job {
    const gguf::TensorInfo* src;
    uint8_t* out;
    int64_t rows;
    DType to;
  };
  std::vector<Job> jobs;
  for (gguf::TensorInfo& t : out) {
    const bool is_float = t.type == DType::F32 || t.type == DType::F16 || t.type == DType::BF16;
    if (!is_float || t.shape.size() < 2 || t.name.find("ffn_gate_inp") != std::string::npos) continue;
    DType to = type;
    if (t.shape[0] % dtype_info(to).block_size != 0) to = fallback;
    if (t.shape[0] % dtype_info(to).block_size != 0) {
      ++st.skipped;
      continue;
    }
    if (to != type) ++st.fallback;
    const int64_t rows = t.n_elements() / t.shape[0];
    const size_t bytes = static_cast<size_t>(rows) * row_bytes(to, t.shape[0]);
    const size_t alloc = (bytes + 63) / 64 * 64;
    owner->buffers.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(alloc, 64))));
    if (owner->buffers.back() == nullptr) return Status::error("[quantize] out of memory for '" + t.name + "'");
    st.bytes_before += t.n_bytes;
    st.bytes_after += bytes;
    ++st.quantized;
    jobs.push_back(Job{file.find_tensor(t.name), owner->buffers.back().get(), rows, to});
    t.data = owner->buffers.back().get();
    t.type = to;
    t.n_bytes = bytes;
  }
  // Rows of all jobs as one range, split over the pool.
  std::vector<int64_t> first(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) first[j + 1] = first[j] + jobs[j].rows;
  const int64_t total = first.back();
  pool.run([&](int tid, int n_threads) {
    const int64_t a = total * tid / n_threads, b = total * (tid + 1) / n_threads;
    if (a >= b) return;
    std::vector<float> row;
    size_t j = std::upper_bound(first.begin(), first.end(), a) - first.begin() - 1;
    for (int64_t r = a; r < b; ++r) {
      while (r >= first[j + 1]) ++j;
      const Job& job = jobs[j];
      const int64_t K = job.src->shape[0], local = r - first[j];
      row.resize(static_cast<size_t>(K));
      kt.types[static_cast<uint32_t>(job.src->type)].dequantize_row(
          job.src->data + static_cast<size_t>(local) * row_bytes(job.src->type, K), row.data(), K);
      quantizer(job.to)(row.data(), job.out + static_cast<size_t>(local) * row_bytes(job.to, K), K);
    }
  });
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats != nullptr) *stats = st;
  std::vector<std::string> keys = owner->source.metadata_keys();
  std::map<std::string, gguf::Value> kv = owner->source.metadata();
  const std::string origin = owner->source.path();
  auto r = gguf::GgufFile::assemble(origin, std::move(kv), std::move(keys), std::move(out),
                                    std::shared_ptr<const void>(owner, owner.get()));
  if (r) r->set_source_names(file.source_names());
  return r;
}

}  // namespace specula
