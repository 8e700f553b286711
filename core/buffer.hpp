// SPDX-License-Identifier: Apache-2.0
// A block of bytes in one memory space, owned by the backend that allocated
// or adopted it (not a Kokkos View). Shared ownership is how snapshots stay alive: a read group
// holds a pinned BufferPtr (see pin()), and the sealing code copies on write
// when a buffer it wants to modify is pinned or held by anyone else.
#pragma once

#include <kstage/kstage.h>

#include <atomic>
#include <cstddef>
#include <memory>

namespace kstage::core {

// Every buffer a backend allocates starts at this boundary (kstage.h
// promises it: XLA/JAX need it for zero-copy imports on the CPU, and so do
// AVX-512 kernels). Adopted producer buffers keep the producer's alignment.
constexpr size_t kBufferAlignment = KSTAGE_BUFFER_ALIGNMENT;

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

  // Whether a reader (a read group, or an export of one) holds a pin. False
  // means every reader that held one has finished with the memory: the
  // acquire load pairs with the release in unpin(), so the caller may now
  // write the buffer in place and no reader's last access can race with it.
  // (use_count() is a relaxed load and orders nothing.)
  bool pinned() const { return pins_.load(std::memory_order_acquire) != 0; }

 private:
  friend class BufferPin;
  std::byte* data_;
  size_t size_;
  DLDevice device_;
  bool read_only_;
  mutable std::atomic<uint64_t> pins_{0};
};

using BufferPtr = std::shared_ptr<DeviceBuffer>;

// One pin on a buffer, dropped with a release store after its holder's last
// access to the memory.
class BufferPin {
 public:
  explicit BufferPin(BufferPtr buffer) : buffer_(std::move(buffer)) {
    // Relaxed: a pin is taken under the stage mutex, which orders it before
    // any later seal's check.
    buffer_->pins_.fetch_add(1, std::memory_order_relaxed);
  }
  ~BufferPin() { buffer_->pins_.fetch_sub(1, std::memory_order_release); }
  BufferPin(const BufferPin&) = delete;
  BufferPin& operator=(const BufferPin&) = delete;

 private:
  BufferPtr buffer_;
};

// `buffer`, pinned for as long as any copy of the returned pointer lives (a
// read group and every export made from it share one pin). Null for null.
inline BufferPtr pin(const BufferPtr& buffer) {
  if (!buffer) return nullptr;
  auto holder = std::make_shared<BufferPin>(buffer);
  return BufferPtr(holder, buffer.get());  // aliasing: owns the pin
}

}  // namespace kstage::core
