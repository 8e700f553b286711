// SPDX-License-Identifier: Apache-2.0
// What the engine needs from a backend (docs/design.md, "The backend contract"): memory in
// one space, data-movement kernels enqueued on one execution-space instance per stage, and
// completion the engine can hand to ops and readers. The engine calls these once per batch
// (never per element); each implementation lives in backends/<name>/ and runs the templated
// kernels of core/kernels/. This header is the whole interface: backends/ includes it, and
// nothing in core/ includes a backends/ header.
//
// The contract is asynchronous. Work is enqueued in call order on the
// stage's instance and runs in that order; nothing fences after each call.
// A backend whose work completes before each call returns (the host) says so
// with synchronous(), and its record() is null.
//
// Memory rules for the kernel descriptors (core/kernels/copy_ops.hpp):
//  - data pointers (dst, src, the rows a RaggedCopy points at) are in this
//    backend's memory, or in memory its kernels can reach (can_access);
//  - index, offset, mask and row-pointer arrays are host memory unless the
//    descriptor says they are resident (`indices_resident`), and a device
//    backend uploads them itself, once per call. Host arrays may be freed or
//    reused as soon as the call returns.
//
// Errors. Each entry below says how it fails, in one of these ways:
//  - [status]: it returns a Status or Result<T> (core/status.hpp) naming the failure, and
//    throws nothing for that failure;
//  - [throws]: it returns nothing to check (the enqueues). When the device runtime refuses
//    the work although kstage's arguments are valid, it throws kstage::DeviceFault
//    (core/status.hpp: a device fault); when an allocation it needs (an index upload, the
//    runtime's own) finds no device or host memory, it throws std::bad_alloc. The host
//    backend throws nothing of its own here; Kokkos' exceptions pass through;
//  - [never fails]: it has no failure to report;
//  - noexcept entries never throw: where they cannot track the work they must wait for, they
//    wait for it instead.
// Any entry that is not noexcept may also throw std::bad_alloc when host memory for its
// bookkeeping runs out (a message, a list, a shared_ptr's control block).
//
// Who catches what is thrown: every C entry point runs its body in capi::guard
// (api/guard.hpp), which turns kstage::DeviceFault into KSTAGE_DEVICE_ERROR, std::bad_alloc
// into KSTAGE_OUT_OF_MEMORY and any other exception into KSTAGE_INTERNAL, with the message as
// the thread's last error. Before that, callers that must leave the stage unchanged catch
// what they can handle: a seal (Column::apply_write) turns std::bad_alloc into
// OUT_OF_MEMORY with the column as it was; staging a write (stage_write, core/transport.hpp;
// its move_rows phase, core/transport.cpp) fences the backends it enqueued on when an
// exception interrupts moving the rows, and rethrows, so that no queued copy reads the
// caller's memory after the call returns. No entry aborts the process (the emulated device's
// own checks, in test builds only, do by default).
#pragma once

#include "core/buffer.hpp"
#include "core/kernels/copy_ops.hpp"
#include "core/kernels/transform_ops.hpp"
#include "core/status.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace kstage::core {

// The completion of work enqueued up to some point on one backend instance.
class Completion {
 public:
  virtual ~Completion() = default;
  // Whether the work is done (a device failure counts as done, and status() says so).
  // [never fails]
  virtual bool done() const = 0;
  // Waits at most `timeout_ns` (KSTAGE_TIMEOUT_INFINITE: forever; 0 polls);
  // true once the work is done. [never fails]: a device failure ends the wait (see status()).
  virtual bool wait(uint64_t timeout_ns) const = 0;
  // The {stream, event} a consumer orders itself after (its event signals
  // when the work is done). Valid while this object lives. [never fails]
  virtual kstage_device_sync_t sync() const = 0;
  // Once done: how the work ended. KSTAGE_DEVICE_ERROR naming the runtime's
  // error when the device failed it (a fault in a kernel or copy). [status]
  virtual Status status() const { return Status::OK(); }
};
using CompletionPtr = std::shared_ptr<const Completion>;

