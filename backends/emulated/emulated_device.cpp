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

#if defined(__SANITIZE_ADDRESS__)
#define KSTAGE_EMULATED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KSTAGE_EMULATED_ASAN 1
#endif
#endif

namespace kstage::backends::emulated {
namespace {

// Address space per arena: reserved, not committed (pages appear on first touch).
constexpr size_t kArenaBytes = size_t(8) << 30;
constexpr size_t kAlign = 64;

std::atomic<uint32_t> g_delay_us{0};
std::atomic<kstage_emulated_violation_fn> g_violation{nullptr};

size_t align_up(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

thread_local Error t_last_error = Error::success;
thread_local int32_t t_device = 0;

}  // namespace

// ---------------------------------------------------------------------------
// Errors, the current device, contexts

const char* error_string(Error e) {
  switch (e) {
    case Error::success: return "no error";
    case Error::not_ready: return "device not ready";
    case Error::invalid_value: return "invalid argument";
    case Error::invalid_device: return "invalid device ordinal";
    case Error::invalid_handle: return "invalid resource handle";
    case Error::memory_allocation: return "out of memory";
    case Error::invalid_memcpy_direction: return "invalid copy direction for memcpy";
    case Error::not_supported: return "operation not supported";
    case Error::launch_out_of_resources: return "too many resources requested for launch";
    case Error::illegal_address: return "an illegal memory access was encountered";
  }
  return "unknown error";
}

Error set_last_error(Error e) {
  if (e != Error::success && e != Error::not_ready) t_last_error = e;
  return e;
}
Error take_last_error() {
  const Error e = t_last_error;
  t_last_error = Error::success;
  // As cudaGetLastError: a sticky fault is reported again and again.
  const Error sticky = context(t_device).status();
  return sticky != Error::success ? sticky : e;
}

int32_t current_device() { return t_device; }
Error set_current_device(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return set_last_error(Error::invalid_device);
  t_device = ordinal;
  return Error::success;
}

Context& context(int32_t ordinal) {
  static Context* contexts = new Context[kDeviceCount];  // never destroyed
  return contexts[ordinal >= 0 && ordinal < kDeviceCount ? ordinal : 0];
}

bool fires(std::atomic<uint32_t>& counter) {
  uint32_t n = counter.load();
  while (n != 0 && !counter.compare_exchange_weak(n, n - 1)) {
  }
  return n == 1;
}

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

uint64_t Stream::enqueue(std::function<void()> work) {
  uint64_t position;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    position = ++enqueued_;
  }
  cv_.notify_all();
  return position;
}

uint64_t Stream::enqueued() {
  std::lock_guard lock(mutex_);
  return enqueued_;
}
uint64_t Stream::completed() {
  std::lock_guard lock(mutex_);
  return completed_;
}

void Stream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stop_; });
    if (queue_.empty()) return;  // stopping
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work();
    work = nullptr;
    lock.lock();
    ++completed_;
    cv_.notify_all();
  }
}

void Stream::synchronize() {
  // What was enqueued before the call (work other threads add meanwhile is not waited for).
  std::unique_lock lock(mutex_);
  const uint64_t target = enqueued_;
  cv_.wait(lock, [&] { return completed_ >= target; });
}

void Stream::wait_for(uint64_t position) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return completed_ >= position; });
}

