/* Kokkos < 4.7 against CUDA >= 13: the old runtime signatures it calls, and its float-based
 * half_t.
 *
 * CUDA 13 removed the device-ordinal forms of cudaMemPrefetchAsync and cudaMemAdvise (they take a
 * cudaMemLocation now) and gave cudaGraphAddDependencies an edge-data argument. Kokkos 3.4 (and
 * 4.x before 4.7) still calls the old forms, and its CUDA half_t header does not compile against
 * CUDA 13's cuda_fp16.h. It must come before Kokkos' CUDA headers in every translation unit that
 * includes them, Kokkos' own too: scripts/setup.sh --cuda appends an #include of it to the
 * KokkosCore_config.h of the Kokkos 3.4 it builds; with a Kokkos 4.x before 4.7 of your own, pass
 * -include <this file> to Kokkos' and kstage's builds. It does nothing unless nvcc compiles
 * against CUDART_VERSION >= 13000. Never use it with Kokkos 4.7+, which needs none of it.
 */
#ifndef KSTAGE_CUDA13_COMPAT_H
#define KSTAGE_CUDA13_COMPAT_H

#if defined(__cplusplus) && defined(__CUDACC__)
#include <cuda_runtime_api.h>

#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000

/* The old signature: dstDevice is a device ordinal, or cudaCpuDeviceId (-1) for the host. */
inline cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t count, int dstDevice,
                                        cudaStream_t stream = 0) {
  cudaMemLocation location{};
  location.type =
      dstDevice == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = dstDevice == cudaCpuDeviceId ? 0 : dstDevice;
  return cudaMemPrefetchAsync(ptr, count, location, 0u, stream);
}

inline cudaError_t cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice,
                                 int device) {
  cudaMemLocation location{};
  location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  location.id = device == cudaCpuDeviceId ? 0 : device;
  return cudaMemAdvise(ptr, count, advice, location);
}

inline cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                            const cudaGraphNode_t* to, size_t count) {
  return cudaGraphAddDependencies(graph, from, to, nullptr, count);
}

/* Kokkos 3.4 picks its float-based half_t for Maxwell; its cuda_fp16-based one is rejected by
 * CUDA 13. Nothing else in Kokkos 3.4 reads this macro for a Hopper or Ampere build. */
#ifndef KOKKOS_ARCH_MAXWELL50
#define KOKKOS_ARCH_MAXWELL50
#endif

#endif /* CUDART_VERSION >= 13000 */
#endif /* __cplusplus */
#endif /* KSTAGE_CUDA13_COMPAT_H */