// What a device mask selects, for the host's bookkeeping (which prims a write reaches):
// the mask's words, copied on the device when the write was staged (the caller's mask may be
// gone by the seal), read back the first time the host asks.
class MaskSelection {
 public:
  virtual ~MaskSelection() = default;
  // Waits for the copy, then ceil(n / 64) words. [status] KSTAGE_DEVICE_ERROR when the
  // device failed.
  virtual Result<std::vector<uint64_t>> words() const = 0;
};

// What a device found checking a device-resident index map as it gathered through it
// (Backend::checked_gather_resident): read on the host once the device is done, so the op
// that owns it reports a bad entry without the host ever reading the map.
class IndexCheck {
 public:
  static constexpr uint64_t kNone = UINT64_MAX;
  // The lowest entry out of range (position kNone: none) and its value.
  struct Bad {
    uint64_t position = kNone;
    int64_t value = 0;
  };
  virtual ~IndexCheck() = default;
  // Waits for the checking kernel, then what it found. [status] KSTAGE_DEVICE_ERROR when the
  // device failed the work. (A bad entry is a value, not an error: the op's WriteCheck,
  // core/write_check.hpp, makes it KSTAGE_INVALID_ARGUMENT.)
  virtual Result<Bad> first_bad() const = 0;
  // A check with nothing to check (no entries).
  static std::shared_ptr<const IndexCheck> passed() {
    struct Passed final : IndexCheck {
      Result<Bad> first_bad() const override { return Bad{}; }
    };
    return std::make_shared<Passed>();
  }
};

