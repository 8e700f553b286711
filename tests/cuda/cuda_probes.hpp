// SPDX-License-Identifier: Apache-2.0
// The Kokkos side of tests/cuda/test_cuda_device.cpp, behind plain functions:
// nvcc compiles cuda_probes.cpp (it uses Kokkos Views and kernels), while the
// Catch2 test file stays host C++ (nvcc 13's front end does not finish
// Catch2 test cases in a translation unit that includes Kokkos).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kstage_cuda_probe {

// Writes p[i] = i % 1000 for i < n with a slow kernel (tens of
// milliseconds) on `stream` (a cudaStream_t), without waiting for it.
void produce(float* p, size_t n, uintptr_t stream);

// The DLPack bridge on CUDA spaces. Each returns "" when everything holds,
// else what does not.
std::string
bridge_cuda_space_round_trip();  // CudaSpace -> kDLCUDA, Kokkos' ordinal, aliasing import
std::string bridge_wrong_ordinal_refused();  // a kDLCUDA tensor whose device_id lies
std::string bridge_uvm_and_pinned();         // CudaUVMSpace, CudaHostPinnedSpace
std::string bridge_device_not_host();        // kDLCUDA never viewed as HostSpace

}  // namespace kstage_cuda_probe
