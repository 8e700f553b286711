// SPDX-License-Identifier: Apache-2.0
#include "cuda/held_stream.hpp"

#include <atomic>

namespace kstage_cuda_test {

namespace {

__device__ uint64_t global_ns() {
  uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until flags[0] is set by the host, or `timeout_ns` has passed (then flags[2] = 1).
// flags[1] = 1 says it runs. Mapped pinned memory: the host's store reaches the device's
// volatile loads, and the device's stores the host's, over the bus.
__global__ void spin_until_released(volatile uint32_t* flags, uint64_t timeout_ns) {
  const uint64_t start = global_ns();
  flags[1] = 1;
  __threadfence_system();
  while (flags[0] == 0) {
    if (global_ns() - start > timeout_ns) {
      flags[2] = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(1000);
  }
}

// A query's result; a cudaErrorNotReady it left as the last error is taken back.
cudaError_t queried(cudaError_t e) {
  if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)
    (void)cudaGetLastError();
  return e;
}

// Polls `query` until it is no longer cudaErrorNotReady or `timeout` passed.
template <class Query>
bool poll(Query&& query, std::chrono::milliseconds timeout, cudaError_t* status) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const cudaError_t e = queried(query());
    if (e != cudaErrorNotReady) {
      if (status) *status = e;
      return e == cudaSuccess;
    }
    if (std::chrono::steady_clock::now() > end) {
      if (status) *status = cudaErrorNotReady;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

HeldStream::HeldStream(std::chrono::milliseconds timeout) {
  void* host = nullptr;
  if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess ||
      cudaHostAlloc(&host, 3 * sizeof(uint32_t), cudaHostAllocMapped) != cudaSuccess) {
    error_ = std::string("cannot set the hold up: ") + cudaGetErrorString(cudaGetLastError());
    released_ = true;
    return;
  }
  flags_ = static_cast<volatile uint32_t*>(host);
  flags_[0] = flags_[1] = flags_[2] = 0;
  void* device = nullptr;
  if (cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) {
    error_ =
        std::string("no device pointer for the flag: ") + cudaGetErrorString(cudaGetLastError());
    released_ = true;
    return;
  }
  const auto ns = uint64_t(std::chrono::nanoseconds(timeout).count());
  spin_until_released<<<1, 1, 0, stream_>>>(static_cast<volatile uint32_t*>(device), ns);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    error_ = std::string("the hold's kernel did not launch: ") + cudaGetErrorString(e);
    released_ = true;
    return;
  }
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (flags_[1] == 0) {
    if (std::chrono::steady_clock::now() > end) {
      error_ = "the hold's kernel did not start in time";
      release();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

HeldStream::~HeldStream() {
  release();
  // The kernel ends at the release or its own timeout: this wait is bounded either way.
  if (stream_) {
    (void)wait_for(stream_, std::chrono::milliseconds(10000));
    (void)cudaStreamDestroy(stream_);
  }
  if (flags_) (void)cudaFreeHost(const_cast<uint32_t*>(flags_));
}

void HeldStream::release() {
  if (released_ || !flags_) return;
  released_ = true;
  flags_[0] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool HeldStream::timed_out() const { return flags_ && flags_[2] != 0; }

DelayedRelease::DelayedRelease(HeldStream& held, std::chrono::milliseconds delay)
    : thread_([&held, delay] {
        std::this_thread::sleep_for(delay);
        held.release();
      }) {}

DelayedRelease::~DelayedRelease() { thread_.join(); }

bool wait_for(cudaEvent_t event, std::chrono::milliseconds timeout, cudaError_t* status) {
  return poll([event] { return cudaEventQuery(event); }, timeout, status);
}

bool wait_for(cudaStream_t stream, std::chrono::milliseconds timeout, cudaError_t* status) {
  return poll([stream] { return cudaStreamQuery(stream); }, timeout, status);
}

bool busy(cudaStream_t stream) { return queried(cudaStreamQuery(stream)) == cudaErrorNotReady; }

bool busy(cudaEvent_t event) { return queried(cudaEventQuery(event)) == cudaErrorNotReady; }

}  // namespace kstage_cuda_test
