// SPDX-License-Identifier: Apache-2.0
// Kokkos Tools regions for kstage's public operations: each C entry point that does work pushes
// "kstage::<operation>" (the function's name without its kstage_ prefix: kstage::write_attribute,
// kstage::advance_write_floor, ...) for its duration on the calling thread, so that a profile
// taken with a Kokkos Tools connector (space-time-stack, NVTX, ROCTX, Caliper, VTune) shows how
// much time went into each, with the kernels it launched nested inside.
//
// Kokkos before 4.1 has no Kokkos::Profiling::ScopedRegion, so this is ArborX's way: a scoped
// helper that pushes in its constructor and pops in its destructor -- balanced also when the
// call fails or throws. With no tool loaded it costs one check (no string is built).
//
// Declared here, in plain C++, for api/; implemented with Kokkos in backends/kokkos_runtime.cpp.
#pragma once

namespace kstage::core {

class ProfilingRegion {
 public:
  // `name` must outlive the region (a string literal).
  explicit ProfilingRegion(const char* name) noexcept;
  ~ProfilingRegion();
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;

 private:
  bool pushed_;
};

}  // namespace kstage::core
