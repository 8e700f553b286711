// SPDX-License-Identifier: Apache-2.0
// Ownership of the DLManagedTensorVersioned a writer hands over. The stage
// owns them from the moment the call starts, whatever happens next: each
// deleter runs exactly once, when the owner is destroyed -- after the data
// has been staged, or at once when the call is rejected.
#pragma once

#include "core/status.hpp"

#include <vector>

namespace kstage::core {

class ManagedTensors {
 public:
  // Takes every managed tensor of data[0, n): each entry of an array write,
  // entry 0 of a fixed-size one (whose tensor_count must be 1; entries past
  // 0 are never read). A pointer listed twice is kept once (and reported by
  // check()).
  ManagedTensors(const kstage_write_data_t* data, uint64_t n);
  ~ManagedTensors();
  ManagedTensors(const ManagedTensors&) = delete;
  ManagedTensors& operator=(const ManagedTensors&) = delete;

  // DLPack rules a consumer must apply before reading anything else: a major
  // version it does not know means "call the deleter, read nothing".
  Status check() const;

  // Hands over the managed tensor whose dl_tensor is `t`, if it has a
  // deleter (null otherwise): the caller now owns it and must call its
  // deleter exactly once.
  DLManagedTensorVersioned* adopt_if_deletable(const DLTensor* t);

 private:
  std::vector<DLManagedTensorVersioned*> owned_;
  std::string duplicate_;  // message if a pointer was listed twice
};

}  // namespace kstage::core
