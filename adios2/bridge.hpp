// SPDX-License-Identifier: Apache-2.0
// The ADIOS2 bridge's internals: its errors, its streams, the dtypes it can put, and the names of
// a step's variables and attributes (the file layout of docs/adios2.md, in one place).
#pragma once

#include <kstage/kstage_adios2.h>

#include "adios2/collective.hpp"

#include <adios2.h>

#include <algorithm>
#include <cctype>
#include <complex>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace kstage::adios2_bridge {

// ---- errors ------------------------------------------------------------------------------------
// A failure: its status and message (the C API's kstage_adios2_last_error).
struct Failure {
  kstage_status_t status;
  std::string message;
};
[[noreturn]] void fail(kstage_status_t status, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
// A kstage call's status: throws its failure, with kstage_last_error() after `what`.
void check(kstage_status_t status, const char* what);
// Runs `body`, turning every exception into a status and this thread's message.
kstage_status_t guard(const std::function<void()>& body) noexcept;
// The failure the exception being handled stands for (ADIOS2's own exceptions: OP_FAILED).
Failure current_failure() noexcept;
// A message on kstage's "adios2" log channel (kstage_log_message): what the bridge would
// otherwise say nowhere. Never throws.
void note(kstage_log_severity_t severity, const char* format, ...) noexcept
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
// What an ADIOS2 call on a cleanup path threw, which the call cannot report (it is already
// failing, or has nothing to fail): a WARNING on the "adios2" channel naming `what`. Call it
// inside a catch block.
void note_swallowed(const char* what) noexcept;

// A descriptor the caller fills (kstage_adios2_open_desc_t, kstage_adios2_step_desc_t,
// kstage_adios2_restart_desc_t), by kstage.h's struct_size rule: a size below its first released
// layout (`first_size` bytes) is refused; an older caller's smaller struct leaves the fields past
// its size at the defaults `d` holds (the caller checks that a field its size cuts has only zero
// bytes inside it); a newer caller's bytes past this struct must be zero. `init` names the
// initialiser for the message. NULL: the defaults `d` already holds.
template <class T>
void copy_descriptor(const T* in, T& d, const char* init, size_t first_size = sizeof(T)) {
  if (in == nullptr) return;
  if (in->struct_size < first_size || in->struct_size > KSTAGE_MAX_STRUCT_SIZE)
    fail(KSTAGE_INVALID_ARGUMENT, "desc.struct_size is %u: start from %s() (this library's is %zu)",
         unsigned(in->struct_size), init, sizeof(T));
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < in->struct_size; ++i)
    if (bytes[i] != 0)
      fail(KSTAGE_NOT_SUPPORTED, "desc sets byte %zu, a field this kstage_adios2 does not know", i);
  std::memcpy(&d, in, std::min<size_t>(sizeof(T), in->struct_size));
}

