// SPDX-License-Identifier: Apache-2.0
// The emulated device's "driver": per-ordinal arenas, a pinned-host arena,
// streams that run their work on a worker thread, events, stream-ordered
// memory pools, the runtime's error state (the calling thread's last error,
// an ordinal's sticky fault) and injected faults. The runtime table
// (emulated_runtime.hpp) and the test API (kstage_emulated.h) are built on
// it; kstage_emulated.h says what it promises.
// Implemented in emulated_device.cpp (errors, contexts), emulated_arena.cpp,
// emulated_stream.cpp (streams, events, handles), emulated_pool.cpp and
// emulated_launch.cpp (launches, copies); the test API in emulated_test_api.cpp.
#pragma once

#include "backends/emulated/kstage_emulated.h"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kstage::backends::emulated {

constexpr int32_t kDeviceType = KSTAGE_EMULATED_DEVICE_TYPE;
constexpr int32_t kDeviceCount = KSTAGE_EMULATED_DEVICE_COUNT;
constexpr unsigned char kFreshByte = KSTAGE_EMULATED_FRESH_BYTE;

// The runtime's error codes, named after CUDA's (cudaError_t) where it has one.
enum class Error : int {
  success = 0,
  not_ready,                 // cudaErrorNotReady: not an error
  invalid_value,             // cudaErrorInvalidValue
  invalid_device,            // cudaErrorInvalidDevice
  invalid_handle,            // cudaErrorInvalidResourceHandle
  memory_allocation,         // cudaErrorMemoryAllocation
  invalid_memcpy_direction,  // cudaErrorInvalidMemcpyDirection
  not_supported,             // cudaErrorNotSupported (memory pools)
  launch_out_of_resources,   // cudaErrorLaunchOutOfResources: at launch, not sticky
  illegal_address,           // cudaErrorIllegalAddress: asynchronous, sticky
  capture_implicit,          // cudaErrorStreamCaptureImplicit: the legacy stream in a capture
  capture_unsupported,       // cudaErrorStreamCaptureUnsupported: a device-wide wait in one
};
const char* error_string(Error e);
// A CUDA graph capture in global mode (cudaStreamCaptureModeGlobal, as torch.cuda.graph opens
// one), as the rest of the process sees it: while one is open, a call on the legacy default
// stream (handle 1) is refused with capture_implicit, a device-wide synchronisation with
// capture_unsupported, and either invalidates the capture (kstage_emulated_capture_end).
// Returns success where the call may go on.
Error capture_allows(uintptr_t stream);
Error capture_allows_device_wait();
void capture_begin();
bool capture_end();  // true: the capture stayed valid
// Errors after which the ordinal's context is unusable (CUDA's sticky errors).
inline bool is_sticky(Error e) { return e == Error::illegal_address; }

// The calling thread's last error, as cudaGetLastError: every failing call sets it, and it
// stays set until taken (`take` returns and clears it; a sticky fault is returned again).
Error set_last_error(Error e);  // returns e; success leaves it unchanged
Error take_last_error();
// The calling thread's current device (cudaGetDevice / cudaSetDevice).
int32_t current_device();
Error set_current_device(int32_t ordinal);

// An ordinal's context: its sticky fault (success: none) and the faults a test injected.
struct Context {
  std::atomic<int> sticky{0};
  std::atomic<uint32_t> fault_kernel{0}, fault_copy{0}, fault_launch{0}, fault_alloc{0};
  std::atomic<bool> pools_supported{true};
  Error status() const { return Error(sticky.load()); }
  void fault(Error e) {
    int none = 0;
    (void)sticky.compare_exchange_strong(none, int(e));
  }
};
Context& context(int32_t ordinal);
// Counts one down if `counter` is armed; true when it fires (reaches 1 -> 0).
bool fires(std::atomic<uint32_t>& counter);

// One memory's address range, handed out first-fit in 64-byte-aligned blocks.
// A device arena keeps its blocks ASan-poisoned while no kernel runs; the
// pinned-host arena (ordinal kPinned) is host memory and never poisoned.
class Arena {
 public:
  static constexpr int32_t kPinned = -1;
  explicit Arena(int32_t ordinal);
  ~Arena();
  void* allocate(size_t bytes);  // null when full
  void free(void* p) noexcept;   // p as allocate() returned it
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
  bool device() const { return ordinal_ != kPinned; }
  // Guarded by counts_mutex: the backend's copies and uploads (gpu::Transfer), copies to the
  // device from pageable memory enqueued behind unfinished work (kstage_emulated_pageable_waits),
  // and, in the pinned arena, the backend's pinned allocations (the runtime table's host_malloc).
  uint64_t host_to_device = 0, device_to_host = 0, uploads = 0, pageable_waits = 0;
  uint64_t host_allocations = 0;
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
  std::map<uintptr_t, Block> live_;  // start -> block
};

Arena& arena(int32_t ordinal);  // ordinal in [0, kDeviceCount)
Arena& pinned_arena();
Arena* arena_holding(const void* p);  // a device arena; null: host memory (pinned or not)

