// state/state_rows.cpp — see state_rows.h.
#include "state/state_rows.h"

#include <algorithm>
#include <map>
#include <new>
#include <utility>

#include "state/kv_codec.h"

namespace specula {

int64_t RowState::bytes() const {
  int64_t b = 0;
  for (const auto& l : layers) b += l->bytes();
  return b;
}

Result<RowState> RowState::clone() const {
  RowState r;
  r.length = length;
  for (const auto& l : layers) {
    auto c = l->clone();
    if (!c) return c.status();
    r.layers.push_back(std::move(c).value());
  }
  return r;
}

int64_t RowState::min_length() const {
  int64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l->min_length());
  return m;
}

Result<StateRows> StateRows::create(const std::vector<LayerSpec>& specs, const CacheOptions& options,
                                    const kernels::KernelTable& kt, int64_t max_length) {
  if (specs.empty()) return Status::error("[state] a model with no layers");
  if (max_length <= 0 || max_length > (int64_t{1} << 30))
    return Status::error("[state] context of " + std::to_string(max_length) + " tokens out of range");
  // An unknown type name is wrong for every layer: say so once, without a layer number.
  const std::vector<std::string> names = kv_codec_names();
  for (const auto& [flag, t] : {std::pair<const char*, const std::string*>{"--cache-type-k", &options.type_k},
                                std::pair<const char*, const std::string*>{"--cache-type-v", &options.type_v}}) {
    if (std::find(names.begin(), names.end(), *t) != names.end()) continue;
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return Status::error("[state] unknown cache type '" + *t + "' (valid: " + list + ") for " + flag);
  }
  StateRows s;
  s.max_length_ = max_length;
  for (size_t il = 0; il < specs.size(); ++il) {
    auto l = make_layout(specs[il], options, kt);
    if (!l) return Status::error("[state] layer " + std::to_string(il) + ": " + l.message());
    s.layouts_.push_back(std::move(l).value());
  }
  return s;
}

Result<RowState> StateRows::new_row() const {
  RowState r;
  try {
    r.layers.reserve(layouts_.size());
  } catch (const std::bad_alloc&) {
    return Status::error("[state] out of memory");
  }
  for (const auto& l : layouts_) {
    auto row = l->new_row();
    if (!row) return row.status();
    r.layers.push_back(std::move(row).value());
  }
  return r;
}

Status StateRows::reserve(int32_t extra) {
  try {
    rows_.reserve(rows_.size() + static_cast<size_t>(std::max(0, extra)));
  } catch (const std::bad_alloc&) {
    return Status::error("[state] out of memory");
  }
  return Status::ok();
}

int32_t StateRows::insert(RowState row) {
  SPECULA_CHECK(row.layers.size() == layouts_.size());
  SPECULA_CHECK(rows_.size() < rows_.capacity());  // reserve() first: insert never reallocates
  rows_.push_back(std::move(row));
  return static_cast<int32_t>(rows_.size()) - 1;
}

void StateRows::filter(std::span<const int32_t> keep) {
  std::vector<RowState> next;
  next.reserve(keep.size());  // bounded by the current size; fails only with the process
  for (int32_t r : keep) {
    SPECULA_CHECK(r >= 0 && r < n_rows() && !rows_[r].layers.empty());
    next.push_back(std::move(rows_[r]));
  }
  rows_ = std::move(next);
}

Result<RowState> StateRows::extract(int32_t row) const {
  if (row < 0 || row >= n_rows()) return Status::error("[state] extract of row " + std::to_string(row) + " out of range");
  return rows_[row].clone();
}

Result<StateRows> StateRows::clone() const {
  StateRows s;
  s.layouts_ = layouts_;
  s.max_length_ = max_length_;
  for (const RowState& r : rows_) {
    auto c = r.clone();
    if (!c) return c.status();
    s.rows_.push_back(std::move(c).value());
  }
  return s;
}

Status StateRows::reset(int32_t row) {
  auto fresh = new_row();
  if (!fresh) return fresh.status();
  rows_[row] = std::move(fresh).value();
  return Status::ok();
}

Status RowState::truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length)
    return Status::error("[state] cannot cut a row of " + std::to_string(length) + " positions to " +
                         std::to_string(new_length));
  if (new_length == length) return Status::ok();
  for (auto& l : layers)
    if (l->in_transaction() || l->min_length() > new_length)
      return Status::error("[state] row of " + std::to_string(length) + " positions cannot be cut back to " +
                           std::to_string(new_length) + " (shortest reusable prefix " +
                           std::to_string(l->min_length()) + ")");
  for (auto& l : layers) {
    Status st = l->truncate(new_length);
    SPECULA_CHECK(st.is_ok());  // checked above
  }
  length = new_length;
  return Status::ok();
}

Status StateRows::truncate(int32_t row, int64_t length) { return rows_[row].truncate(length); }

bool StateRows::any_prefix_reusable() const {
  for (const auto& l : layouts_)
    if (!l->info().any_prefix) return false;
  return true;
}

void StateRows::begin(std::span<const int32_t> rows) {
  for (int32_t r : rows)
    for (auto& l : rows_[r].layers) l->begin();
}

Status StateRows::resolve(std::span<const int32_t> rows, std::span<const int64_t> keep) {
  SPECULA_CHECK(rows.size() == keep.size());
  Status first = Status::ok();
  for (size_t i = 0; i < rows.size(); ++i) {
    RowState& row = rows_[rows[i]];
    int64_t length = -1;
    for (auto& l : row.layers) {
      Status st = l->resolve(keep[i]);
      if (!st.is_ok() && first.is_ok()) first = st;
      if (length < 0) length = l->length();
      if (l->length() != length && first.is_ok()) first = Status::error("[state] layers disagree after resolve");
    }
    if (length >= 0) row.length = length;
  }
  return first;
}

int64_t StateRows::bytes() const {
  int64_t b = 0;
  for (const RowState& r : rows_) b += r.bytes();
  return b;
}

int64_t StateRows::bytes_for(int64_t n_tokens) const {
  int64_t b = 0;
  for (const auto& l : layouts_) b += l->bytes_for(n_tokens);
  return b;
}

double StateRows::bytes_per_token() const {
  double b = 0;
  for (const auto& l : layouts_) b += l->info().bytes_per_token;
  return b;
}

int64_t StateRows::fixed_bytes_per_row() const {
  int64_t b = 0;
  for (const auto& l : layouts_) b += l->info().fixed_bytes_per_row;
  return b;
}

std::string StateRows::describe() const {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& l : layouts_) {
    const std::string& n = l->info().name;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& p) { return p.first == n; });
    if (it == counts.end())
      counts.push_back({n, 1});
    else
      ++it->second;
  }
  std::string out;
  for (const auto& [n, c] : counts) out += (out.empty() ? "" : ", ") + std::to_string(c) + " x " + n;
  return out;
}

}  // namespace specula
