// SPDX-License-Identifier: Apache-2.0
// Recycles released buffers of one backend. A steady stream of same-size
// writes (every tick of a simulation) stages into a fresh buffer and, at
// seal, swaps it in as storage, releasing the old one: without a pool, every
// tick would allocate, page-fault and free a whole column. With it, the
// buffer released by one tick stages the next.
#pragma once

#include "core/buffer.hpp"

#include <deque>
#include <mutex>
#include <vector>

namespace kstage::core {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr size_t kMaxBuffers = 8;
  static constexpr size_t kMaxBytes = size_t(1) << 30;

  // Shares `raw` so that when its last holder lets go it comes back here
  // (or is destroyed, if the pool is gone or full).
  BufferPtr wrap(std::unique_ptr<DeviceBuffer> raw) {
    std::weak_ptr<BufferPool> pool = weak_from_this();
    return BufferPtr(raw.release(), [pool](DeviceBuffer* b) {
      if (auto p = pool.lock()) {
        p->put(std::unique_ptr<DeviceBuffer>(b));
      } else {
        delete b;
      }
    });
  }

  // The smallest released buffer of `bytes` to `bytes` + 25%, or null. The
  // slack lets writes whose size varies a little from tick to tick (masks,
  // index maps, ragged rows) reuse memory too; a buffer's size() is its
  // capacity, which the engine only ever reads as such.
  BufferPtr take(size_t bytes) {
    std::unique_ptr<DeviceBuffer> found;
    {
      std::lock_guard lock(mutex_);
      const size_t most = bytes + bytes / 4;
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        const size_t size = (*it)->size();
        if (size >= bytes && size <= most && (best == free_.end() || size < (*best)->size()))
          best = it;
      }
      if (best != free_.end()) {
        found = std::move(*best);
        free_.erase(best);
        free_bytes_ -= found->size();
      }
    }
    return found ? wrap(std::move(found)) : nullptr;
  }

 private:
  // Keeps at most kMaxBuffers buffers and, apart from the largest one,
  // kMaxBytes bytes, dropping the oldest first. The largest is exempt because
  // a column bigger than the cap alternates between two buffers like any
  // other (the staged write becomes the storage, the old storage stages the
  // next write): dropping that spare whenever a small buffer comes back would
  // make every tick allocate and page-fault the whole column again.
  //
  // Runs in a buffer's deleter, so it never throws: with no memory to keep the buffer (or to
  // evict one), the buffer is freed instead.
  void put(std::unique_ptr<DeviceBuffer> b) noexcept {
    std::vector<std::unique_ptr<DeviceBuffer>> evicted;  // destroyed outside the lock, as is b
    try {
      std::lock_guard lock(mutex_);
      free_.push_back(std::move(b));  // (on failure b still holds it)
      free_bytes_ += free_.back()->size();
      for (;;) {
        auto largest = free_.begin();
        for (auto it = free_.begin(); it != free_.end(); ++it)
          if ((*it)->size() > (*largest)->size()) largest = it;
        if (free_.size() <= kMaxBuffers && free_bytes_ - (*largest)->size() <= kMaxBytes) break;
        auto victim = free_.begin() == largest ? std::next(free_.begin()) : free_.begin();
        const size_t bytes = (*victim)->size();
        evicted.push_back(std::move(*victim));  // (on failure the victim stays in free_)
        free_bytes_ -= bytes;
        free_.erase(victim);
      }
    } catch (...) {
    }
  }

  std::mutex mutex_;
  std::deque<std::unique_ptr<DeviceBuffer>> free_;  // oldest first
  size_t free_bytes_ = 0;
};

}  // namespace kstage::core
