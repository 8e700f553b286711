// SPDX-License-Identifier: Apache-2.0
// The emulated device's "driver": per-ordinal arenas, streams that run their
// work on a worker thread, and events. The backend (emulated_backend.cpp)
// and the test API (emulated_api.cpp) are built on it; kstage_emulated.h
// says what it promises.
#pragma once

#include "backends/emulated/kstage_emulated.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace kstage::backends::emulated {

constexpr int32_t kDeviceType = KSTAGE_EMULATED_DEVICE_TYPE;
constexpr int32_t kDeviceCount = KSTAGE_EMULATED_DEVICE_COUNT;

// One device's memory: a reserved address range, handed out first-fit in
// 64-byte-aligned blocks. Blocks are ASan-poisoned while no kernel runs.
class Arena {
 public:
  explicit Arena(int32_t ordinal);
  ~Arena();
  void* allocate(size_t bytes);  // null when full
  void free(void* p);            // p as allocate() returned it
  bool holds(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= base_ && a < base_ + size_;
  }
  // Unpoisons the block holding `p` until close(p) (counted: kernels on two
  // streams may touch one block). False when no live block holds `p`.
  bool open(const void* p);
  void close(const void* p);
  size_t live_bytes() const;
  int32_t ordinal() const { return ordinal_; }
  uint64_t host_to_device = 0, device_to_host = 0, uploads = 0;  // guarded by counts_mutex
  std::mutex counts_mutex;

 private:
  struct Block {
    size_t size;
    int opens = 0;
  };
  std::map<uintptr_t, Block>::iterator block_of(uintptr_t a);
  int32_t ordinal_;
  uintptr_t base_ = 0;
  size_t size_ = 0;
  mutable std::mutex mutex_;
  // start -> size (opens 0). The same node type as live_'s: a block moves between the two
  // maps as a node, so that free() (a deleter) allocates nothing.
  std::map<uintptr_t, Block> free_;
  std::map<uintptr_t, Block> live_;    // start -> block
};

Arena& arena(int32_t ordinal);        // ordinal in [0, kDeviceCount)
Arena* arena_holding(const void* p);  // null: host memory

class Event;

// A queue of work run in order by its own worker thread.
class Stream {
 public:
  explicit Stream(int32_t ordinal);
  ~Stream();  // runs what is queued, then stops
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t ordinal() const { return ordinal_; }
  void enqueue(std::function<void()> work);
  void synchronize();
  bool idle();  // nothing queued or running
  // hold() enqueues a closed gate: work after it waits until release()
  // opens the oldest gate (whether or not the stream has reached it yet).
  void hold();
  void release();

 private:
  struct Gate {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
    void wait();
    void unlock();
  };
  void run();
  int32_t ordinal_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  bool busy_ = false;
  std::deque<std::shared_ptr<Gate>> gates_;  // closed, oldest first
  std::thread worker_;
};

class Event : public std::enable_shared_from_this<Event> {
 public:
  void record(Stream& s);
  // Stream `s` runs nothing enqueued after this before the work recorded
  // into this event so far is done.
  void wait_on(Stream& s);
  bool query();
  // True once done; false after `timeout_ns` (UINT64_MAX: forever).
  bool wait(uint64_t timeout_ns);

 private:
  void complete(uint64_t generation);
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
};

// Handles: validated, so a bad integer is refused instead of dereferenced.
uintptr_t register_stream(std::shared_ptr<Stream> s);
std::shared_ptr<Stream> find_stream(uintptr_t handle);  // 1: ordinal 0's default stream
void unregister_stream(uintptr_t handle);
uintptr_t register_event(std::shared_ptr<Event> e);
std::shared_ptr<Event> find_event(uintptr_t handle);
void unregister_event(uintptr_t handle);
Stream& default_stream(int32_t ordinal);

// Runs `kernel` (called on a stream's worker, inside its queued work) after
// checking that every non-null pointer in `ptrs` lies in `arena` (else the
// violation handler is called with `what` and the kernel does not run), with
// their blocks unpoisoned while it runs.
void launch(Arena& arena, const char* what, const std::vector<const void*>& ptrs,
            const std::function<void()>& kernel);
// The delay every kernel and copy starts with (kstage_emulated_set_kernel_delay_us).
void kernel_delay();
// Reports an arena violation (the handler, or print and abort).
void violation(const std::string& message);

}  // namespace kstage::backends::emulated
