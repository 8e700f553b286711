// SPDX-License-Identifier: Apache-2.0
// What the engine needs from a Kokkos backend: memory in one space, and the
// data-movement kernels run on an execution space that can reach it. The
// engine calls these once per batch (never per element); each implementation
// lives in backends/<name>/ and runs the templated kernels of core/kernels/.
#pragma once

#include "core/buffer.hpp"
#include "core/kernels/copy_ops.hpp"
#include "core/status.hpp"

namespace kstage::core {

class Backend {
 public:
  virtual ~Backend() = default;
  // The device whose memory this backend allocates (its columns' residency).
  virtual DLDevice device() const = 0;
  // Uninitialised memory; OUT_OF_MEMORY (never an exception) when it fails.
  virtual Result<BufferPtr> allocate(size_t bytes) = 0;
  // Whether kernels of this backend may dereference memory of device `d`.
  virtual bool can_access(DLDevice d) const = 0;

  virtual void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  virtual void row_copy(const kernels::RowCopy& c) = 0;
  // The gather of `c` with its src_index validated in the same pass: returns
  // the lowest i with src_index[i] >= src_rows (its row is not copied), or
  // c.n when every index is in range. Completes before returning.
  virtual size_t checked_gather(const kernels::RowCopy& c, uint64_t src_rows) = 0;
  virtual void masked_gather(const kernels::MaskedGather& c) = 0;
  virtual void ragged_copy(const kernels::RaggedCopy& c, size_t word) = 0;
  virtual void strided_copy(const kernels::StridedCopy& c) = 0;
  // Wait for all work this backend enqueued.
  virtual void fence() = 0;
};

// The backends a stage uses; built by backends/ for what the build enabled.
class BackendSet {
 public:
  virtual ~BackendSet() = default;
  // The backend for the host (always present).
  virtual Backend& host() = 0;
  // The backend whose memory a column resides in when its data comes from
  // `source` (host-pinned and CPU memory -> the host). NOT_SUPPORTED, naming
  // the device type, when the build has no backend for it.
  virtual Result<Backend*> residency_for(DLDevice source) = 0;
  // The backend that owns memory of `device` exactly (a column's residency).
  virtual Result<Backend*> for_device(DLDevice device) = 0;
};

// Implemented in backends/: the set for this build and configuration.
Result<std::unique_ptr<BackendSet>> make_backend_set(const kstage_config_t& config);

// Initialise Kokkos unless the application did; if we did, finalise it at
// process exit after calling `before_finalize` (which must drop all Views).
Status ensure_kokkos_initialized(void (*before_finalize)());

}  // namespace kstage::core
