// SPDX-License-Identifier: Apache-2.0
// What the CUDA test programs (tests/cuda/test_cuda_*.cpp) share: device and pinned arrays,
// kstage's transfer counts, bounded waits on kstage's ops and groups, and a column's values
// read back to the host. Host C++ (g++); the held stream's kernel is in held_stream.cpp.
#pragma once

#include "support.hpp"

#include "cuda/held_stream.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kstage_cuda_test {
using namespace kstage_test;

inline constexpr DLDevice kGpu = {kDLCUDA, 0};
inline constexpr DLDevice kHost = {kDLCPU, 0};
// Every bounded wait's limit: far beyond what a case's work takes, and beyond a hold's own
// timeout (held_stream.hpp), so that a hold that gave up is seen first.
inline constexpr std::chrono::milliseconds kWaitLimit{10000};

// cudaMalloc'ed elements holding `values`, freed at scope exit (allocate them before holding a
// stream: they are not a hold's concern).
template <class T>
struct GpuArray {
  explicit GpuArray(const std::vector<T>& values) : n(values.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)) ==
            cudaSuccess);
    if (n)
      REQUIRE(cudaMemcpy(p, values.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~GpuArray() { (void)cudaFree(p); }
  GpuArray(const GpuArray&) = delete;
  GpuArray& operator=(const GpuArray&) = delete;
  std::vector<T> get() const {
    std::vector<T> out(n);
    if (n) REQUIRE(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
  T* p = nullptr;
  size_t n;
};

// A 1-d float tensor over a GpuArray.
struct GpuFloats : GpuArray<float> {
  explicit GpuFloats(const std::vector<float>& v) : GpuArray<float>(v) {
    shape[0] = int64_t(n);
    t = tensor(p, f32(), 1, shape, nullptr, kGpu);
  }
  int64_t shape[1];
  DLTensor t;
};

// Pinned host elements (cudaMallocHost): a held stream's copies read or write them in stream
// order, and the host reads them once that stream is done.
template <class T>
struct PinnedArray {
  explicit PinnedArray(const std::vector<T>& values) : n(values.size()) {
    REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)) ==
            cudaSuccess);
    std::copy(values.begin(), values.end(), p);
  }
  ~PinnedArray() { (void)cudaFreeHost(p); }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  std::vector<T> get() const { return std::vector<T>(p, p + n); }
  T* p = nullptr;
  size_t n;
};

struct Counts {
  uint64_t up = 0, down = 0, uploads = 0;
  static Counts now() {
    Counts c;
    KS_OK(kstage_transfer_counts(&c.up, &c.down, &c.uploads));
    return c;
  }
};

// An op's outcome within kWaitLimit (KSTAGE_TIMEOUT if it is not done by then).
inline kstage_status_t wait_op(Stage& s, kstage_op_t op) {
  return kstage_wait(s.stage, op, uint64_t(std::chrono::nanoseconds(kWaitLimit).count()));
}
// finish() with a bounded wait.
inline void finish_bounded(Stage& s, kstage_op_t op) {
  KS_OK(wait_op(s, op));
  KS_OK(kstage_release_op(s.stage, op));
}
// Whether a group's data is there within kWaitLimit (a group with no event is).
inline bool group_ready(const kstage_device_sync_t& sync) {
  return sync.event == 0 || wait_for(reinterpret_cast<cudaEvent_t>(sync.event), kWaitLimit);
}

// Column `a`'s values in the query's prim order, a compact read to `target` (copied to the
// host here); `where`, if given, gets the device the group's tensor is on.
inline std::vector<float> read_floats(Stage& s, kstage_query_t q, kstage_token_t a, DLDevice target,
                                      DLDevice* where = nullptr) {
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  d.target_device = target;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  if (where) *where = g.data.tensors[0].device;
  const std::vector<float> out = group_floats(g, 0, size_t(g.prim_count));
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  return out;
}

// The same read to the host.
inline std::vector<float> host_values(Stage& s, kstage_query_t q, kstage_token_t a) {
  DLDevice where{};
  const std::vector<float> out = read_floats(s, q, a, kHost, &where);
  REQUIRE(where.device_type == kDLCPU);
  return out;
}

}  // namespace kstage_cuda_test