// Releases memory after a consumer's stream: what an export made for a
// consumer stream keeps, since its deleter may run after the stage is gone.
class StreamRelease {
 public:
  virtual ~StreamRelease() = default;
  // Drops `held` once the work enqueued on `stream` (a kstage_device_sync_t
  // stream value) by now has completed. Runs in a deleter: never throws and
  // never blocks, but where it cannot track the stream (then it waits). Errors of the
  // runtime's are dropped here: a faulty device reports at its next checked call.
  // KSTAGE_STREAM_UNORDERED (no consumer stream named: an Arrow release, DLPack's -1): once
  // every stream of the device has run its work enqueued by now -- this waits for the device.
  // `held` may be null: then it only waits.
  virtual void release_after(BufferPtr held, uintptr_t stream) const noexcept = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The device whose memory this backend allocates (its columns' residency). [never fails]
  virtual DLDevice device() const = 0;
  // Whether kernels of this backend may dereference memory of device `d`. [never fails]
  virtual bool can_access(DLDevice d) const = 0;
  // Work completes before each call returns (and record() is null). [never fails]
  virtual bool synchronous() const = 0;
  // Whether `data` really is memory of `claimed` (a source tensor's DLDevice),
  // where the backend can tell: a GPU runtime knows each pointer's device.
  // [status] INVALID_ARGUMENT naming `what` and both devices when it is not, or when the
  // runtime cannot tell.
  virtual Status check_memory(const void* /*data*/, DLDevice /*claimed*/,
                              const std::string& /*what*/) const {
    return Status::OK();
  }

  // Whether a copy from the host memory at `host` (copy_from_host) may read
  // it when the call is made rather than in stream order: a GPU runtime may
  // stage pageable memory at the call, before any event its stream waits on. [never fails]:
  // true when the runtime cannot tell.
  virtual bool reads_host_at_call(const void* /*host*/) const { return false; }

  // Uninitialised memory, kBufferAlignment-aligned. [status] OUT_OF_MEMORY (never an
  // exception) when the device or host has no memory for it; DEVICE_ERROR when the runtime
  // fails it otherwise. A buffer's memory is reused only after the work enqueued before its
  // last holder let go has completed (stream-ordered release).
  virtual Result<BufferPtr> allocate(size_t bytes) = 0;
  // A hint: the first `bytes` of `buffer` (this backend's) are about to be written whole. The
  // host backend makes their fresh pages resident in one call where its kernel would touch them
  // from the calling thread (a first touch faults one 4 KiB page at a time); other backends
  // ignore it. Contents are unchanged. [never fails]
  virtual void populate(DeviceBuffer& /*buffer*/, size_t /*bytes*/) noexcept {}
  // A buffer of this backend's memory that someone else owns (an adopted
  // DLPack tensor), released in stream order like allocate()'s. Cannot fail but for
  // std::bad_alloc (host memory), and `foreign` is released then too (its deleter runs).
  virtual BufferPtr adopt(std::unique_ptr<DeviceBuffer> foreign) = 0;
  // `bytes` of host memory copied into this backend's memory (read before
  // this returns), for an index array kept resident across calls: a
  // column's cached row map. Only for backends that cannot read the host. [status]
  // allocate()'s, and DEVICE_ERROR when the copy fails; the host backend: INTERNAL (never
  // asked: it reads host arrays where they are).
  virtual Result<BufferPtr> upload(const void* host, size_t bytes) = 0;

  // --- kernels and copies: enqueued, in call order ------------------------
  // Every entry of this section that returns void is [throws] (see "Errors" above).
  // Within this backend's memory.
  virtual void copy_bytes(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  // Host memory -> this backend's memory; `src` stays valid until the work
  // completes (record()), as a write's source tensors do until its op does.
  virtual void copy_from_host(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  // This backend's memory -> host memory; `dst` is written when the work completes.
  virtual void copy_to_host(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  virtual void row_copy(const kernels::RowCopy& c) = 0;
  // The gather of `c` with its src_index (host memory) validated: returns the
  // lowest i with src_index[i] >= src_rows (nothing is copied then), or c.n
  // when every index is in range and the gather is enqueued. A bad index is a value, not an
  // error (the caller names it); the enqueue is [throws].
  virtual size_t checked_gather(const kernels::RowCopy& c, uint64_t src_rows) = 0;
  virtual void masked_gather(const kernels::MaskedGather& c) = 0;
  // The gather of `c` whose src_index is already in this backend's memory (a write's device
  // index map, read in place: indices_resident), every entry checked against `src_rows` on the
  // device in the same pass (a min-reduction, nothing read back until first_bad() is asked).
  // Rows with a bad entry are not copied. Device backends only: the host checks host maps.
  // [status] for its report's memory (allocate()'s) and NOT_SUPPORTED on a backend without a
  // device; the launch itself is [throws].
  virtual Result<std::shared_ptr<const IndexCheck>> checked_gather_resident(
      const kernels::RowCopy& /*c*/, uint64_t /*src_rows*/) {
    return error(KSTAGE_NOT_SUPPORTED, "this backend has no device to check an index map on");
  }
  // The masked gather of `c` whose mask is already in this backend's memory (a write's device
  // mask, read in place): rows packed in element order into c.dst (room for c.n rows; the
  // positions go to device scratch, c.selected unused), and the mask kept for the host's
  // bookkeeping (MaskSelection). Device backends only. [status] and [throws] as
  // checked_gather_resident.
  virtual Result<std::shared_ptr<const MaskSelection>> masked_gather_resident(
      const kernels::MaskedGather& /*c*/) {
    return error(KSTAGE_NOT_SUPPORTED, "this backend has no device to read a mask on");
  }
  virtual void ragged_copy(const kernels::RaggedCopy& c, size_t word) = 0;
  virtual void strided_copy(const kernels::StridedCopy& c) = 0;
  // World matrices (core/kernels/world_transform.hpp): every array `k` points at is memory
  // this backend's kernels read, but k.level_offsets (host memory, read before this returns).
  virtual void world_transform(const kernels::WorldTransform& k) = 0;

  // --- ordering ------------------------------------------------------------
  // Orders this backend's later work after a producer's {stream, event}
  // (a stream wait, never a host block, where the backend has streams).
  // `field` names the argument in messages: a backend that cannot use the
  // value (the host takes {0, 0}) says so as INVALID_ARGUMENT. [status] INVALID_ARGUMENT
  // naming `field` when the runtime refuses the caller's handle; DEVICE_ERROR when it
  // reports a device fault.
  virtual Status order_after(const kstage_device_sync_t& producer, const char* field) = 0;
  // Records the consumer's event `consumer.event` after all work enqueued so far, and makes
  // a non-zero `consumer.stream` wait for that work (reads: kstage.h's kstage_device_sync_t
  // rules). [status] as order_after.
  virtual Status record_into(const kstage_device_sync_t& consumer, const char* field) = 0;
  // The completion of all work enqueued so far; null when it is complete. [throws]: a
  // device backend that cannot create or record its event, or whose stream reports a
  // fault, throws kstage::DeviceFault.
  virtual CompletionPtr record() = 0;
  // What orders the release of this backend's memory after a consumer's
  // stream (null: nothing to order, host memory). Cannot fail but for std::bad_alloc.
  virtual std::shared_ptr<const StreamRelease> stream_release() { return nullptr; }
  // Waits for all work this backend enqueued. [never fails]: a device failure is not
  // reported here (failure paths and destructors fence): it surfaces at the next checked
  // call.
  virtual void fence() = 0;
  // Waits for all work this backend enqueued, and reports a device failure
  // (KSTAGE_DEVICE_ERROR): for callers that use the results next. [status]
  virtual Status finish() {
    fence();
    return Status::OK();
  }

  // --- host bookkeeping ----------------------------------------------------
  // Calls body(context, begin, end) over [0, n) in chunks, every index in
  // exactly one call, and returns when all are done: the engine's loops over
  // host tables (a large seal's per-row stamps) run in parallel where this
  // backend's host execution is. A plain function and its context, not a
  // std::function: nothing to allocate, so nothing can fail. Device backends
  // keep the default, one call on this thread (their seals' kernels run on
  // the device meanwhile). [never fails]; `body` must not throw (inside a parallel region an
  // exception would end the process).
  using HostChunk = void (*)(const void* context, size_t begin, size_t end);
  virtual void host_for(size_t n, HostChunk body, const void* context) {
    if (n > 0) body(context, 0, n);
  }
};

// `bytes` of `backend`'s memory (at least 1) that the caller writes whole right away: allocate()
// and populate(). [status] allocate()'s.
inline Result<BufferPtr> allocate_written(Backend& backend, size_t bytes) {
  BufferPtr out;
  KSTAGE_ASSIGN_OR_RETURN(out, backend.allocate(std::max<size_t>(bytes, 1)));
  backend.populate(*out, bytes);
  return out;
}

// Waits on the host for all the work `backend` has queued so far; the status of that work (its
// device's failure). OK at once for a synchronous backend (record() is null). [status]
inline Status wait_on_host(Backend& backend) {
  CompletionPtr c = backend.record();
  if (!c) return Status::OK();
  c->wait(KSTAGE_TIMEOUT_INFINITE);
  return c->status();
}

// How a backend folder makes backends of its device type (backends/<name>/
// defines one, and CMake lists it in the registry of the build).
struct BackendFactory {
  const char* name;     // for messages: "host", "emulated", "cuda"
  int32_t device_type;  // DLDeviceType of the memory it allocates
  // Devices of this type the process has (ordinals 0 .. count-1). [never fails]: 0 when
  // the runtime has no driver or device.
  int32_t (*device_count)();
  // A backend for `device_id` (< device_count()), one per stage. [status]: DEVICE_ERROR when
  // the runtime cannot make its stream; NOT_SUPPORTED for another GPU than the one Kokkos
  // runs on; INVALID_ARGUMENT for a config it cannot serve (the host: host_execution).
  Result<std::unique_ptr<Backend>> (*make)(int32_t device_id, const kstage_config_t& config);
  // Memory both sides read (kDLCUDAManaged): a column made from it lives on
  // this backend's device of the same ordinal. 0: none.
  int32_t managed_device_type = 0;
};

// The factories of this build: the registry.cpp that backends/CMakeLists.txt generates in
// the build tree, one entry per folder of KSTAGE_BACKENDS. [never fails]
const std::vector<const BackendFactory*>& registered_backends();

// The backends a stage uses: the host always; a device backend the first
// time a column, a source tensor or a read names its device.
class BackendSet {
 public:
  virtual ~BackendSet() = default;
  // The backend for the host (always present). [never fails]
  virtual Backend& host() = 0;
  // The backend whose memory a column resides in when its data comes from
  // `source` (host-pinned and CPU memory -> the host). NOT_SUPPORTED, naming
  // the device type, when the build has no backend for it. [status] also for_device()'s.
  virtual Result<Backend*> residency_for(DLDevice source) = 0;
  // The backend that owns memory of `device` exactly (a column's residency), made the first
  // time it is asked for. [status] NOT_SUPPORTED (no backend for the type), INVALID_ARGUMENT
  // (an ordinal the process lacks), or BackendFactory::make's.
  virtual Result<Backend*> for_device(DLDevice device) = 0;
  // Every backend made so far (fence them all before dropping buffers). Cannot fail but
  // for std::bad_alloc.
  virtual std::vector<Backend*> active() = 0;
};

// OK when `device` is {0, 0}, host memory, or a device this build has a
// backend for and the process has (no backend is made, Kokkos not needed):
// kstage_create checks a residency before it initialises Kokkos on it. [status]
// NOT_SUPPORTED or INVALID_ARGUMENT, as for_device().
Status check_device_exists(DLDevice device);

// Implemented in backends/ (backend_set.cpp): the set for this build and configuration.
// [status] INTERNAL when the build registered no host backend; the host's make(); for a
// config.residency, for_device()'s.
Result<std::unique_ptr<BackendSet>> make_backend_set(const kstage_config_t& config);

// Copies `bytes` from `src` (memory of `from`) to `dst` (memory of `to`):
// within one backend, host <-> device, or device <-> device (through the
// host). Enqueued on the device side; a copy that lands on a synchronous
// backend (the host) has completed when this returns. [status] DEVICE_ERROR when a device
// fails the copy it waits for (to the host, device to device); the copies it enqueues are
// [throws].
Status transfer(Backend& to, std::byte* dst, Backend& from, const std::byte* src, size_t bytes);

// Initialise Kokkos unless the application did -- on the GPU `residency`
// names, when it names one -- and if we did, finalise it at process exit
// after calling `before_finalize` (which must drop every buffer: releasing one needs its
// backend's stream and Kokkos instance). (backends/kokkos_runtime.cpp) [status] DEVICE_ERROR
// when Kokkos::initialize throws (it is caught here); INTERNAL when Kokkos was finalised.
Status ensure_kokkos_initialized(void (*before_finalize)(), DLDevice residency);
// Whether Kokkos is initialised and not finalised: buffers may be released. [never fails]
bool kokkos_is_running();
// The Kokkos kstage runs on, for kstage_build_info (backends/kokkos_runtime.cpp): the version
// compiled against ("3.4.1"), and once Kokkos is initialised the version the loaded library
// reports (its print_configuration's) and the thread count of its host parallel space.
struct KokkosInfo {
  std::string built;
  std::string host_parallel;  // DefaultHostExecutionSpace's name: "OpenMP", "Threads", "Serial"
  bool initialized = false;
  std::string running;  // "" before initialisation
  int threads = 0;      // 0 before initialisation
};
KokkosInfo kokkos_info();  // cannot fail but for std::bad_alloc

}  // namespace kstage::core