// A queue of work run in order by its own worker thread. Each item has a
// position (1, 2, ...); completed() is the position of the last one done.
class Stream {
 public:
  explicit Stream(int32_t ordinal);
  ~Stream();  // runs what is queued, then stops
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t ordinal() const { return ordinal_; }
  // Its position. Throws std::bad_alloc (nothing enqueued then).
  uint64_t enqueue(std::function<void()> work);
  uint64_t enqueued();
  uint64_t completed();
  void synchronize();
  void wait_for(uint64_t position);
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
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
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
  int32_t ordinal() const { return ordinal_.load(); }  // of its last record (-1: never recorded)

 private:
  void complete(uint64_t generation);
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0, completed_ = 0;
  std::atomic<int32_t> ordinal_{-1};
};

// A stream-ordered memory pool of one ordinal (cudaMemPool_t): a block freed on stream S
// may be handed out again at once by the next allocation on S, before S has run the work
// before the free; another stream gets it only once S has passed the free. Every block it
// hands out is filled with kFreshByte in stream order (at the allocation's place on its
// stream), so that a reader not ordered after the stream sees the marker, not data.
class Pool {
 public:
  explicit Pool(int32_t ordinal);
  int32_t ordinal() const { return ordinal_; }
  Error allocate(void** p, size_t bytes, const std::shared_ptr<Stream>& s);
  // Whether `p` is a live block of this pool.
  bool owns(const void* p);
  // Stream-ordered free; allocates nothing.
  void free(void* p, const std::shared_ptr<Stream>& s) noexcept;
  // Hands cached blocks whose frees have completed back to the arena until at most
  // `keep` bytes stay reserved.
  void trim(size_t keep);
  void usage(size_t* reserved, size_t* used);

 private:
  struct Block {
    size_t size = 0;
    std::shared_ptr<Stream> stream;  // cached: freed on it, at position `freed_at`
    uint64_t freed_at = 0;
  };
  int32_t ordinal_;
  std::mutex mutex_;
  std::map<uintptr_t, Block> live_, cached_;
  size_t reserved_ = 0, used_ = 0;
};
Pool& default_pool(int32_t ordinal);
Pool* pool_owning(const void* p);  // null: not a pool block
Pool* make_pool(int32_t ordinal);  // never destroyed

// Handles: validated, so a bad integer is refused instead of dereferenced.
uintptr_t register_stream(std::shared_ptr<Stream> s);
// 1 (legacy) and 2 (per-thread): the current device's default stream.
std::shared_ptr<Stream> find_stream(uintptr_t handle);
void unregister_stream(uintptr_t handle);
uintptr_t register_event(std::shared_ptr<Event> e);
std::shared_ptr<Event> find_event(uintptr_t handle);
void unregister_event(uintptr_t handle);
Stream& default_stream(int32_t ordinal);
// Waits for the work enqueued so far on every stream of `ordinal` (cudaDeviceSynchronize).
void synchronize_device(int32_t ordinal);

// Where a pointer's memory is: a device arena's ordinal, kPinnedHost, or kPageable.
constexpr int32_t kPinnedHost = -1, kPageable = -2;
int32_t memory_of(const void* p);

// The pointers a kernel dereferences: direct ones, and optionally a device
// array of `n_rows` row pointers with their byte counts (a ragged copy's
// source rows; a row of 0 bytes is not dereferenced).
struct LaunchPointers {
  std::vector<const void*> direct;
  const std::byte* const* rows = nullptr;
  const uint64_t* row_bytes = nullptr;
  size_t n_rows = 0;
};
// Enqueues `kernel` on `s` (a device's stream), as a launch does: refused at once (the
// thread's last error set) when the ordinal has a sticky fault or a launch failure was
// injected. On the stream's worker it first checks every pointer (each must be in the
// stream's arena or pinned host memory, else the violation handler is called with `what`
// and the kernel does not run), then runs with their blocks unpoisoned. An injected kernel
// fault skips the kernel and makes the ordinal's context faulty (sticky).
Error launch(Stream& s, const char* what, LaunchPointers ptrs, std::function<void()> kernel);
// A copy on `s` with CUDA's rules: `to_device` / `from_device` are what the copy kind says
// (kind "default": both from the pointers); a kind that contradicts the pointers is
// invalid_memcpy_direction. A pageable source is read at the call (and must stay valid
// until the copy completes: checked under ASan), a pageable destination is written before
// the call returns; pinned and device memory are read and written in stream order.
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice, Default };
Error memcpy_async(Stream& s, void* dst, const void* src, size_t bytes, CopyKind kind);
// A host function run in stream order (cudaLaunchHostFunc).
Error launch_host_func(Stream& s, void (*fn)(void*), void* data);
// The delay every kernel and copy starts with (kstage_emulated_set_kernel_delay_us).
void kernel_delay();
// Reports an arena violation (the handler, or print and abort).
void violation(const std::string& message);

}  // namespace kstage::backends::emulated
