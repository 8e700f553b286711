// SPDX-License-Identifier: Apache-2.0
// The emulated device's memory: an arena per ordinal and one of pinned host memory, handed
// out first-fit; a device arena's blocks are ASan-poisoned outside kernels (emulated_device.hpp,
// Arena).
#include "backends/emulated/emulated_device.hpp"
#include "backends/emulated/emulated_internal.hpp"

#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

namespace kstage::backends::emulated {
namespace {

// Address space per arena: reserved, not committed (pages appear on first touch).
constexpr size_t kArenaBytes = size_t(8) << 30;

}  // namespace

// ---------------------------------------------------------------------------
// Arena

Arena::Arena(int32_t ordinal) : ordinal_(ordinal) {
  void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "kstage emulated device %d: cannot reserve its arena\n", int(ordinal));
    std::abort();
  }
  base_ = reinterpret_cast<uintptr_t>(p);
  size_ = kArenaBytes;
  free_.emplace(base_, Block{size_});
}

Arena::~Arena() { munmap(reinterpret_cast<void*>(base_), size_); }

void* Arena::allocate(size_t bytes) {
  const size_t size = align_up(bytes == 0 ? 1 : bytes);
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second.size < size) continue;
    const uintptr_t start = it->first;
    const size_t rest = it->second.size - size;
    try {
      if (rest) free_.emplace(start + size, Block{rest});  // the one allocation: first
    } catch (...) {
      return nullptr;
    }
    auto block = free_.extract(it);
    block.mapped() = Block{size};
    live_.insert(std::move(block));
    // Device blocks stay poisoned outside kernels; pinned blocks are host memory (a freed
    // one was poisoned by free()).
    // NOLINTNEXTLINE(bugprone-branch-clone): the two macros differ under ASan only
    if (device()) ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(start), size);
    else ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(start), size);
    return reinterpret_cast<void*>(start);
  }
  return nullptr;
}

void Arena::free(void* p) noexcept {
  if (!p) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) {
    std::fprintf(stderr, "kstage emulated device %d: free of %p, which is not a block\n",
                 int(ordinal_), p);
    std::abort();
  }
  uintptr_t start = it->first;
  size_t size = it->second.size;
  auto block = live_.extract(it);
  ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(start), size);
  // A large block's memory goes back to the system -- only the whole pages inside it:
  // MADV_DONTNEED zeroes every page it touches, and a block's first and last pages may be
  // shared with live neighbours (it rounds its length up: a block of 1,600,000 bytes zeroed
  // the first 1,536 bytes of the block after it).
  if (size >= (size_t(1) << 20)) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t from = (start + page - 1) & ~(page - 1), to = (start + size) & ~(page - 1);
    if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
  }
  // Freed memory is poisoned in every arena: a use after free is reported.
  ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(start), size);
  // Coalesce with the free neighbours.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second.size;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size == start) {
      prev->second.size += size;
      return;
    }
  }
  block.mapped() = Block{size};
  free_.insert(std::move(block));
}

std::map<uintptr_t, Arena::Block>::iterator Arena::block_of(uintptr_t a) {
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return live_.end();
  --it;
  return a < it->first + it->second.size ? it : live_.end();
}

bool Arena::open(const void* p) {
  std::lock_guard lock(mutex_);
  auto it = block_of(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return false;
  if (it->second.opens++ == 0 && device())
    ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(it->first), it->second.size);
  return true;
}

void Arena::close(const void* p) {
  std::lock_guard lock(mutex_);
  auto it = block_of(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return;
  if (--it->second.opens == 0 && device())
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(it->first), it->second.size);
}

size_t Arena::live_bytes() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [start, b] : live_) n += b.size;
  return n;
}

Arena& arena(int32_t ordinal) {
  // Never destroyed: buffers may be released during static destruction.
  static Arena* arenas[kDeviceCount] = {new Arena(0), new Arena(1)};
  return *arenas[ordinal];
}

Arena& pinned_arena() {
  static Arena* a = new Arena(Arena::kPinned);
  return *a;
}

Arena* arena_holding(const void* p) {
  for (int32_t d = 0; d < kDeviceCount; ++d)
    if (arena(d).holds(p)) return &arena(d);
  return nullptr;
}

int32_t memory_of(const void* p) {
  if (Arena* a = arena_holding(p)) return a->ordinal();
  return pinned_arena().holds(p) ? kPinnedHost : kPageable;
}

}  // namespace kstage::backends::emulated
