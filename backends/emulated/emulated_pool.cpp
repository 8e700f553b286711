// SPDX-License-Identifier: Apache-2.0
// The emulated device's stream-ordered memory pools (cudaMemPool_t): reuse in stream order,
// and every block handed out filled with the fresh-block marker (emulated_device.hpp, Pool).
#include "backends/emulated/emulated_device.hpp"
#include "backends/emulated/emulated_internal.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace kstage::backends::emulated {

// ---------------------------------------------------------------------------
// Stream-ordered pools

std::mutex g_pools_mutex;
std::vector<Pool*>& pools() {
  static auto* list = new std::vector<Pool*>;  // never destroyed
  return *list;
}

namespace {
// Fills [p, p + size) with the fresh-block marker, in stream order.
void fill_fresh(Stream& s, void* p, size_t size) {
  const int32_t ordinal = s.ordinal();
  auto fill = [ordinal, p, size] {
    Arena& a = arena(ordinal);
    a.open(p);
    std::memset(p, kFreshByte, size);
    a.close(p);
  };
  // An idle stream has passed the allocation already: fill now (no round trip to its worker).
  if (s.idle()) return fill();
  try {
    s.enqueue(fill);
  } catch (...) {
    s.synchronize();  // no memory to enqueue it: the stream has passed the allocation now
    fill();
  }
}
}  // namespace

Pool::Pool(int32_t ordinal) : ordinal_(ordinal) {}

Pool* make_pool(int32_t ordinal) {
  auto* p = new Pool(ordinal);
  std::lock_guard lock(g_pools_mutex);
  pools().push_back(p);
  return p;
}

Pool& default_pool(int32_t ordinal) {
  static Pool* defaults[kDeviceCount] = {make_pool(0), make_pool(1)};
  return *defaults[ordinal];
}

Pool* pool_owning(const void* p) {
  std::lock_guard lock(g_pools_mutex);
  for (Pool* pool : pools())
    if (pool->owns(p)) return pool;
  return nullptr;
}

bool Pool::owns(const void* p) {
  std::lock_guard lock(mutex_);
  return live_.count(reinterpret_cast<uintptr_t>(p)) != 0;
}

Error Pool::allocate(void** out, size_t bytes, const std::shared_ptr<Stream>& s) {
  Context& c = context(ordinal_);
  if (c.status() != Error::success) return set_last_error(c.status());
  if (!c.pools_supported.load()) return set_last_error(Error::not_supported);
  if (fires(c.fault_alloc)) return set_last_error(Error::memory_allocation);
  const size_t size = align_up(bytes == 0 ? 1 : bytes);
  std::shared_ptr<Stream> dropped;  // a cached block's stream, let go after the lock
  void* p = nullptr;
  {
    std::lock_guard lock(mutex_);
    // A block freed on this stream first (usable at once, in stream order), else one whose
    // free another stream has passed.
    auto pick = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      const Block& b = it->second;
      if (b.size < size || b.size > 2 * size + 4096) continue;
      if (b.stream == s) {
        pick = it;
        break;
      }
      if (pick == cached_.end() && b.stream->completed() >= b.freed_at) pick = it;
    }
    if (pick != cached_.end()) {
      auto node = cached_.extract(pick);
      dropped = std::move(node.mapped().stream);
      p = reinterpret_cast<void*>(node.key());
      used_ += node.mapped().size;
      live_.insert(std::move(node));
    } else {
      p = arena(ordinal_).allocate(size);
      if (!p) return set_last_error(Error::memory_allocation);
      try {
        live_.emplace(reinterpret_cast<uintptr_t>(p), Block{size, nullptr, 0});
      } catch (...) {
        arena(ordinal_).free(p);
        return set_last_error(Error::memory_allocation);
      }
      reserved_ += size;
      used_ += size;
    }
  }
  fill_fresh(*s, p, size);
  *out = p;
  return Error::success;
}

void Pool::free(void* p, const std::shared_ptr<Stream>& s) noexcept {
  const uint64_t position = s->enqueued();  // the free's place on the stream
  std::lock_guard lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return;
  auto node = live_.extract(it);
  node.mapped().stream = s;  // a copy of a shared_ptr allocates nothing
  node.mapped().freed_at = position;
  used_ -= node.mapped().size;
  cached_.insert(std::move(node));
}

void Pool::trim(size_t keep) {
  std::vector<std::shared_ptr<Stream>> dropped;  // let go after the lock (a stream may join)
  std::lock_guard lock(mutex_);
  for (auto it = cached_.begin(); it != cached_.end() && reserved_ > keep;) {
    if (it->second.stream->completed() < it->second.freed_at) {
      ++it;
      continue;
    }
    try {
      dropped.push_back(it->second.stream);
    } catch (...) {
      return;  // no room to let the stream go later: trim no further
    }
    arena(ordinal_).free(reinterpret_cast<void*>(it->first));
    reserved_ -= it->second.size;
    it = cached_.erase(it);
  }
}

void Pool::usage(size_t* reserved, size_t* used) {
  std::lock_guard lock(mutex_);
  *reserved = reserved_;
  *used = used_;
}

}  // namespace kstage::backends::emulated
