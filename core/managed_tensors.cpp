// SPDX-License-Identifier: Apache-2.0
#include "core/managed_tensors.hpp"

#include <algorithm>
#include <functional>

namespace kstage::core {

ManagedTensors::ManagedTensors(const kstage_write_data_t* data, uint64_t n) {
  if (data == nullptr) return;
  struct Listed {
    ManagedTensor t;
    uint64_t i, j;
    bool legacy;
  };
  std::vector<Listed> listed;
  for (uint64_t i = 0; i < n; ++i) {
    const kstage_write_data_t& d = data[i];
    // A fixed-size write has exactly one tensor: entry 0 is taken whenever an
    // array is given (also with a tensor_count of 0, the usual slip), and
    // nothing past it is read (any tensor_count but 1 is then rejected).
    const uint64_t count = d.is_array ? d.tensor_count : 1;
    if (d.managed_tensors)
      for (uint64_t j = 0; j < count; ++j)
        if (d.managed_tensors[j]) listed.push_back({{d.managed_tensors[j], nullptr}, i, j, false});
    if (d.legacy_managed_tensors)
      for (uint64_t j = 0; j < count; ++j)
        if (d.legacy_managed_tensors[j])
          listed.push_back({{nullptr, d.legacy_managed_tensors[j]}, i, j, true});
  }
  // Repeats in O(n log n) (an array write may hand over one tensor per row):
  // every listing of a pointer after its first is a repeat, kept once.
  std::vector<size_t> order(listed.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  auto key = [&](size_t k) { return listed[k].t.pointer(); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::less<const void*>()(key(a), key(b)); });
  std::vector<char> repeat(listed.size(), 0);
  size_t first_repeat = listed.size();
  for (size_t k = 1; k < order.size(); ++k)
    if (key(order[k]) == key(order[k - 1])) {
      repeat[order[k]] = 1;
      first_repeat = std::min(first_repeat, order[k]);
    }
  owned_.reserve(listed.size());
  for (size_t k = 0; k < listed.size(); ++k)
    if (!repeat[k]) owned_.push_back(listed[k].t);
  if (first_repeat < listed.size()) {
    const Listed& r = listed[first_repeat];
    duplicate_ =
        format("data[%llu].%s[%llu] is listed more than once", (unsigned long long)r.i,
               r.legacy ? "legacy_managed_tensors" : "managed_tensors", (unsigned long long)r.j);
  }
}

ManagedTensors::~ManagedTensors() {
  for (const ManagedTensor& t : owned_) t.destroy();
}

ManagedTensor ManagedTensors::adopt_if_deletable(const DLTensor* t) {
  for (auto it = owned_.begin(); it != owned_.end(); ++it) {
    if (it->tensor() == t && it->has_deleter()) {
      ManagedTensor m = *it;
      owned_.erase(it);
      return m;
    }
  }
  return {};
}

Status ManagedTensors::check() const {
  if (!duplicate_.empty()) return Status(KSTAGE_INVALID_ARGUMENT, duplicate_);
  for (size_t i = 0; i < owned_.size(); ++i) {
    const DLManagedTensorVersioned* v = owned_[i].versioned;
    if (v && v->version.major != DLPACK_MAJOR_VERSION)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "managed tensor %zu has DLPack version %u.%u; this build reads major version %d",
                   i, unsigned(v->version.major), unsigned(v->version.minor), DLPACK_MAJOR_VERSION);
  }
  return Status::OK();
}

}  // namespace kstage::core
