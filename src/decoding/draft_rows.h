// decoding/draft_rows.h — which state row belongs to which request, for the draft sources
// that keep state rows of their own (ModelDraft in draft.cpp, FeatureDraft in feature_draft.cpp):
// row i of the source's StateRows is request ids[i]'s, and each request has an Info of the
// source's. Thread-compatible (the engine thread calls a source).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specula/status.h"
#include "state/state_rows.h"

namespace specula {

template <class Info>
class RequestRows {
 public:
  // The request's state row, or -1 when it has none.
  int32_t row_of(uint64_t id) const {
    for (size_t i = 0; i < ids_.size(); ++i)
      if (ids_[i] == id) return static_cast<int32_t>(i);
    return -1;
  }
  // The request's Info, or null.
  Info* find(uint64_t id) {
    auto it = info_.find(id);
    return it == info_.end() ? nullptr : &it->second;
  }
  Info& at(uint64_t id) { return info_.at(id); }
  // The request's row, appended empty to `state` (with a default Info) on first sight.
  // Errors: the state's (out of memory).
  Result<int32_t> ensure(uint64_t id, StateRows& state) {
    const int32_t r = row_of(id);
    if (r >= 0) return r;
    auto row = state.new_row();
    if (!row) return row.status();
    SPECULA_RETURN_IF_ERROR(state.reserve(1));
    ids_.push_back(id);
    info_[id];
    return state.insert(std::move(row).value());
  }
  // Forgets the request: its Info goes and its state row is dropped (the rows after it move
  // down by one). Nothing happens for an unknown id.
  void release(uint64_t id, StateRows& state) {
    auto it = info_.find(id);
    if (it == info_.end()) return;
    const int32_t idx = row_of(id);
    info_.erase(it);
    std::vector<int32_t> keep;
    for (int32_t i = 0; i < state.n_rows(); ++i)
      if (i != idx) keep.push_back(i);
    state.filter(keep);
    ids_.erase(ids_.begin() + idx);
  }

 private:
  std::vector<uint64_t> ids_;                   // [state rows] the request id of each row
  std::unordered_map<uint64_t, Info> info_;     // per request id
};

}  // namespace specula
