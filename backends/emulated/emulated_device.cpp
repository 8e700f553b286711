// SPDX-License-Identifier: Apache-2.0
#include "backends/emulated/emulated_device.hpp"

#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace kstage::backends::emulated {
namespace {

// Address space per ordinal: reserved, not committed (pages appear on first touch).
constexpr size_t kArenaBytes = size_t(8) << 30;
constexpr size_t kAlign = 64;

std::atomic<uint32_t> g_delay_us{0};
std::atomic<kstage_emulated_violation_fn> g_violation{nullptr};

size_t align_up(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

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
    if (rest) free_.emplace(start + size, Block{rest});  // the one allocation: first (may throw)
    auto block = free_.extract(it);
    block.mapped() = Block{size};
    live_.insert(std::move(block));
    ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(start), size);
    return reinterpret_cast<void*>(start);
  }
  return nullptr;
}

void Arena::free(void* p) {
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
  if (it->second.opens++ == 0)
    ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(it->first), it->second.size);
  return true;
}

void Arena::close(const void* p) {
  std::lock_guard lock(mutex_);
  auto it = block_of(reinterpret_cast<uintptr_t>(p));
  if (it == live_.end()) return;
  if (--it->second.opens == 0)
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

Arena* arena_holding(const void* p) {
  for (int32_t d = 0; d < kDeviceCount; ++d)
    if (arena(d).holds(p)) return &arena(d);
  return nullptr;
}

// ---------------------------------------------------------------------------
// Streams and events

Stream::Stream(int32_t ordinal) : ordinal_(ordinal), worker_([this] { run(); }) {}

Stream::~Stream() {
  std::deque<std::shared_ptr<Gate>> gates;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    gates.swap(gates_);
  }
  for (auto& g : gates) g->unlock();  // a held stream still drains
  cv_.notify_all();
  worker_.join();
}

void Stream::Gate::wait() {
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return open; });
}

void Stream::Gate::unlock() {
  {
    std::lock_guard lock(mutex);
    open = true;
  }
  cv.notify_all();
}

