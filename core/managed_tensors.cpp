// SPDX-License-Identifier: Apache-2.0
#include "core/managed_tensors.hpp"

#include <algorithm>

namespace kstage::core {

ManagedTensors::ManagedTensors(const kstage_write_data_t* data, uint64_t n) {
  if (data == nullptr) return;
  struct Listed {
    DLManagedTensorVersioned* t;
    uint64_t i, j;
  };
  std::vector<Listed> listed;
  for (uint64_t i = 0; i < n; ++i) {
    const kstage_write_data_t& d = data[i];
    if (d.managed_tensors == nullptr) continue;
    // A fixed-size write has exactly one tensor: only entry 0 is read (a
    // tensor_count other than 1 is rejected without reading further).
    const uint64_t listed_count = d.is_array ? d.tensor_count : std::min<uint64_t>(d.tensor_count, 1);
    for (uint64_t j = 0; j < listed_count; ++j)
      if (d.managed_tensors[j] != nullptr) listed.push_back({d.managed_tensors[j], i, j});
  }
  // Repeats in O(n log n) (an array write may hand over one tensor per row):
  // every listing of a pointer after its first is a repeat, kept once.
  std::vector<size_t> order(listed.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return listed[a].t < listed[b].t; });
  std::vector<char> repeat(listed.size(), 0);
  size_t first_repeat = listed.size();
  for (size_t k = 1; k < order.size(); ++k)
    if (listed[order[k]].t == listed[order[k - 1]].t) {
      repeat[order[k]] = 1;
      first_repeat = std::min(first_repeat, order[k]);
    }
  owned_.reserve(listed.size());
  for (size_t k = 0; k < listed.size(); ++k)
    if (!repeat[k]) owned_.push_back(listed[k].t);
  if (first_repeat < listed.size())
    duplicate_ = format("data[%llu].managed_tensors[%llu] is listed more than once",
                        (unsigned long long)listed[first_repeat].i,
                        (unsigned long long)listed[first_repeat].j);
}

ManagedTensors::~ManagedTensors() {
  for (DLManagedTensorVersioned* t : owned_)
    if (t->deleter) t->deleter(t);
}

DLManagedTensorVersioned* ManagedTensors::adopt_if_deletable(const DLTensor* t) {
  for (auto it = owned_.begin(); it != owned_.end(); ++it) {
    if (&(*it)->dl_tensor == t && (*it)->deleter != nullptr) {
      DLManagedTensorVersioned* m = *it;
      owned_.erase(it);
      return m;
    }
  }
  return nullptr;
}

Status ManagedTensors::check() const {
  if (!duplicate_.empty()) return Status(KSTAGE_INVALID_ARGUMENT, duplicate_);
  for (size_t i = 0; i < owned_.size(); ++i)
    if (owned_[i]->version.major != DLPACK_MAJOR_VERSION)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "managed tensor %zu has DLPack version %u.%u; this build reads major version %d",
                   i, unsigned(owned_[i]->version.major), unsigned(owned_[i]->version.minor),
                   DLPACK_MAJOR_VERSION);
  return Status::OK();
}

}  // namespace kstage::core
