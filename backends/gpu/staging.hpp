// SPDX-License-Identifier: Apache-2.0
// The GPU backend's upload staging (backends/gpu/gpu_backend.hpp): pinned host blocks that index
// maps and ragged offsets go through on their way to the device. A copy from pageable memory may
// be staged by the driver by waiting for the stream (CUDA: "might be synchronous with respect to
// host"), so an indexed write would block its caller until the stage's queue drains; a copy from
// pinned memory is a DMA in stream order, and the call returns at once. A block is handed back
// only once the copy that reads it is done -- the retire queue's event (shared.hpp) -- and kept
// for the next upload, since allocating pinned memory is slow (and may synchronise the device).
// An upload over kMaxCachedBlock (an index map of over 16M entries) is staged too, through a
// block of its own size that is freed, not kept, once its copy is done: caching it would hold
// that much pinned memory for the stage's life, and its pinning costs less than a caller
// blocked until the stage's queue drains.
#pragma once

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace kstage::backends::gpu {

template <class RT>
class PinnedStaging {
 public:
  // The largest block kept for later uploads (sizes are powers of two up to it); a larger
  // upload's block is its own size, freed when given back.
  static constexpr size_t kMaxCachedBlock = size_t(64) << 20;
  // What the stage keeps cached for its next uploads; beyond it a returned block is freed.
  static constexpr size_t kMaxCached = size_t(64) << 20;

  // A pinned block, given back to its staging (for the next upload) when dropped.
  class Block {
   public:
    Block() = default;
    Block(PinnedStaging* owner, std::byte* data, size_t size)
        : owner_(owner), data_(data), size_(size) {}
    Block(Block&& o) noexcept
        : owner_(std::exchange(o.owner_, nullptr)), data_(o.data_), size_(o.size_) {}
    Block& operator=(Block&& o) noexcept {
      if (this != &o) {
        give_back();
        owner_ = std::exchange(o.owner_, nullptr);
        data_ = o.data_;
        size_ = o.size_;
      }
      return *this;
    }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block() { give_back(); }
    explicit operator bool() const { return owner_ != nullptr; }
    std::byte* data() const { return data_; }

   private:
    void give_back() noexcept {
      if (owner_) owner_->give(data_, size_);
      owner_ = nullptr;
    }
    PinnedStaging* owner_ = nullptr;
    std::byte* data_ = nullptr;
    size_t size_ = 0;
  };

  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  // Every block is back by now: the retire queue that held them is empty (GpuShared's last act).
  ~PinnedStaging() {
    for (const Cached& c : free_)
      if (RT::host_free(c.data) != RT::success) (void)RT::take_error();
  }

  // A block of at least `bytes`: the smallest cached one that fits, else a new one (sizes are
  // powers of two from 4 KiB, so blocks fit later uploads of similar sizes; over
  // kMaxCachedBlock, `bytes` rounded up to whole 4 KiB pages). Empty when pinned memory cannot
  // be had: the caller then copies from pageable memory.
  Block take(size_t bytes) noexcept {
    if (bytes == 0) return Block();
    if (bytes <= kMaxCachedBlock) {
      std::lock_guard lock(mutex_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->size >= bytes && (best == free_.end() || it->size < best->size)) best = it;
      if (best != free_.end()) {
        const Cached c = *best;
        free_.erase(best);
        cached_bytes_ -= c.size;
        return Block(this, c.data, c.size);
      }
    }
    size_t size = (bytes + 4095) & ~size_t(4095);
    if (bytes <= kMaxCachedBlock) {
      size = 4096;
      while (size < bytes) size *= 2;
    }
    void* p = nullptr;
    if (RT::host_malloc(&p, size) != RT::success || p == nullptr) {
      (void)RT::take_error();  // not left for the next launch check
      return Block();
    }
    return Block(this, static_cast<std::byte*>(p), size);
  }

 private:
  struct Cached {
    std::byte* data;
    size_t size;
  };
  // Runs in a retired entry's destructor (after its copy completed): never throws.
  void give(std::byte* data, size_t size) noexcept {
    try {
      std::lock_guard lock(mutex_);
      if (size <= kMaxCachedBlock && cached_bytes_ + size <= kMaxCached) {
        free_.push_back(Cached{data, size});
        cached_bytes_ += size;
        return;
      }
    } catch (...) {
    }
    if (RT::host_free(data) != RT::success) (void)RT::take_error();
  }

  std::mutex mutex_;
  std::vector<Cached> free_;  // blocks whose copies are done
  size_t cached_bytes_ = 0;
};

}  // namespace kstage::backends::gpu
