// SPDX-License-Identifier: Apache-2.0
// A CUDA stream held on a real GPU, for the CUDA tests of ordering (what the emulated device's
// kstage_emulated_stream_hold does there): a one-thread kernel spins on a flag in mapped pinned
// memory until the test releases it, so that work enqueued behind it -- a producer's copy, a
// consumer's read -- waits on the device while kstage's calls run on the host.
//
// No wait can hang the GPU or the test: the kernel gives up by itself after `timeout` (by the
// GPU's global timer) and says so; the host's waits poll with a bound; and the destructor
// releases the flag, so a failed REQUIRE that unwinds the test lets the stream go.
// Compiled by nvcc (the kernel), in the probes library; the tests that use it stay host C++.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace kstage_cuda_test {

class HeldStream {
 public:
  // A new non-blocking stream, held from the start: returns once the kernel runs (error()
  // says why not, within `timeout`).
  explicit HeldStream(std::chrono::milliseconds timeout = std::chrono::milliseconds(4000));
  ~HeldStream();
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;

  cudaStream_t stream() const { return stream_; }
  uintptr_t handle() const { return reinterpret_cast<uintptr_t>(stream_); }
  // What failed while setting the hold up; "" when it holds.
  const std::string& error() const { return error_; }
  // Lets the kernel end (idempotent); work behind it runs.
  void release();
  // Whether the kernel gave up before release(): the test waited longer than the hold lasts,
  // so what it saw "while held" was not.
  bool timed_out() const;

 private:
  cudaStream_t stream_ = nullptr;
  volatile uint32_t* flags_ = nullptr;  // [0] release (host), [1] started, [2] timed out (device)
  bool released_ = false;
  std::string error_;
};

// Releases `held` from a thread of its own after `delay`, for a case whose own thread blocks in
// a call that waits for the held work; joined at scope exit, a failed check's too (declare it
// after the HeldStream, so that it goes first).
class DelayedRelease {
 public:
  DelayedRelease(HeldStream& held, std::chrono::milliseconds delay);
  ~DelayedRelease();
  DelayedRelease(const DelayedRelease&) = delete;
  DelayedRelease& operator=(const DelayedRelease&) = delete;

 private:
  std::thread thread_;
};

// Bounded host waits (polling the query calls): false when `timeout` passed first or the query
// failed (then `*status`, when given, is its error).
bool wait_for(cudaEvent_t event, std::chrono::milliseconds timeout, cudaError_t* status = nullptr);
bool wait_for(cudaStream_t stream, std::chrono::milliseconds timeout,
              cudaError_t* status = nullptr);
// Whether work on the stream, or before the event, has not run yet (the query's
// cudaErrorNotReady, never left behind as the thread's last error for kstage's next check).
bool busy(cudaStream_t stream);
bool busy(cudaEvent_t event);

}  // namespace kstage_cuda_test
