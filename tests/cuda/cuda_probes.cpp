// SPDX-License-Identifier: Apache-2.0
#include "cuda/cuda_probes.hpp"

#include <kstage/dlpack.hpp>

#include <cuda_runtime_api.h>

namespace kstage_cuda_probe {

namespace {
// Spins about `cycles` clock ticks per thread, then writes: a producer slow
// enough that a consumer not ordered after it would read the old values.
__global__ void slow_fill(float* p, size_t n, long long cycles) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (i < n) p[i] = float(i % 1000);
}
}  // namespace

// A raw kernel, not a Kokkos instance: destroying a Kokkos::Cuda instance
// waits for the device, which would finish the producer before the write.
void produce(float* p, size_t n, uintptr_t stream) {
  const unsigned threads = 256;
  const unsigned blocks = unsigned((n + threads - 1) / threads);
  slow_fill<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(p, n, 20000000LL);
}

std::string bridge_cuda_space_round_trip() {
  Kokkos::View<float*, Kokkos::CudaSpace> v("v", 8);
  DLManagedTensorVersioned* e = kstage::export_dlpack_versioned(v);
  if (e->dl_tensor.device.device_type != kDLCUDA) return "CudaSpace did not export as kDLCUDA";
  if (e->dl_tensor.device.device_id != Kokkos::Cuda().cuda_device())
    return "the export's device_id is not Kokkos' device " +
           std::to_string(Kokkos::Cuda().cuda_device());
  auto back = kstage::import_dlpack<float*, Kokkos::CudaSpace, Kokkos::LayoutRight>(e);
  if (back.view().data() != v.data()) return "the import does not alias the View";
  return "";
}

std::string bridge_wrong_ordinal_refused() {
  Kokkos::View<float*, Kokkos::CudaSpace> v("v", 8);
  DLManagedTensorVersioned* e = kstage::export_dlpack_versioned(v);
  e->dl_tensor.device.device_id += 1;  // memory of Kokkos' device, labelled the next one
  try {
    (void)kstage::import_dlpack<float*, Kokkos::CudaSpace, Kokkos::LayoutRight>(e);
    return "a tensor with the wrong device_id was imported";
  } catch (const kstage::DLPackError& err) {
    if (err.status() != KSTAGE_INVALID_ARGUMENT) return std::string("wrong status: ") + err.what();
    if (std::string(err.what()).find("device_id") == std::string::npos)
      return std::string("the message does not name the ordinal: ") + err.what();
  }
  return "";
}

std::string bridge_uvm_and_pinned() {
  Kokkos::View<float*, Kokkos::CudaUVMSpace> u("u", 8);
  DLManagedTensorVersioned* e = kstage::export_dlpack_versioned(u);
  const bool managed = e->dl_tensor.device.device_type == kDLCUDAManaged;
  e->deleter(e);
  if (!managed) return "CudaUVMSpace did not export as kDLCUDAManaged";
  Kokkos::View<float*, Kokkos::CudaHostPinnedSpace> h("h", 8);
  e = kstage::export_dlpack_versioned(h);
  if (e->dl_tensor.device.device_type != kDLCUDAHost) {
    e->deleter(e);
    return "CudaHostPinnedSpace did not export as kDLCUDAHost";
  }
  // Pinned memory is host memory: a HostSpace View may view it.
  auto host_view = kstage::import_dlpack<float*, Kokkos::HostSpace, Kokkos::LayoutRight>(e);
  if (host_view.view().data() != h.data()) return "pinned memory was not viewed in place";
  return "";
}

std::string bridge_device_not_host() {
  Kokkos::View<float*, Kokkos::CudaSpace> v("v", 8);
  DLManagedTensorVersioned* e = kstage::export_dlpack_versioned(v);
  try {
    (void)kstage::import_dlpack<float*, Kokkos::HostSpace, Kokkos::LayoutRight>(e);
    return "device memory was imported as a HostSpace View";
  } catch (const kstage::DLPackError& err) {
    if (err.status() != KSTAGE_NOT_SUPPORTED) return std::string("wrong status: ") + err.what();
  }
  return "";
}

}  // namespace kstage_cuda_probe
