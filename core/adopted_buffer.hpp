// SPDX-License-Identifier: Apache-2.0
// A DLPack producer's memory used as a stage buffer without a copy. The
// buffer owns the producer's tensor (versioned or legacy): its deleter runs
// exactly once, when the last holder of the buffer (a pending write, a
// column, a reader) lets go. Memory the producer did not give the stage to
// write (READ_ONLY, or any legacy tensor) is read-only: a write copies it.
#pragma once

#include "core/buffer.hpp"
#include "core/managed_tensors.hpp"

namespace kstage::core {

class AdoptedBuffer final : public DeviceBuffer {
 public:
  AdoptedBuffer(ManagedTensor tensor, std::byte* data, size_t size, DLDevice device)
      : DeviceBuffer(data, size, device, !tensor.writable()), tensor_(tensor) {}
  ~AdoptedBuffer() override { tensor_.destroy(); }

 private:
  ManagedTensor tensor_;
};

}  // namespace kstage::core