void Stream::enqueue(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void Stream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
    if (queue_.empty()) return;  // stopping
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    work();
    work = nullptr;
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void Stream::synchronize() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

bool Stream::idle() {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !busy_;
}

void Stream::hold() {
  // In stream order: work enqueued before the hold still runs.
  auto gate = std::make_shared<Gate>();
  {
    std::lock_guard lock(mutex_);
    gates_.push_back(gate);
  }
  enqueue([gate] { gate->wait(); });
}

void Stream::release() {
  std::shared_ptr<Gate> gate;
  {
    std::lock_guard lock(mutex_);
    if (gates_.empty()) return;
    gate = std::move(gates_.front());
    gates_.pop_front();
  }
  gate->unlock();
}

void Event::record(Stream& s) {
  uint64_t generation;
  {
    std::lock_guard lock(mutex_);
    generation = ++recorded_;
  }
  s.enqueue([self = shared_from_this(), generation] { self->complete(generation); });
}

void Event::complete(uint64_t generation) {
  {
    std::lock_guard lock(mutex_);
    if (generation > completed_) completed_ = generation;
  }
  cv_.notify_all();
}

void Event::wait_on(Stream& s) {
  uint64_t generation;
  {
    std::lock_guard lock(mutex_);
    generation = recorded_;
  }
  s.enqueue([self = shared_from_this(), generation] {
    std::unique_lock lock(self->mutex_);
    self->cv_.wait(lock, [&] { return self->completed_ >= generation; });
  });
}

bool Event::query() {
  std::lock_guard lock(mutex_);
  return completed_ >= recorded_;
}

bool Event::wait(uint64_t timeout_ns) {
  std::unique_lock lock(mutex_);
  const uint64_t generation = recorded_;
  auto ready = [&] { return completed_ >= generation; };
  // Timeouts past a century are forever (and would overflow the clock).
  constexpr uint64_t kForever = uint64_t(1) << 61;
  if (timeout_ns >= kForever) {
    cv_.wait(lock, ready);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::nanoseconds(int64_t(timeout_ns)), ready);
}

// ---------------------------------------------------------------------------
// Handles

namespace {
// Handles are numbers from one counter, never addresses: a handle whose
// object is gone stays unknown even when a new object takes its address.
std::atomic<uintptr_t> g_next_handle{0x10000};  // far from 0 and 1 (none, the default stream)

template <class T>
class HandleTable {
 public:
  uintptr_t add(std::shared_ptr<T> v) {
    const uintptr_t h = g_next_handle.fetch_add(16) + 16;
    std::lock_guard lock(mutex_);
    items_.emplace(h, std::move(v));
    return h;
  }
  std::shared_ptr<T> find(uintptr_t h) {
    std::lock_guard lock(mutex_);
    auto it = items_.find(h);
    return it == items_.end() ? nullptr : it->second;
  }
  void remove(uintptr_t h) {
    std::shared_ptr<T> doomed;  // destroyed (a stream: joined) after the lock is released
    std::lock_guard lock(mutex_);
    if (auto it = items_.find(h); it != items_.end()) {
      doomed = std::move(it->second);
      items_.erase(it);
    }
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> items_;
};

// Never destroyed: they outlive every stage.
HandleTable<Stream>& streams() {
  static auto* t = new HandleTable<Stream>;
  return *t;
}
HandleTable<Event>& events() {
  static auto* t = new HandleTable<Event>;
  return *t;
}
}  // namespace

Stream& default_stream(int32_t ordinal) {
  static Stream* streams[kDeviceCount] = {new Stream(0), new Stream(1)};
  return *streams[ordinal];
}

uintptr_t register_stream(std::shared_ptr<Stream> s) { return streams().add(std::move(s)); }
std::shared_ptr<Stream> find_stream(uintptr_t handle) {
  if (handle == 1) return std::shared_ptr<Stream>(&default_stream(0), [](Stream*) {});
  return streams().find(handle);
}
void unregister_stream(uintptr_t handle) { streams().remove(handle); }
uintptr_t register_event(std::shared_ptr<Event> e) { return events().add(std::move(e)); }
std::shared_ptr<Event> find_event(uintptr_t handle) { return events().find(handle); }
void unregister_event(uintptr_t handle) { events().remove(handle); }

// ---------------------------------------------------------------------------
// Launches

void kernel_delay() {
  if (const uint32_t us = g_delay_us.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void violation(const std::string& message) {
  if (kstage_emulated_violation_fn f = g_violation.load()) {
    f(message.c_str());
    return;
  }
  std::fprintf(stderr, "kstage emulated device: %s\n", message.c_str());
  std::abort();
}

void launch(Arena& arena, const char* what, const std::vector<const void*>& ptrs,
            const std::function<void()>& kernel) {
  kernel_delay();
  size_t i = 0;
  for (const void* p : ptrs) {
    if (p && !arena.holds(p)) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s: pointer %zu (%p) is not in device %d's arena (host memory handed to a "
                    "device kernel)",
                    what, i, p, int(arena.ordinal()));
      violation(buf);
      return;
    }
    ++i;
  }
  for (const void* p : ptrs)
    if (p) arena.open(p);
  kernel();
  for (const void* p : ptrs)
    if (p) arena.close(p);
}

}  // namespace kstage::backends::emulated

// ---------------------------------------------------------------------------
// The test API (kstage_emulated.h)

using namespace kstage::backends::emulated;

namespace {
// A copy on `s` between any two of the host and the arenas.
void copy_on(Stream& s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  s.enqueue([dst, src, bytes] {
    kernel_delay();
    Arena* d = arena_holding(dst);
    Arena* from = arena_holding(src);
    if (d) d->open(dst);
    if (from) from->open(src);
    std::memcpy(dst, src, bytes);
    if (from) from->close(src);
    if (d) d->close(dst);
  });
}
}  // namespace

extern "C" {

void* kstage_emulated_malloc(int32_t ordinal, size_t bytes) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return nullptr;
  return arena(ordinal).allocate(bytes);
}

void kstage_emulated_free(void* ptr) {
  if (Arena* a = arena_holding(ptr)) a->free(ptr);
}

int32_t kstage_emulated_ordinal_of(const void* ptr) {
  Arena* a = arena_holding(ptr);
  return a ? a->ordinal() : -1;
}

size_t kstage_emulated_live_bytes(int32_t ordinal) {
  return ordinal >= 0 && ordinal < kDeviceCount ? arena(ordinal).live_bytes() : 0;
}

void kstage_emulated_copy_counts(int32_t ordinal, uint64_t* h2d, uint64_t* d2h) {
  Arena& a = arena(ordinal);
  std::lock_guard lock(a.counts_mutex);
  if (h2d) *h2d = a.host_to_device;
  if (d2h) *d2h = a.device_to_host;
}

uint64_t kstage_emulated_upload_count(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  Arena& a = arena(ordinal);
  std::lock_guard lock(a.counts_mutex);
  return a.uploads;
}

uintptr_t kstage_emulated_stream_create(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  return register_stream(std::make_shared<Stream>(ordinal));
}

void kstage_emulated_stream_destroy(uintptr_t stream) { unregister_stream(stream); }

void kstage_emulated_stream_hold(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->hold();
}
void kstage_emulated_stream_release(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->release();
}
void kstage_emulated_stream_synchronize(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->synchronize();
}
void kstage_emulated_stream_wait_event(uintptr_t stream, uintptr_t event) {
  auto s = find_stream(stream);
  auto e = find_event(event);
  if (s && e) e->wait_on(*s);
}

void kstage_emulated_memcpy_async(uintptr_t stream, void* dst, const void* src, size_t bytes) {
  if (auto s = find_stream(stream)) copy_on(*s, dst, src, bytes);
}

void kstage_emulated_memcpy(void* dst, const void* src, size_t bytes) {
  Arena* a = arena_holding(dst);
  if (!a) a = arena_holding(src);
  Stream& s = default_stream(a ? a->ordinal() : 0);
  copy_on(s, dst, src, bytes);
  s.synchronize();
}

uintptr_t kstage_emulated_event_create(void) { return register_event(std::make_shared<Event>()); }
void kstage_emulated_event_destroy(uintptr_t event) { unregister_event(event); }
void kstage_emulated_event_record(uintptr_t event, uintptr_t stream) {
  auto e = find_event(event);
  auto s = find_stream(stream);
  if (e && s) e->record(*s);
}
int kstage_emulated_event_query(uintptr_t event) {
  auto e = find_event(event);
  return e ? int(e->query()) : 1;
}
void kstage_emulated_event_synchronize(uintptr_t event) {
  if (auto e = find_event(event)) e->wait(UINT64_MAX);
}

void kstage_emulated_set_kernel_delay_us(uint32_t us) { g_delay_us.store(us); }

kstage_emulated_violation_fn kstage_emulated_set_violation_handler(kstage_emulated_violation_fn f) {
  return g_violation.exchange(f);
}

}  // extern "C"
