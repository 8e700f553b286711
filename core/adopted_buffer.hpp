// SPDX-License-Identifier: Apache-2.0
// A DLPack producer's memory used as a stage buffer without a copy. The
// buffer owns the managed tensor: its deleter runs exactly once, when the
// last holder of the buffer (a pending write, a column, a reader) lets go.
#pragma once

#include "core/buffer.hpp"

namespace kstage::core {

class AdoptedBuffer final : public DeviceBuffer {
 public:
  AdoptedBuffer(DLManagedTensorVersioned* tensor, std::byte* data, size_t size, DLDevice device)
      : DeviceBuffer(data, size, device, (tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0),
        tensor_(tensor) {}
  ~AdoptedBuffer() override {
    if (tensor_->deleter) tensor_->deleter(tensor_);
  }

 private:
  DLManagedTensorVersioned* tensor_;
};

}  // namespace kstage::core
