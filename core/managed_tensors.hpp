// SPDX-License-Identifier: Apache-2.0
// Ownership of the DLPack producers a writer hands over: versioned
// (DLManagedTensorVersioned) or legacy (DLManagedTensor). The stage owns them
// from the moment the call starts, whatever happens next: each deleter runs
// exactly once, when the owner is destroyed -- after the data has been
// staged, or at once when the call is rejected -- or later, by the buffer
// that adopted it.
#pragma once

#include "core/status.hpp"

#include <vector>

namespace kstage::core {

// One producer's tensor, either kind; deleting it calls its deleter (if any).
struct ManagedTensor {
  DLManagedTensorVersioned* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;

  const DLTensor* tensor() const { return versioned ? &versioned->dl_tensor : &legacy->dl_tensor; }
  const void* pointer() const { return versioned ? static_cast<const void*>(versioned) : legacy; }
  bool has_deleter() const {
    return versioned ? versioned->deleter != nullptr : legacy->deleter != nullptr;
  }
  // Whether the stage may write into the memory once it is adopted. A legacy
  // tensor cannot say, and its producer may count on it never changing.
  bool writable() const {
    return versioned && (versioned->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0;
  }
  void destroy() const {
    if (versioned && versioned->deleter) versioned->deleter(versioned);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
  }
};

class ManagedTensors {
 public:
  // Takes every producer of data[0, n): each entry of an array write, entry
  // 0 of a fixed-size one whatever its tensor_count (which must be 1; entries
  // past 0 are never read), from managed_tensors or legacy_managed_tensors.
  // A pointer listed twice is kept once (and reported by check()).
  ManagedTensors(const kstage_write_data_t* data, uint64_t n);
  ~ManagedTensors();
  ManagedTensors(const ManagedTensors&) = delete;
  ManagedTensors& operator=(const ManagedTensors&) = delete;

  // DLPack rules a consumer must apply before reading anything else: a major
  // version it does not know means "call the deleter, read nothing".
  Status check() const;

  // Hands over the producer whose dl_tensor is `t`, if it has a deleter
  // (empty otherwise): the caller now owns it and must destroy() it once.
  ManagedTensor adopt_if_deletable(const DLTensor* t);

 private:
  std::vector<ManagedTensor> owned_;
  std::string duplicate_;  // message if a pointer was listed twice
};

}  // namespace kstage::core