// ---- streams -----------------------------------------------------------------------------------
struct Stream {
  std::shared_ptr<adios2::ADIOS> adios;
  adios2::IO io;
  adios2::Engine engine;
  kstage_adios2_mode_t mode = KSTAGE_ADIOS2_WRITE;
  std::shared_ptr<Stream> inline_writer;  // an Inline reader keeps its writer's IO alive
  // The ranks that write (each its block of every global array) or read (each some of the
  // writers' blocks) the stream's steps: this process alone, or an MPI communicator's.
  std::shared_ptr<Collective> ranks = std::make_shared<Collective>();
  std::mutex mutex;        // one call at a time per stream
  bool step_open = false;  // a reader's BeginStep that returned NotReady retries
  // Inline hands the reader the writer's own buffers: a step's data lives until the next step.
  bool keeps_step_data = false;
  // The engine puts and gets GPU memory (BP5 with an ADIOS2 that has GPU support): device columns
  // may go from and to device memory.
  bool device_memory = false;
  std::shared_ptr<void> last_step_data;
  // A BP5 writer seals its folder when closed (manifest.hpp): its name, and what it wrote.
  bool seals = false;
  std::string name;
  uint64_t steps_written = 0;
  uint64_t last_ordinal = 0;
  bool incomplete_step = false;  // a step's puts failed after it began: not sealed at close
  // A reader of a folder checked against its manifest (desc.manifest): each file's size then,
  // checked again before each step is read (a file cut since is refused, not waited for).
  std::string verified_folder;
  std::map<std::string, uint64_t> verified_sizes;
  // Buffers of a reader's Gets that threw, which ADIOS2 may still write into until it is closed
  // (step_reader.cpp's Reader::parked).
  std::vector<std::shared_ptr<void>> parked_reads;
};
// Whether an engine type names ADIOS2's Inline engine (ADIOS2 takes engine types in any case).
inline bool is_inline_engine(const char* engine) {
  std::string e = engine ? engine : "";  // NULL: BP5
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e == "inline";
}
// Whether an opened engine (Engine::Type()) puts from and gets into GPU buffers: BP5's writer and
// reader ("GPU-aware I/O" in ADIOS2's user guide; BP4's reader is not documented to, BP3 and
// HDF5 -- which a "File" engine may turn out to be -- do not).
inline bool takes_gpu_buffers(const std::string& engine) {
  return engine == "BP5Writer" || engine == "BP5Reader";
}
std::shared_ptr<Stream> find_stream(kstage_adios2_stream_t handle);
kstage_adios2_stream_t add_stream(std::shared_ptr<Stream> s);
std::shared_ptr<Stream> remove_stream(kstage_adios2_stream_t handle);
// The caller's open descriptor, checked (struct_size, mode, parameter pairs), or the defaults.
kstage_adios2_open_desc_t read_open_desc(const kstage_adios2_open_desc_t* in);
// Opens a stream as kstage_adios2_open says, its ADIOS object from `make_adios` (alone, or
// over a communicator), its steps written or read by `ranks`; returns its handle.
kstage_adios2_stream_t open_stream(
    const char* name, const kstage_adios2_open_desc_t* desc,
    const std::function<std::shared_ptr<adios2::ADIOS>()>& make_adios,
    std::shared_ptr<Collective> ranks);
// kstage_adios2_open, or an MPI form of it: how checkpoint_with and restart_with open their file.
using Opener = std::function<kstage_status_t(const char*, const kstage_adios2_open_desc_t*,
                                             kstage_adios2_stream_t*)>;
// kstage_adios2_checkpoint and kstage_adios2_restart (or their MPI forms, `what`), with a file
// that `open` opens; their own checks (the path, the checkpoint's query) agreed by `ranks`.
void checkpoint_with(kstage_stage_t stage, const char* path, Collective& ranks, const char* what,
                     const Opener& open);
void restart_with(kstage_stage_t stage, const char* path, uint64_t* ordinal, Collective& ranks,
                  const char* what, const Opener& open,
                  kstage_adios2_manifest_t manifest = KSTAGE_ADIOS2_MANIFEST_DEFAULT);
// kstage_adios2_checkpoint_latest and kstage_adios2_restart_latest (the pointer file's
// procedure, docs/adios2.md), on `ranks` (rank 0 writes the pointer).
void checkpoint_latest_with(kstage_stage_t stage, const char* pointer, Collective& ranks,
                            const char* what, const Opener& open);
void restart_latest_with(kstage_stage_t stage, const char* pointer, uint64_t* ordinal,
                         Collective& ranks, const char* what, const Opener& open);

// ---- dtypes ------------------------------------------------------------------------------------
// The C++ type a column's elements are put as: the dtype itself where ADIOS2 has it, else an
// unsigned integer of the same size (bool: uint8; float16, bfloat16: uint16), the recorded
// schema saying what the bits are. `f` is called with a value of that type; false if none.
template <class F>
bool with_element_type(DLDataType d, F&& f) {
  switch (d.code) {
    case kDLInt:
      switch (d.bits) {
        case 8: f(int8_t{}); return true;
        case 16: f(int16_t{}); return true;
        case 32: f(int32_t{}); return true;
        case 64: f(int64_t{}); return true;
      }
      return false;
    case kDLUInt:
      switch (d.bits) {
        case 8: f(uint8_t{}); return true;
        case 16: f(uint16_t{}); return true;
        case 32: f(uint32_t{}); return true;
        case 64: f(uint64_t{}); return true;
      }
      return false;
    case kDLFloat:
      switch (d.bits) {
        case 16: f(uint16_t{}); return true;
        case 32: f(float{}); return true;
        case 64: f(double{}); return true;
      }
      return false;
    case kDLBfloat:
      if (d.bits == 16) {
        f(uint16_t{});
        return true;
      }
      return false;
    case kDLComplex:
      switch (d.bits) {
        case 64: f(std::complex<float>{}); return true;
        case 128: f(std::complex<double>{}); return true;
      }
      return false;
    case kDLBool:
      if (d.bits == 8) {
        f(uint8_t{});
        return true;
      }
      return false;
  }
  return false;
}
// "float32 x 3", for messages.
std::string dtype_name(DLDataType d);

