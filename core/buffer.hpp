// SPDX-License-Identifier: Apache-2.0
// A block of bytes in one memory space, owned by a backend (a Kokkos View
// underneath). Shared ownership is how snapshots stay alive: a read group
// holds a BufferPtr, and the sealing code copies on write when a buffer it
// wants to modify is held by anyone else (use_count() > 1).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <memory>

namespace kstage::core {

class DeviceBuffer {
 public:
  DeviceBuffer(std::byte* data, size_t size, DLDevice device, bool read_only = false)
      : data_(data), size_(size), device_(device), read_only_(read_only) {}
  virtual ~DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  DLDevice device() const { return device_; }
  // Memory the stage may read but must never modify in place (an adopted
  // READ_ONLY DLPack tensor): modifying it means copying first.
  bool read_only() const { return read_only_; }

 private:
  std::byte* data_;
  size_t size_;
  DLDevice device_;
  bool read_only_;
};

using BufferPtr = std::shared_ptr<DeviceBuffer>;

}  // namespace kstage::core
