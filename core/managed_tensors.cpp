// SPDX-License-Identifier: Apache-2.0
#include "core/managed_tensors.hpp"

#include <algorithm>

namespace kstage::core {

ManagedTensors::ManagedTensors(const kstage_write_data_t* data, uint64_t n) {
  if (data == nullptr) return;
  for (uint64_t i = 0; i < n; ++i) {
    const kstage_write_data_t& d = data[i];
    if (d.managed_tensors == nullptr) continue;
    for (uint64_t j = 0; j < d.tensor_count; ++j) {
      DLManagedTensorVersioned* t = d.managed_tensors[j];
      if (t == nullptr) continue;
      if (std::find(owned_.begin(), owned_.end(), t) != owned_.end()) {
        if (duplicate_.empty())
          duplicate_ = format("data[%llu].managed_tensors[%llu] is listed more than once",
                              (unsigned long long)i, (unsigned long long)j);
        continue;
      }
      owned_.push_back(t);
    }
  }
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
