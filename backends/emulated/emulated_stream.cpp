// SPDX-License-Identifier: Apache-2.0
// The emulated device's streams (a queue run in order by a worker thread each) and events,
// and the handle tables that give them out as integers (emulated_device.hpp).
#include "backends/emulated/emulated_device.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kstage::backends::emulated {

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
  std::vector<std::shared_ptr<T>> all() {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(items_.size());
    for (const auto& item : items_) out.push_back(item.second);
    return out;
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
  static const auto* shared = new std::shared_ptr<Stream>[kDeviceCount] {
    std::shared_ptr<Stream>(&default_stream(0), [](Stream*) {}),
        std::shared_ptr<Stream>(&default_stream(1), [](Stream*) {})
  };
  return shared[ordinal];
}
}  // namespace

void synchronize_device(int32_t ordinal) {
  // The streams as they are now: a stream made meanwhile has no work enqueued before the call.
  for (const std::shared_ptr<Stream>& s : streams().all())
    if (s->ordinal() == ordinal) s->synchronize();
  default_stream(ordinal).synchronize();
}

uintptr_t register_stream(std::shared_ptr<Stream> s) { return streams().add(std::move(s)); }
std::shared_ptr<Stream> find_stream(uintptr_t handle) {
  if (handle == 1 || handle == 2) return shared_default_stream(current_device());
  return streams().find(handle);
}
void unregister_stream(uintptr_t handle) { streams().remove(handle); }
uintptr_t register_event(std::shared_ptr<Event> e) { return events().add(std::move(e)); }
std::shared_ptr<Event> find_event(uintptr_t handle) { return events().find(handle); }
void unregister_event(uintptr_t handle) { events().remove(handle); }

}  // namespace kstage::backends::emulated