bool Stream::idle() {
  std::lock_guard lock(mutex_);
  return completed_ == enqueued_;
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
    ordinal_ = s.ordinal();
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
// Stream-ordered pools

namespace {
std::mutex g_pools_mutex;
std::vector<Pool*>& pools() {
  static auto* list = new std::vector<Pool*>;  // never destroyed
  return *list;
}

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

// ---------------------------------------------------------------------------
// Handles

namespace {
// Handles are numbers from one counter, never addresses: a handle whose
// object is gone stays unknown even when a new object takes its address.
std::atomic<uintptr_t> g_next_handle{0x10000};  // far from 0, 1 and 2 (none, default streams)

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

namespace {
// The default streams as shared_ptrs, made once: a lookup of stream 1 or 2 allocates nothing
// (deleters look them up).
const std::shared_ptr<Stream>& shared_default_stream(int32_t ordinal) {
  static const auto* shared = new std::shared_ptr<Stream>[kDeviceCount]{
      std::shared_ptr<Stream>(&default_stream(0), [](Stream*) {}),
      std::shared_ptr<Stream>(&default_stream(1), [](Stream*) {})};
  return shared[ordinal];
}
}  // namespace

uintptr_t register_stream(std::shared_ptr<Stream> s) { return streams().add(std::move(s)); }
std::shared_ptr<Stream> find_stream(uintptr_t handle) {
  if (handle == 1 || handle == 2) return shared_default_stream(current_device());
  return streams().find(handle);
}
void unregister_stream(uintptr_t handle) { streams().remove(handle); }
uintptr_t register_event(std::shared_ptr<Event> e) { return events().add(std::move(e)); }
std::shared_ptr<Event> find_event(uintptr_t handle) { return events().find(handle); }
void unregister_event(uintptr_t handle) { events().remove(handle); }

// ---------------------------------------------------------------------------
// Launches and copies

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

namespace {
// Memory a kernel of `ordinal` may dereference: its own arena, or pinned host memory.
Arena* reachable(int32_t ordinal, const void* p) {
  if (arena(ordinal).holds(p)) return &arena(ordinal);
  if (pinned_arena().holds(p)) return &pinned_arena();
  return nullptr;
}

void refuse(const char* what, const char* which, size_t i, const void* p, int32_t ordinal) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: %s %zu (%p) is not in device %d's arena (host memory handed to a device "
                "kernel)",
                what, which, i, p, int(ordinal));
  violation(buf);
}

// Runs on the worker: the checks, then the kernel with its blocks open.
void run_kernel(int32_t ordinal, const char* what, const LaunchPointers& ptrs,
                const std::function<void()>& kernel) {
  Arena& own = arena(ordinal);
  for (size_t i = 0; i < ptrs.direct.size(); ++i)
    if (ptrs.direct[i] && !reachable(ordinal, ptrs.direct[i]))
      return refuse(what, "pointer", i, ptrs.direct[i], ordinal);
  for (const void* p : ptrs.direct)
    if (p) reachable(ordinal, p)->open(p);
  bool rows_ok = true;
  size_t opened_rows = 0;
  for (; opened_rows < ptrs.n_rows; ++opened_rows) {
    const std::byte* row = ptrs.rows[opened_rows];
    if (ptrs.row_bytes[opened_rows] == 0) continue;
    if (!own.holds(row)) {
      rows_ok = false;
      refuse(what, "source row", opened_rows, row, ordinal);
      break;
    }
    own.open(row);
  }
  if (rows_ok) kernel();
  for (size_t i = 0; i < opened_rows; ++i)
    if (ptrs.row_bytes[i]) own.close(ptrs.rows[i]);
  for (const void* p : ptrs.direct)
    if (p) reachable(ordinal, p)->close(p);
}
}  // namespace

Error launch(Stream& s, const char* what, LaunchPointers ptrs, std::function<void()> kernel) {
  const int32_t ordinal = s.ordinal();
  Context& c = context(ordinal);
  if (c.status() != Error::success) return set_last_error(c.status());
  if (fires(c.fault_launch)) return set_last_error(Error::launch_out_of_resources);
  const bool fault = fires(c.fault_kernel);
  try {
    s.enqueue([ordinal, what, ptrs = std::move(ptrs), kernel = std::move(kernel), fault] {
      kernel_delay();
      Context& ctx = context(ordinal);
      if (ctx.status() != Error::success) return;  // a faulty context runs nothing
      if (fault) return ctx.fault(Error::illegal_address);
      run_kernel(ordinal, what, ptrs, kernel);
    });
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

Error memcpy_async(Stream& s, void* dst, const void* src, size_t bytes, CopyKind kind) {
  const int32_t ordinal = s.ordinal();
  Context& c = context(ordinal);
  if (c.status() != Error::success) return set_last_error(c.status());
  if (bytes == 0) return Error::success;
  const int32_t to = memory_of(dst), from = memory_of(src);
  const bool to_device = to >= 0, from_device = from >= 0;
  bool matches = true;
  switch (kind) {
    case CopyKind::HostToDevice: matches = to_device && !from_device; break;
    case CopyKind::DeviceToHost: matches = from_device && !to_device; break;
    case CopyKind::DeviceToDevice: matches = to_device && from_device; break;
    case CopyKind::Default: break;
  }
  if (!matches) return set_last_error(Error::invalid_memcpy_direction);
  const bool fault = fires(c.fault_copy);
  auto body = [ordinal, fault](void* d, const void* sr, size_t n) {
    kernel_delay();
    Context& ctx = context(ordinal);
    if (ctx.status() != Error::success) return;
    if (fault) return ctx.fault(Error::illegal_address);
    Arena* da = arena_holding(d);
    Arena* sa = arena_holding(sr);
    if (da) da->open(d);
    if (sa) sa->open(sr);
    std::memcpy(d, sr, n);
    if (sa) sa->close(sr);
    if (da) da->close(d);
  };
  try {
    if (from == kPageable) {
      // Staged at the call (the driver may copy pageable memory to its own buffer before
      // returning); the source must still live until the copy completes.
      auto staged = std::make_shared<std::vector<std::byte>>(
          static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + bytes);
      s.enqueue([body, dst, src, bytes, staged] {
#if defined(KSTAGE_EMULATED_ASAN)
        if (__asan_region_is_poisoned(const_cast<void*>(src), bytes)) {
          char buf[200];
          std::snprintf(buf, sizeof buf,
                        "memcpy_async: the pageable source %p (%zu bytes) was freed before the "
                        "copy completed",
                        src, bytes);
          violation(buf);
        }
#else
        (void)src;
#endif
        body(dst, staged->data(), bytes);
      });
    } else if (to == kPageable) {
      // To pageable memory: done when the call returns (and a fault meanwhile is its error).
      s.wait_for(s.enqueue([body, dst, src, bytes] { body(dst, src, bytes); }));
      return set_last_error(c.status());
    } else {
      s.enqueue([body, dst, src, bytes] { body(dst, src, bytes); });
    }
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

Error launch_host_func(Stream& s, void (*fn)(void*), void* data) {
  if (!fn) return set_last_error(Error::invalid_value);
  try {
    s.enqueue([fn, data] { fn(data); });
  } catch (...) {
    return set_last_error(Error::memory_allocation);
  }
  return Error::success;
}

}  // namespace kstage::backends::emulated

// ---------------------------------------------------------------------------
// The test API (kstage_emulated.h)

using namespace kstage::backends::emulated;

extern "C" {

void* kstage_emulated_malloc(int32_t ordinal, size_t bytes) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return nullptr;
  return arena(ordinal).allocate(bytes);
}

void kstage_emulated_free(void* ptr) {
  if (Arena* a = arena_holding(ptr)) a->free(ptr);
}

void* kstage_emulated_host_malloc(size_t bytes) { return pinned_arena().allocate(bytes); }

void kstage_emulated_host_free(void* ptr) {
  if (pinned_arena().holds(ptr)) pinned_arena().free(ptr);
}

int32_t kstage_emulated_ordinal_of(const void* ptr) {
  Arena* a = arena_holding(ptr);
  return a ? a->ordinal() : -1;
}

size_t kstage_emulated_live_bytes(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  // Blocks a pool caches are free memory to its users: not counted.
  size_t cached = 0;
  {
    std::lock_guard lock(g_pools_mutex);
    for (Pool* pool : pools()) {
      if (pool->ordinal() != ordinal) continue;
      size_t reserved = 0, used = 0;
      pool->usage(&reserved, &used);
      cached += reserved - used;
    }
  }
  const size_t live = arena(ordinal).live_bytes();  // (a trim in between: never below 0)
  return live > cached ? live - cached : 0;
}

void kstage_emulated_copy_counts(int32_t ordinal, uint64_t* h2d, uint64_t* d2h) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
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

void kstage_emulated_stream_destroy(uintptr_t stream) {
  if (auto s = find_stream(stream)) s->synchronize();  // a pool may keep the object a while
  unregister_stream(stream);
}

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

int kstage_emulated_memcpy_async(uintptr_t stream, void* dst, const void* src, size_t bytes) {
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  const Error e = memcpy_async(*s, dst, src, bytes, CopyKind::Default);
  (void)take_last_error();
  return int(e);
}

int kstage_emulated_memcpy_kind_async(uintptr_t stream, void* dst, const void* src, size_t bytes,
                                      kstage_emulated_copy_kind_t kind) {
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  CopyKind k = CopyKind::Default;
  switch (kind) {
    case KSTAGE_EMULATED_HOST_TO_DEVICE: k = CopyKind::HostToDevice; break;
    case KSTAGE_EMULATED_DEVICE_TO_HOST: k = CopyKind::DeviceToHost; break;
    case KSTAGE_EMULATED_DEVICE_TO_DEVICE: k = CopyKind::DeviceToDevice; break;
    case KSTAGE_EMULATED_COPY_DEFAULT: break;
    default: return int(Error::invalid_value);
  }
  const Error e = memcpy_async(*s, dst, src, bytes, k);
  (void)take_last_error();
  return int(e);
}

int kstage_emulated_memcpy(void* dst, const void* src, size_t bytes) {
  Arena* a = arena_holding(dst);
  if (!a) a = arena_holding(src);
  Stream& s = default_stream(a ? a->ordinal() : 0);
  const Error e = memcpy_async(s, dst, src, bytes, CopyKind::Default);
  (void)take_last_error();
  s.synchronize();
  return int(e);
}

int kstage_emulated_launch_host_func(uintptr_t stream, void (*fn)(void*), void* data) {
  auto s = find_stream(stream);
  if (!s) return int(Error::invalid_handle);
  const Error e = launch_host_func(*s, fn, data);
  (void)take_last_error();
  return int(e);
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

int kstage_emulated_inject_fault(int32_t ordinal, kstage_emulated_fault_t fault, uint32_t nth) {
  if (ordinal < 0 || ordinal >= kDeviceCount || nth == 0) return 0;
  Context& c = context(ordinal);
  switch (fault) {
    case KSTAGE_EMULATED_FAULT_KERNEL: c.fault_kernel.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_COPY: c.fault_copy.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_LAUNCH: c.fault_launch.store(nth); return 1;
    case KSTAGE_EMULATED_FAULT_ALLOC: c.fault_alloc.store(nth); return 1;
  }
  return 0;
}

int kstage_emulated_device_status(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return 0;
  return int(context(ordinal).status());
}

void kstage_emulated_device_reset(int32_t ordinal) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
  Context& c = context(ordinal);
  c.sticky.store(0);
  c.fault_kernel.store(0);
  c.fault_copy.store(0);
  c.fault_launch.store(0);
  c.fault_alloc.store(0);
  c.pools_supported.store(true);
}

void kstage_emulated_set_pools_supported(int32_t ordinal, int supported) {
  if (ordinal < 0 || ordinal >= kDeviceCount) return;
  context(ordinal).pools_supported.store(supported != 0);
}

}  // extern "C"