// What a column is, as a step records it per attribute: its kind, dtype and semantic.
struct Schema {
  bool is_array = false;
  DLDataType dtype{};
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  static Schema of(const kstage_attribute_info_t& i) {
    return Schema{i.is_array, i.dtype, i.semantic};
  }
  bool operator==(const Schema& o) const {
    return is_array == o.is_array && dtype.code == o.dtype.code && dtype.bits == o.dtype.bits &&
           dtype.lanes == o.dtype.lanes && semantic == o.semantic;
  }
  bool operator!=(const Schema& o) const { return !(*this == o); }
  // "fixed float32 x 3 (semantic 1)", for messages.
  std::string text() const {
    return std::string(is_array ? "array " : "fixed ") + dtype_name(dtype) + " (semantic " +
           std::to_string(int(semantic)) + ")";
  }
};

// ---- the layout of a step (docs/adios2.md) -----------------------------------------------------
namespace layout {
inline constexpr const char* kFormat = "kstage/format";  // attribute: "kstage"
inline constexpr const char* kFormatVersion =
    "kstage/format_version";  // attribute: uint32 kVersion
// 2: a step is one block per writing rank of each global array (kstage/blocks). Version 1
// (one writer, no block tables) was never released.
inline constexpr uint32_t kVersion = 2;
// Per step (single values): the step's ordinal, 1 for an incremental step (and its range).
inline constexpr const char* kOrdinal = "kstage/ordinal";
inline constexpr const char* kIncremental = "kstage/incremental";
inline constexpr const char* kRangeBegin = "kstage/range_begin";
inline constexpr const char* kRangeEnd = "kstage/range_end";
// The step's prims (P paths in path-id order): a run is explicit strings or consecutive members
// of a range. segments: {kind, a, b, c} per run -- kind 0: explicit strings a .. a + b - 1;
// kind 1: members b .. b + c - 1 of range a. Strings are a string table (chars + offsets).
inline constexpr const char* kPathCount = "kstage/paths/count";
inline constexpr const char* kPathSegments = "kstage/paths/segments";
inline constexpr const char* kPathStrings = "kstage/paths/strings";
// Ranges: {begin, count} per range, and a string table of {parent, prefix} per range.
inline constexpr const char* kRangeNumbers = "kstage/ranges/numbers";
inline constexpr const char* kRangeStrings = "kstage/ranges/strings";
// The attributes the step carries (a string table of their names).
inline constexpr const char* kStepAttributes = "kstage/step/attributes";
// Where each writer's block starts: {writers + 1, kBlockColumns}, row w = the sums of the
// blocks before writer w (row `writers`: the totals) of each of these.
inline constexpr const char* kBlocks = "kstage/blocks";
enum BlockColumn : size_t {
  kBlockPaths,        // the step's paths
  kBlockRuns,         // rows of kstage/paths/segments
  kBlockStrings,      // entries of kstage/paths/strings
  kBlockStringBytes,  // bytes of kstage/paths/strings/chars
  kBlockRanges,       // rows of kstage/ranges/numbers
  kBlockRangeBytes,   // bytes of kstage/ranges/strings/chars
  kBlockColumns
};
// Per attribute, "kstage/attr/<name>/blocks": {writers + 1, kAttrBlockColumns}, as kstage/blocks,
// and "kstage/attr/<name>/floors" {writers}, each writer's write floor of it.
enum AttrBlockColumn : size_t {
  kAttrPrims,     // prims with values (rows of prims; fixed: rows of values)
  kAttrElements,  // arrays: elements of values (fixed: = kAttrPrims)
  kAttrDeleted,   // entries of deleted
  kAttrBlockColumns
};
// A string table <name>: <name>/chars (uint8) and <name>/offsets (uint64, count + 1).
inline std::string chars(const std::string& table) { return table + "/chars"; }
inline std::string offsets(const std::string& table) { return table + "/offsets"; }
// Per attribute: "kstage/attr/<name>/..." -- schema attributes (dtype {code, bits, lanes},
// kind "fixed" or "array", semantic) and per-step variables: floor, count (prims with values),
// values ({count, lanes} or {count}; arrays: {elements, lanes} or {elements}), offsets (arrays:
// count + 1, in elements), prims (positions in the step's paths; absent: all, in order),
// deleted (positions of the prims that lost it; incremental steps), blocks and floors (above).
// Every array is the writers' blocks back to back, and every index in one -- a run's string or
// range, a position, an offset -- is global, so that a reader of the whole file sees one step.
inline std::string attr(const std::string& name, const char* what) {
  return "kstage/attr/" + name + "/" + what;
}
}  // namespace layout

// The memory a put's or get's buffer is in, always stated to ADIOS2 -- never its "Detect".
// `Device`: the memory of a GPU this ADIOS2 was built for (takes_device_memory).
enum class Space { Host, Device };

// Whether this ADIOS2 takes buffers in the memory of `device` (ADIOS2's MemorySpace::GPU): an
// ADIOS2 built with CUDA (its own, or Kokkos') takes CUDA device memory, one built with Kokkos
// for HIP takes ROCm device memory. Every other device -- and every device for an ADIOS2
// without GPU support, as PyPI's -- is not: its columns go through a host read.
#if defined(ADIOS2_HAVE_GPU_SUPPORT)
constexpr bool kTakesDeviceMemory = true;
#else
constexpr bool kTakesDeviceMemory = false;
#endif
inline bool takes_device_memory(DLDevice device) {
#if defined(ADIOS2_HAVE_CUDA) || defined(ADIOS2_HAVE_KOKKOS_CUDA)
  if (device.device_type == kDLCUDA) return true;
#endif
#if defined(ADIOS2_HAVE_KOKKOS_HIP)
  if (device.device_type == kDLROCM) return true;
#endif
  (void)device;
  return false;
}

// A DLPack device type for messages: its enumerator's name ("kDLCUDA"), or its number.
inline std::string device_type_text(int32_t type) {
  switch (type) {
    case kDLCUDA: return "kDLCUDA";
    case kDLROCM: return "kDLROCM";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLExtDev: return "kDLExtDev";
    default: return "device type " + std::to_string(type);
  }
}

template <class T>
void set_space(adios2::Variable<T>& v, Space space) {
#if defined(ADIOS2_HAVE_GPU_SUPPORT)
  v.SetMemorySpace(space == Space::Device ? adios2::MemorySpace::GPU : adios2::MemorySpace::Host);
#else
  if (space == Space::Device)
    fail(KSTAGE_INTERNAL, "device memory for an ADIOS2 without GPU support");
  v.SetMemorySpace(adios2::MemorySpace::Host);
#endif
}

// Makes or re-shapes a variable of the current step: this rank's block, `count` rows from
// `start`, of a global array of `shape` (alone: the whole array), put from memory in `space`.
// ADIOS2 keeps a variable's definition across steps: an existing one gets this step's shape,
// selection and memory space.
template <class T>
adios2::Variable<T> array_variable(adios2::IO& io, const std::string& name, adios2::Dims shape,
                                   adios2::Dims start, adios2::Dims count,
                                   Space space = Space::Host) {
  adios2::Variable<T> v = io.InquireVariable<T>(name);
  if (!v) {
    v = io.DefineVariable<T>(name, shape, start, count);
  } else {
    v.SetShape(shape);
    v.SetSelection({start, count});
  }
  set_space(v, space);
  return v;
}
template <class T>
adios2::Variable<T> array_variable(adios2::IO& io, const std::string& name, adios2::Dims shape) {
  return array_variable<T>(io, name, shape, adios2::Dims(shape.size(), 0), shape);
}
template <class T>
adios2::Variable<T> value_variable(adios2::IO& io, const std::string& name) {
  adios2::Variable<T> v = io.InquireVariable<T>(name);
  return v ? v : io.DefineVariable<T>(name);
}

// A string table: the strings' bytes back to back, and n + 1 offsets.
struct StringTable {
  std::vector<uint8_t> chars;
  std::vector<uint64_t> offsets{0};
  void add(const char* s, size_t n) {
    chars.insert(chars.end(), reinterpret_cast<const uint8_t*>(s),
                 reinterpret_cast<const uint8_t*>(s) + n);
    offsets.push_back(chars.size());
  }
  size_t size() const { return offsets.size() - 1; }
  std::string at(size_t i) const {
    return std::string(reinterpret_cast<const char*>(chars.data()) + offsets[i],
                       offsets[i + 1] - offsets[i]);
  }
};

}  // namespace kstage::adios2_bridge
