// SPDX-License-Identifier: Apache-2.0
// The DLPack bridge: zero-copy export of Kokkos Views (kstage/dlpack.hpp),
// import of any DLPack tensor as a DLPackView, export of read groups
// (kstage_group_export / kstage_group_export_legacy), and round trips through
// a stage without a copy. Lifetime paths are checked by counting deleter
// calls and Kokkos use counts; under ASan/LSan the same tests prove that no
// path leaks or frees twice.
//
// Conformance checklist of ../shared/research/dlpack.md, item by item. The
// checklist is written for Python producers and consumers; kstage is a C/C++
// library without Python, so capsule, GIL, interpreter and Python keyword
// items map to their C/C++ analogue where one exists and are N/A otherwise.
// This build has host backends only (Kokkos Serial + OpenMP): items about
// CUDA/ROCm streams and GPU memory need a device backend it lacks.
//
//  1. capsule names: N/A (no PyCapsules). C/C++ analogue, the two structs
//     come from two entry points: "export: rank 0 to 3 Views ...",
//     "group export: a compact group owns its buffer ...".
//  2. max_version None -> legacy / (1,x) -> major 1: N/A as a keyword. The
//     versioned export always says major DLPACK_MAJOR_VERSION:
//     "export: rank 0 to 3 Views ...", "group export: a zero-copy group ...".
//  3. version = the header's, flags 0 unless one applies:
//     "export: rank 0 to 3 Views ...", "export: strided subviews ...",
//     "group export: a zero-copy group ...", "group export: a compact group ...".
//  4. unconsumed export -> deleter exactly once, no leak: C/C++ has no capsule
//     destructor; the consumer calls the deleter exactly once:
//     "export: the export keeps the View's allocation alive ...",
//     "group export: the export outlives release and later seals ...",
//     "group export: an export outlives the stage" (ASan/LSan: no leak, no double free).
//  5. used capsule not deleted twice: N/A (no capsule renaming); a consumed
//     tensor is deleted once by its consumer: "import: the producer's deleter runs once ...".
//  6. deleter from a non-Python thread without the GIL: GIL N/A; the deleter
//     may run on any thread: "export: the deleter may run on another thread".
//  7. deleter after Py_Finalize: analogue is Kokkos::finalize (documented in
//     dlpack.hpp: the deleter frees the DLPack structs and leaks the View on
//     purpose): "lifetime: deleters that run after Kokkos::finalize ..." (child process).
//  8. ndim>0: shape and strides non-NULL, in elements:
//     "export: rank 0 to 3 Views ...", "export: strided subviews ...",
//     "export: Views of any host execution space, memory traits and rank up to 8",
//     "group export: a zero-copy group ...", "group export: array groups ...".
//  9. ndim 0: shape/strides NULL, data -> one element: "export: rank 0 to 3 Views ...".
// 10. zero-size export data NULL, imports back:
//     "export: a zero-size View exports data NULL and imports back",
//     "group export: array groups ..." (empty row).
// 11. non-contiguous views: correct strides, values survive a round trip:
//     "export: strided subviews give their real strides in elements".
// 12. non-native byte order / unrepresentable dtype: byte order N/A (host
//     Views are native-endian by construction); a value type DLPack cannot
//     describe does not compile: "export: value types DLPack cannot describe do not compile",
//     "export: complex<long double> (256 bits) is not describable by an 8-bit width".
// 13. read-only source: legacy refused, versioned READ_ONLY, imported non-writable:
//     "export: read-only Views and read-only requests",
//     "group export: a zero-copy group ...", "group export: a compact group ...",
//     "import: READ_ONLY tensors import only as Views of const data".
// 14. copy=True / IS_COPIED: N/A, the bridge has no copy option and never
//     copies; its exports never set IS_COPIED (checked in
//     "export: rank 0 to 3 Views ..." and "group export: a compact group ...").
// 15. dl_device request: N/A, an export is always in the View's own memory
//     space (no dl_device parameter).
// 16. CUDA stream None/1 ordering: N/A, needs a CUDA backend this build
//     lacks (Serial and OpenMP only); host exports fence instead (item 21).
// 17. CUDA stream 2 / stream 0: N/A, needs a CUDA backend this build lacks.
// 18. ROCm stream 0 / 1 / 2: N/A, needs a HIP backend this build lacks.
// 19. stream -1 performs no synchronisation: N/A, no device streams here
//     (kstage_device_sync_t has no "no sync" value; host never waits on one).
// 20. cross-stream event ordering: N/A, needs a CUDA/HIP backend this build lacks.
// 21. CPU producer given a stream: kstage documents (ExportOptions::sync) that
//     host exports fence the View's execution space instead of refusing;
//     tested: "export: a consumer sync request on host fences and exports as usual".
// 22. __dlpack_device__ matches the tensor: Python N/A; the tensor's device is
//     the memory space's ({kDLCPU,0}) and DLPackView::device() keeps the
//     producer's: "export: rank 0 to 3 Views ...",
//     "import: pinned host memory (kDLCUDAHost, kDLROCMHost) ...".
// 23. unknown kwargs -> TypeError: N/A (Python keywords).
// 24. __dlpack_c_exchange_api__: N/A (a Python type attribute; kstage
//     provides no exchange API table).
// 25. current_work_stream / *_no_sync: N/A (exchange API; no streams on host).
// 26. accepts legacy and versioned: "import: export -> import round trips ...";
//     capsule renaming / double import: N/A (ownership passes with the call;
//     a second import of the same pointer is a use after free by the caller).
// 27. major > supported -> deleter, nothing read, error:
//     "import: an unknown major version is refused without reading the tensor".
// 28. newer minor accepted; unknown dtype/device -> error, deleter once:
//     "import: a newer minor version and the IS_COPIED flag are accepted",
//     "import: dtype mismatches are refused naming the dtype",
//     "import: device types without a host view are refused, naming the device".
// 29. NULL strides mean C-contiguous: "import: NULL strides mean compact row-major".
// 30. non-compact strides imported or refused, never densified:
//     "import: non-compact strides become a LayoutStride View",
//     "import: a zero stride (broadcast) axis is viewed, not densified",
//     "import: negative strides, misaligned data and malformed tensors are refused",
//     "import: contiguous layouts accept only their own strides".
// 31. arbitrary strides on size-0/1 axes:
//     "import: any stride on an extent-0 or extent-1 axis is accepted".
// 32. byte_offset honoured; re-export keeps the first element:
//     "import: byte_offset is honoured", "import: re-exporting an imported View ...".
// 33. unaligned data (not 256-B aligned) accepted; element-misaligned refused
//     (never copied): "import: byte_offset is honoured",
//     "import: negative strides, misaligned data and malformed tensors are refused".
// 34. lanes != 1: supported as a trailing extent: "import: lanes > 1 become a
//     trailing extent"; FP4/FP6 codes refused: "import: dtype mismatches ...".
// 35. IS_SUBBYTE_TYPE_PADDED: N/A, no sub-byte value type can be imported
//     (refused, item 34).
// 36. bool bits 8, complex 64/128: "export: every mapped value type ..."
//     (exports and imports bool, complex<float>, complex<double>),
//     "import: complex128 at an 8-byte boundary: ..."; bfloat16:
//     N/A (Kokkos 3.4 has no bfloat16 value type the bridge maps).
// 37. READ_ONLY honoured; legacy tensors: "import: READ_ONLY tensors import
//     only as Views of const data" (legacy tensors import writable, by
//     design: kstage never exports read-only data as legacy).
// 38. IS_COPIED: the flag is ignored (import never copies and never needs
//     exclusive ownership): "import: a newer minor version and the IS_COPIED flag ...".
// 39. zero-size with data NULL: "import: zero-size and 0-d tensors".
// 40. 0-d with shape and strides NULL: "import: zero-size and 0-d tensors".
// 41. kDLCUDAHost/kDLROCMHost host-accessible; kDLCUDAManaged refused for a
//     host View (nothing copied): "import: pinned host memory ...",
//     "import: device types without a host view are refused, naming the device".
// 42. device_id of another GPU: N/A, no GPU backend in this build.
// 43. consumer passes its stream to __dlpack__: N/A (Python; no streams on host).
// 44. retry without max_version on TypeError: N/A (Python).
// 45. deleter once when the last owner dies: "import: the producer's deleter
//     runs once, when the last DLPackView copy dies"; after pending GPU work:
//     N/A (host only).
// 46. import survives the producer object: "export: the export keeps the
//     View's allocation alive ...", "import: export -> import round trips ...",
//     "round trip: a View exported into a column becomes its storage without a copy".
// 47. deleter NULL handled: "import: a producer without a deleter",
//     "round trip: a managed tensor without a deleter is copied".
// 48. Arrow device interop: N/A (kstage has no Arrow interface).
//
// The engine round trips (managed_tensors adoption, group export written back,
// READ_ONLY adopted memory never written in place) are the "round trip: ..." cases.
#include <kstage/dlpack.hpp>

#include "support.hpp"

#include <catch2/catch_template_test_macros.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

using namespace kstage_test;
using kstage::DLPackError;
using kstage::DLPackView;
using kstage::export_dlpack_legacy;
using kstage::export_dlpack_versioned;
using kstage::import_dlpack;

namespace {

// Kokkos must be up before a test makes a View. kstage initialises it in
// kstage_create when the application has not (and finalises it at exit, after
// every View of a test case is gone), so each test case starts with this.
void kokkos_via_kstage() {
  kstage_stage_t s = 0;
  REQUIRE(kstage_create(nullptr, &s) == KSTAGE_OK);
  REQUIRE(kstage_destroy(s) == KSTAGE_OK);
  REQUIRE(Kokkos::is_initialized());
}

// Runs `expr`, which must throw kstage::DLPackError with `code` and a message
// containing `needle`.
#define DL_FAILS(expr, code, needle)                             \
  do {                                                           \
    std::optional<std::pair<kstage_status_t, std::string>> _err; \
    try {                                                        \
      (void)(expr);                                              \
    } catch (const kstage::DLPackError& e) {                     \
      _err.emplace(e.status(), e.what());                        \
    }                                                            \
    INFO(#expr);                                                 \
    REQUIRE(_err.has_value());                                   \
    INFO("message: " << _err->second);                           \
    REQUIRE(_err->first == (code));                              \
    REQUIRE(_err->second.find(needle) != std::string::npos);     \
  } while (0)

// ---------------------------------------------------------------------------
// A foreign DLPack producer (what numpy or PyTorch would hand over). Its
// memory belongs to this object and outlives every tensor made from it; each
// tensor's deleter counts the call and frees only the DLPack struct, so a
// test can tell exactly how often a consumer called it.
struct alignas(64) Block64 {
  unsigned char bytes[64];
};

struct Desc {
  DLDataType dtype{kDLFloat, 32, 1};
  std::vector<int64_t> shape;
  bool null_strides = true;
  std::vector<int64_t> strides;
  uint64_t byte_offset = 0;
  DLDevice device{kDLCPU, 0};
  std::ptrdiff_t data_offset = 0;  // data = base + data_offset
  bool null_data = false;
  bool null_shape = false;
};

Desc dense(DLDataType dtype, std::vector<int64_t> shape) {
  Desc d;
  d.dtype = dtype;
  d.shape = std::move(shape);
  return d;
}
Desc strided(DLDataType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  Desc d = dense(dtype, std::move(shape));
  d.null_strides = false;
  d.strides = std::move(strides);
  return d;
}

class Producer {
 public:
  explicit Producer(size_t bytes) : memory_(bytes / 64 + 2) {}
  std::byte* base() { return reinterpret_cast<std::byte*>(memory_.data()); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(base());
  }
  int deleted = 0;  // deleter calls over every tensor of this producer

  DLManagedTensorVersioned* versioned(const Desc& d, uint64_t flags = 0,
                                      DLPackVersion version = {DLPACK_MAJOR_VERSION,
                                                               DLPACK_MINOR_VERSION}) {
    auto* ctx = new Ctx{{}, {}, &deleted};
    auto* m = new DLManagedTensorVersioned{};
    m->version = version;
    m->manager_ctx = ctx;
    m->deleter = [](DLManagedTensorVersioned* self) {
      auto* c = static_cast<Ctx*>(self->manager_ctx);
      ++*c->deleted;
      delete c;
      delete self;
    };
    m->flags = flags;
    describe(m->dl_tensor, d, *ctx);
    return m;
  }
  DLManagedTensor* legacy(const Desc& d) {
    auto* ctx = new Ctx{{}, {}, &deleted};
    auto* m = new DLManagedTensor{};
    m->manager_ctx = ctx;
    m->deleter = [](DLManagedTensor* self) {
      auto* c = static_cast<Ctx*>(self->manager_ctx);
      ++*c->deleted;
      delete c;
      delete self;
    };
    describe(m->dl_tensor, d, *ctx);
    return m;
  }
  // Frees a tensor whose deleter the test set to NULL (the producer's own cleanup).
  static void release_unowned(DLManagedTensorVersioned* m) {
    delete static_cast<Ctx*>(m->manager_ctx);
    delete m;
  }
  static void release_unowned(DLManagedTensor* m) {
    delete static_cast<Ctx*>(m->manager_ctx);
    delete m;
  }
  // A borrowed tensor; `shape`/`strides` storage comes from the caller.
  DLTensor borrowed(const Desc& d, int64_t* shape, int64_t* strides) {
    DLTensor t{};
    Ctx tmp{};
    describe(t, d, tmp);
    for (size_t i = 0; i < d.shape.size(); ++i) shape[i] = d.shape[i];
    for (size_t i = 0; i < d.strides.size(); ++i) strides[i] = d.strides[i];
    t.shape = d.shape.empty() ? nullptr : shape;
    t.strides = d.null_strides ? nullptr : strides;
    return t;
  }

 private:
  struct Ctx {
    int64_t shape[8];
    int64_t strides[8];
    int* deleted;
  };
  void describe(DLTensor& t, const Desc& d, Ctx& ctx) {
    t.data = d.null_data ? nullptr : static_cast<void*>(base() + d.data_offset);
    t.device = d.device;
    t.ndim = int32_t(d.shape.size());
    t.dtype = d.dtype;
    for (size_t i = 0; i < d.shape.size() && i < 8; ++i) ctx.shape[i] = d.shape[i];
    for (size_t i = 0; i < d.strides.size() && i < 8; ++i) ctx.strides[i] = d.strides[i];
    t.shape = (d.null_shape || d.shape.empty()) ? nullptr : ctx.shape;
    t.strides = d.null_strides ? nullptr : ctx.strides;
    t.byte_offset = d.byte_offset;
  }
  std::vector<Block64> memory_;
};

// Element (i[0], i[1], ...) of a host DLTensor of T, honouring strides (NULL:
// compact row-major) and byte_offset -- a tiny consumer independent of Kokkos.
template <class T>
T element(const DLTensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, compact = 1;
  std::vector<int64_t> index(idx);
  for (int d = t.ndim - 1; d >= 0; --d) {
    const int64_t stride = t.strides ? t.strides[d] : compact;
    off += index[size_t(d)] * stride;
    compact *= t.shape[d];
  }
  const auto* p =
      static_cast<const unsigned char*>(t.data) + t.byte_offset + off * int64_t(sizeof(T));
  const std::vector<unsigned char> bytes = host_copy(p, sizeof(T), t.device);  // device data too
  T v;
  std::memcpy(&v, bytes.data(), sizeof(T));
  return v;
}

bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Checks what every kstage View export promises, against the View itself.
template <class View>
void check_describes(const DLTensor& t, const View& v) {
  using value_type = typename View::non_const_value_type;
  constexpr int rank = int(View::rank);
  REQUIRE(t.data == static_cast<const void*>(v.data()));  // zero-copy
  REQUIRE(t.device.device_type == kDLCPU);
  REQUIRE(t.device.device_id == 0);
  REQUIRE(t.ndim == rank);
  REQUIRE(t.byte_offset == 0);
  REQUIRE(t.dtype.lanes == 1);
  REQUIRE(t.dtype.bits == sizeof(value_type) * 8);
  if (rank == 0) {
    REQUIRE(t.shape == nullptr);
    REQUIRE(t.strides == nullptr);
    return;
  }
  REQUIRE(t.shape != nullptr);
  REQUIRE(t.strides != nullptr);
  for (int d = 0; d < rank; ++d) {
    REQUIRE(t.shape[d] == int64_t(v.extent(size_t(d))));
    REQUIRE(t.strides[d] == int64_t(v.stride(size_t(d))));
  }
}

// Element strides measured from addresses, independent of View::stride().
template <class View>
std::vector<int64_t> address_strides(const View& v) {
  std::vector<int64_t> s;
  if constexpr (int(View::rank) == 1) {
    s.push_back(int64_t(&v(1) - &v(0)));
  } else if constexpr (int(View::rank) == 2) {
    s.push_back(int64_t(&v(1, 0) - &v(0, 0)));
    s.push_back(int64_t(&v(0, 1) - &v(0, 0)));
  }
  return s;
}

// ---- stage helpers ----------------------------------------------------------

// An open read of one attribute and its first group.
struct Reading {
  kstage_stage_t stage = 0;
  kstage_read_t read = 0;
  kstage_read_group_t g{};
  Reading(Stage& s, kstage_query_t q, kstage_token_t a, const kstage_read_desc_t* d = nullptr)
      : stage(s.stage) {
    KS_OK(kstage_read_attributes(stage, q, &a, 1, d, &read));
    KS_OK(kstage_fetch_read_next(stage, read, 0, &g));
    wait_for(g.data.device_sync);
  }
  void release() {
    if (g.handle) KS_OK(kstage_release_group(stage, g.handle));
    g.handle = 0;
    if (read) KS_OK(kstage_release_read(stage, read));
    read = 0;
  }
  ~Reading() {
    if (g.handle) kstage_release_group(stage, g.handle);
    if (read) kstage_release_read(stage, read);
  }
  Reading(const Reading&) = delete;
  Reading& operator=(const Reading&) = delete;
};

kstage_read_desc_t compact_desc() {
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  return d;
}

kstage_write_data_t managed_data(DLManagedTensorVersioned* const* list, uint64_t n = 1) {
  kstage_write_data_t w = kstage_write_data_init();
  w.managed_tensors = list;
  w.tensor_count = n;
  return w;
}

// Sealed float values of every prim of `q`, in query order (prims without
// the attribute are skipped).
std::vector<std::vector<float>> sealed_floats(Stage& s, kstage_query_t q,
                                              const std::vector<kstage_path_t>& prims,
                                              kstage_token_t a) {
  auto m = s.floats(q, a);
  std::vector<std::vector<float>> out;
  for (kstage_path_t p : prims)
    if (m.count(p)) out.push_back(m[p]);
  return out;
}

// Rows x lanes float values row*10 + lane + base.
std::vector<float> grid(size_t rows, size_t lanes, float base = 0) {
  std::vector<float> v;
  for (size_t r = 0; r < rows; ++r)
    for (size_t l = 0; l < lanes; ++l) v.push_back(base + float(r * 10 + l));
  return v;
}
std::vector<std::vector<float>> rows_of(const std::vector<float>& flat, size_t lanes) {
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < flat.size(); i += lanes)
    out.emplace_back(flat.begin() + std::ptrdiff_t(i), flat.begin() + std::ptrdiff_t(i + lanes));
  return out;
}

// Sparse write of one row (count = 1: the query's first prim).
void write_first_row(Stage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                     std::vector<float> row, uint16_t lanes) {
  int64_t shape[1] = {1};
  DLTensor t = tensor(row.data(), f32(lanes), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.count = 1;
  KS_OK(s.write(q, a, ordinal, w));
}

}  // namespace

// ===========================================================================
// Export of Kokkos Views
// ===========================================================================

TEST_CASE("export: rank 0 to 3 Views in LayoutRight and LayoutLeft describe the View in place",
          "[dlpack][export]") {
  kokkos_via_kstage();

  SECTION("rank 0: shape and strides NULL, data is the one element") {
    Kokkos::View<double> v("r0");
    v() = 2.5;
    DLManagedTensorVersioned* m = export_dlpack_versioned(v);
    REQUIRE(m->version.major == DLPACK_MAJOR_VERSION);
    REQUIRE(m->version.minor == DLPACK_MINOR_VERSION);
    REQUIRE(m->flags == 0);
    REQUIRE(m->manager_ctx != nullptr);
    REQUIRE(m->deleter != nullptr);
    check_describes(m->dl_tensor, v);
    REQUIRE(m->dl_tensor.dtype.code == kDLFloat);
    REQUIRE(*static_cast<double*>(m->dl_tensor.data) == 2.5);
    m->deleter(m);
  }
  SECTION("rank 1") {
    Kokkos::View<int32_t*> v("r1", 7);
    for (int i = 0; i < 7; ++i) v(i) = 100 + i;
    DLManagedTensorVersioned* m = export_dlpack_versioned(v);
    check_describes(m->dl_tensor, v);
    REQUIRE(m->dl_tensor.strides[0] == 1);
    REQUIRE(m->flags == 0);
    for (int i = 0; i < 7; ++i) REQUIRE(element<int32_t>(m->dl_tensor, {i}) == 100 + i);
    m->deleter(m);
  }
  SECTION("rank 2 LayoutRight: row-major strides (cols, 1)") {
    Kokkos::View<float**, Kokkos::LayoutRight> v("r2", 3, 4);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) v(i, j) = float(10 * i + j);
    DLManagedTensorVersioned* m = export_dlpack_versioned(v);
    check_describes(m->dl_tensor, v);
    REQUIRE(m->dl_tensor.strides[0] == 4);
    REQUIRE(m->dl_tensor.strides[1] == 1);
    REQUIRE((m->flags & DLPACK_FLAG_BITMASK_IS_COPIED) == 0);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        REQUIRE(element<float>(m->dl_tensor, {i, j}) == float(10 * i + j));
    m->deleter(m);
  }
  SECTION("rank 2 LayoutLeft: column-major strides (1, rows)") {
    Kokkos::View<double**, Kokkos::LayoutLeft> v("l2", 3, 4);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) v(i, j) = double(10 * i + j);
    DLManagedTensorVersioned* m = export_dlpack_versioned(v);
    check_describes(m->dl_tensor, v);
    REQUIRE(m->dl_tensor.strides[0] == 1);
    REQUIRE(m->dl_tensor.strides[1] == 3);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        REQUIRE(element<double>(m->dl_tensor, {i, j}) == double(10 * i + j));
    // And back as a LayoutLeft View over the same memory.
    auto back = import_dlpack<double**, Kokkos::HostSpace, Kokkos::LayoutLeft>(m);
    REQUIRE(back.view().data() == v.data());
    REQUIRE(back.view()(2, 3) == 23.0);
  }
  SECTION("rank 3, both layouts") {
    Kokkos::View<int64_t***, Kokkos::LayoutRight> r("r3", 2, 3, 4);
    Kokkos::View<int64_t***, Kokkos::LayoutLeft> l("l3", 2, 3, 4);
    DLManagedTensorVersioned* mr = export_dlpack_versioned(r);
    DLManagedTensorVersioned* ml = export_dlpack_versioned(l);
    check_describes(mr->dl_tensor, r);
    check_describes(ml->dl_tensor, l);
    REQUIRE(std::vector<int64_t>(mr->dl_tensor.strides, mr->dl_tensor.strides + 3) ==
            std::vector<int64_t>{12, 4, 1});
    REQUIRE(std::vector<int64_t>(ml->dl_tensor.strides, ml->dl_tensor.strides + 3) ==
            std::vector<int64_t>{1, 2, 6});
    REQUIRE(mr->dl_tensor.dtype.code == kDLInt);
    mr->deleter(mr);
    ml->deleter(ml);
  }
  SECTION("legacy export describes the same tensor") {
    Kokkos::View<float**> v("leg", 2, 5);
    DLManagedTensor* m = export_dlpack_legacy(v);
    REQUIRE(m->manager_ctx != nullptr);
    REQUIRE(m->deleter != nullptr);
    check_describes(m->dl_tensor, v);
    REQUIRE(m->dl_tensor.strides[0] == 5);
    m->deleter(m);
  }
}

TEST_CASE("export: strided subviews give their real strides in elements", "[dlpack][export]") {
  kokkos_via_kstage();
  Kokkos::View<double**, Kokkos::LayoutRight> v("grid", 4, 5);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) v(i, j) = double(10 * i + j);

  SECTION("column of a row-major View: rank 1, stride 5") {
    auto col = Kokkos::subview(v, Kokkos::ALL, 1);
    static_assert(std::is_same_v<typename decltype(col)::array_layout, Kokkos::LayoutStride>,
                  "a column of a LayoutRight View is strided");
    DLManagedTensorVersioned* m = export_dlpack_versioned(col);
    check_describes(m->dl_tensor, col);
    REQUIRE(m->dl_tensor.shape[0] == 4);
    REQUIRE(m->dl_tensor.strides[0] == 5);
    REQUIRE(address_strides(col) == std::vector<int64_t>{5});
    REQUIRE(m->dl_tensor.data == &v(0, 1));
    REQUIRE(m->flags == 0);
    for (int i = 0; i < 4; ++i) REQUIRE(element<double>(m->dl_tensor, {i}) == double(10 * i + 1));
    // Round trip: LayoutStride accepts it, values and address unchanged.
    auto back = import_dlpack<double*>(m);
    REQUIRE(back.view().data() == &v(0, 1));
    REQUIRE(back.view().stride(0) == 5);
    for (int i = 0; i < 4; ++i) REQUIRE(back.view()(i) == double(10 * i + 1));
    // Writes through the import land in the original View (no copy).
    back.view()(2) = -1.0;
    REQUIRE(v(2, 1) == -1.0);
  }
  SECTION("a block of columns: rank 2, strides (5, 1), not compact") {
    auto cols = Kokkos::subview(v, Kokkos::ALL, std::make_pair(1, 3));
    DLManagedTensorVersioned* m = export_dlpack_versioned(cols);
    check_describes(m->dl_tensor, cols);
    REQUIRE(m->dl_tensor.shape[0] == 4);
    REQUIRE(m->dl_tensor.shape[1] == 2);
    REQUIRE(m->dl_tensor.strides[0] == 5);
    REQUIRE(m->dl_tensor.strides[1] == 1);
    REQUIRE(address_strides(cols) == std::vector<int64_t>{5, 1});
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j)
        REQUIRE(element<double>(m->dl_tensor, {i, j}) == double(10 * i + j + 1));
    // Not C-contiguous: a LayoutRight import is refused, LayoutStride works.
    DLManagedTensorVersioned* again = export_dlpack_versioned(cols);
    DL_FAILS((import_dlpack<double**, Kokkos::HostSpace, Kokkos::LayoutRight>(again)),
             KSTAGE_INVALID_ARGUMENT, "not C-contiguous");
    auto back = import_dlpack<const double**>(m);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 2; ++j) REQUIRE(back.view()(i, j) == v(i, j + 1));
  }
  SECTION("a row of a column-major View: rank 1, stride = rows") {
    Kokkos::View<float**, Kokkos::LayoutLeft> l("left", 3, 6);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 6; ++j) l(i, j) = float(i * 100 + j);
    auto row = Kokkos::subview(l, 1, Kokkos::ALL);
    DLManagedTensorVersioned* m = export_dlpack_versioned(row);
    check_describes(m->dl_tensor, row);
    REQUIRE(m->dl_tensor.strides[0] == 3);
    REQUIRE(address_strides(row) == std::vector<int64_t>{3});
    for (int j = 0; j < 6; ++j) REQUIRE(element<float>(m->dl_tensor, {j}) == float(100 + j));
    m->deleter(m);
  }
  SECTION("an explicit LayoutStride View (transposed)") {
    Kokkos::LayoutStride layout(5, 1, 4, 5);  // (j, i) of the 4x5 grid
    Kokkos::View<double**, Kokkos::LayoutStride, Kokkos::HostSpace,
                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        t(v.data(), layout);
    DLManagedTensorVersioned* m = export_dlpack_versioned(t);
    REQUIRE(m->dl_tensor.shape[0] == 5);
    REQUIRE(m->dl_tensor.shape[1] == 4);
    REQUIRE(m->dl_tensor.strides[0] == 1);
    REQUIRE(m->dl_tensor.strides[1] == 5);
    REQUIRE(element<double>(m->dl_tensor, {3, 2}) == v(2, 3));
    m->deleter(m);
  }
}

namespace {
template <class T>
struct Expected;
#define KSTAGE_EXPECT_DTYPE(T, c, b)             \
  template <>                                    \
  struct Expected<T> {                           \
    static constexpr uint8_t code = c, bits = b; \
  };
KSTAGE_EXPECT_DTYPE(int8_t, kDLInt, 8)
KSTAGE_EXPECT_DTYPE(int16_t, kDLInt, 16)
KSTAGE_EXPECT_DTYPE(int32_t, kDLInt, 32)
KSTAGE_EXPECT_DTYPE(int64_t, kDLInt, 64)
KSTAGE_EXPECT_DTYPE(uint8_t, kDLUInt, 8)
KSTAGE_EXPECT_DTYPE(uint16_t, kDLUInt, 16)
KSTAGE_EXPECT_DTYPE(uint32_t, kDLUInt, 32)
KSTAGE_EXPECT_DTYPE(uint64_t, kDLUInt, 64)
KSTAGE_EXPECT_DTYPE(float, kDLFloat, 32)
KSTAGE_EXPECT_DTYPE(double, kDLFloat, 64)
KSTAGE_EXPECT_DTYPE(bool, kDLBool, 8)
KSTAGE_EXPECT_DTYPE(Kokkos::complex<float>, kDLComplex, 64)
KSTAGE_EXPECT_DTYPE(Kokkos::complex<double>, kDLComplex, 128)
KSTAGE_EXPECT_DTYPE(std::complex<float>, kDLComplex, 64)
KSTAGE_EXPECT_DTYPE(std::complex<double>, kDLComplex, 128)
#undef KSTAGE_EXPECT_DTYPE

template <class T>
struct is_complex : std::false_type {};
template <class T>
struct is_complex<std::complex<T>> : std::true_type {};
template <class T>
struct is_complex<Kokkos::complex<T>> : std::true_type {};

template <class T>
T value_for(int i) {
  if constexpr (std::is_same_v<T, bool>) {
    return i % 3 == 1;
  } else if constexpr (is_complex<T>::value) {
    return T(float(i) + 0.5f, -float(i));
  } else {
    return T(i * 3 + 1);
  }
}
}  // namespace

TEMPLATE_TEST_CASE(
    "export: every mapped value type has the right dtype and round-trips without a copy",
    "[dlpack][export][import][dtype]", int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
    uint32_t, uint64_t, float, double, bool, Kokkos::complex<float>, Kokkos::complex<double>,
    std::complex<float>, std::complex<double>) {
  kokkos_via_kstage();
  Kokkos::View<TestType*> v("values", 6);
  for (int i = 0; i < 6; ++i) v(i) = value_for<TestType>(i);

  DLManagedTensorVersioned* m = export_dlpack_versioned(v);
  REQUIRE(m->dl_tensor.dtype.code == Expected<TestType>::code);
  REQUIRE(m->dl_tensor.dtype.bits == Expected<TestType>::bits);
  REQUIRE(m->dl_tensor.dtype.lanes == 1);
  check_describes(m->dl_tensor, v);
  for (int i = 0; i < 6; ++i)
    REQUIRE(element<TestType>(m->dl_tensor, {i}) == value_for<TestType>(i));
  REQUIRE(v.use_count() == 2);  // the export holds a copy of the View

  {
    auto back = import_dlpack<TestType*, Kokkos::HostSpace, Kokkos::LayoutRight>(m);
    REQUIRE(back.view().data() == v.data());
    REQUIRE(back.view().extent(0) == 6);
    for (int i = 0; i < 6; ++i) REQUIRE(back.view()(i) == value_for<TestType>(i));
    REQUIRE_FALSE(back.read_only());
    REQUIRE(back.device().device_type == kDLCPU);
  }
  REQUIRE(v.use_count() == 1);  // the DLPackView died: the deleter ran once

  // Legacy export of the same View imports the same way.
  DLManagedTensor* l = export_dlpack_legacy(v);
  REQUIRE(l->dl_tensor.dtype.code == Expected<TestType>::code);
  REQUIRE(l->dl_tensor.dtype.bits == Expected<TestType>::bits);
  {
    auto back = import_dlpack<const TestType*>(l);
    REQUIRE(back.view().data() == v.data());
    REQUIRE(back.view()(5) == value_for<TestType>(5));
  }
  REQUIRE(v.use_count() == 1);
}

TEST_CASE("export: the two complex types of the same width are interchangeable through DLPack",
          "[dlpack][export][import][dtype]") {
  kokkos_via_kstage();
  Kokkos::View<Kokkos::complex<double>*> v("kc", 3);
  v(1) = Kokkos::complex<double>(1.5, -2.5);
  auto back = import_dlpack<std::complex<double>*>(export_dlpack_versioned(v));
  REQUIRE(static_cast<void*>(back.view().data()) == static_cast<void*>(v.data()));
  REQUIRE(back.view()(1) == std::complex<double>(1.5, -2.5));
}

TEST_CASE("export: Views of any host execution space, memory traits and rank up to 8",
          "[dlpack][export][import]") {
  kokkos_via_kstage();
  // The execution space or device in the View type only selects HostSpace.
  Kokkos::View<double*, Kokkos::DefaultHostExecutionSpace> serial("exec", 3);
  Kokkos::View<double*, Kokkos::Device<Kokkos::DefaultHostExecutionSpace, Kokkos::HostSpace>> dev(
      "device", 3);
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::RandomAccess>> traits(
      "traits", 3);
  Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Atomic>> atomic("atomic",
                                                                                        3);
  serial(1) = 1.0;
  dev(1) = 2.0;
  traits(1) = 3.0;
  atomic(1) = 4.0;
  DLManagedTensorVersioned* ms = export_dlpack_versioned(serial);
  DLManagedTensorVersioned* md = export_dlpack_versioned(dev);
  DLManagedTensorVersioned* mt = export_dlpack_versioned(traits);
  DLManagedTensorVersioned* ma = export_dlpack_versioned(atomic);
  REQUIRE(ms->dl_tensor.data == serial.data());
  REQUIRE(md->dl_tensor.data == dev.data());
  REQUIRE(mt->dl_tensor.data == traits.data());
  REQUIRE(ma->dl_tensor.data == atomic.data());
  REQUIRE(element<double>(ms->dl_tensor, {1}) == 1.0);
  REQUIRE(element<double>(ma->dl_tensor, {1}) == 4.0);
  for (DLManagedTensorVersioned* m : {ms, md, mt, ma}) {
    REQUIRE(m->dl_tensor.device.device_type == kDLCPU);
    REQUIRE(same_dtype(m->dl_tensor.dtype, f64()));
    m->deleter(m);
  }
  REQUIRE(serial.use_count() == 1);
  REQUIRE(atomic.use_count() == 1);

  // Rank 4 round trip, and rank 8 (the most DLPack export supports).
  Kokkos::View<int16_t****> r4("r4", 2, 3, 1, 2);
  r4(1, 2, 0, 1) = 77;
  auto back4 = import_dlpack<int16_t****, Kokkos::HostSpace, Kokkos::LayoutRight>(
      export_dlpack_versioned(r4));
  REQUIRE(back4.view().data() == r4.data());
  REQUIRE(back4.view()(1, 2, 0, 1) == 77);
  Kokkos::View<int8_t********> r8("r8", 1, 2, 1, 2, 1, 2, 1, 2);
  r8(0, 1, 0, 1, 0, 1, 0, 1) = 5;
  DLManagedTensorVersioned* m8 = export_dlpack_versioned(r8);
  REQUIRE(m8->dl_tensor.ndim == 8);
  REQUIRE(m8->dl_tensor.strides[0] == 16);
  REQUIRE(m8->dl_tensor.strides[7] == 1);
  auto back8 = import_dlpack<const int8_t********>(m8);
  REQUIRE(back8.view()(0, 1, 0, 1, 0, 1, 0, 1) == 5);
  REQUIRE(back8.view().data() == r8.data());
}

TEST_CASE("import: complex128 at an 8-byte boundary: std::complex yes, Kokkos::complex refused",
          "[dlpack][import][dtype]") {
  kokkos_via_kstage();
  Producer p(256);
  // Element 1 of a complex128 array starts 16 bytes in; a slice starting at
  // byte 8 is aligned for std::complex<double> (alignof 8) but not for
  // Kokkos::complex<double> (alignof 16 with KOKKOS_ENABLE_COMPLEX_ALIGN).
  Desc d = dense(DLDataType{kDLComplex, 128, 1}, {2});
  d.byte_offset = 8;
  {
    auto a = import_dlpack<std::complex<double>*>(p.versioned(d));
    REQUIRE(static_cast<void*>(a.view().data()) == p.base() + 8);
    if (alignof(Kokkos::complex<double>) > 8) {
      DL_FAILS(import_dlpack<Kokkos::complex<double>*>(p.versioned(d)), KSTAGE_INVALID_ARGUMENT,
               "not aligned for the View's value type");
    } else {
      auto b = import_dlpack<Kokkos::complex<double>*>(p.versioned(d));
      REQUIRE(static_cast<void*>(b.view().data()) == p.base() + 8);
    }
  }
  REQUIRE(p.deleted == 2);
}

TEST_CASE("export: a zero-size View exports data NULL and imports back",
          "[dlpack][export][import]") {
  kokkos_via_kstage();
  Kokkos::View<float*> empty("empty", 0);
  DLManagedTensorVersioned* m = export_dlpack_versioned(empty);
  REQUIRE(m->dl_tensor.data == nullptr);
  REQUIRE(m->dl_tensor.ndim == 1);
  REQUIRE(m->dl_tensor.shape != nullptr);
  REQUIRE(m->dl_tensor.strides != nullptr);
  REQUIRE(m->dl_tensor.shape[0] == 0);
  REQUIRE(m->dl_tensor.byte_offset == 0);
  auto back = import_dlpack<float*>(m);
  REQUIRE(back.view().extent(0) == 0);
  REQUIRE(back.view().data() == nullptr);

  Kokkos::View<double**> flat("flat", 4, 0);
  DLManagedTensor* l = export_dlpack_legacy(flat);
  REQUIRE(l->dl_tensor.data == nullptr);
  REQUIRE(l->dl_tensor.shape[0] == 4);
  REQUIRE(l->dl_tensor.shape[1] == 0);
  REQUIRE(l->dl_tensor.strides != nullptr);
  auto back2 = import_dlpack<double**, Kokkos::HostSpace, Kokkos::LayoutRight>(l);
  REQUIRE(back2.view().extent(0) == 4);
  REQUIRE(back2.view().extent(1) == 0);
  REQUIRE(back2.view().size() == 0);
}

TEST_CASE("export: the export keeps the View's allocation alive until the deleter runs",
          "[dlpack][export][lifetime]") {
  kokkos_via_kstage();
  // A copy the test keeps, to watch the use count (optional: never a
  // default-constructed View, which GCC 12 miscompiles with Kokkos >= 4.7).
  std::optional<Kokkos::View<double*>> retained;
  DLManagedTensorVersioned* m = nullptr;
  DLManagedTensor* l = nullptr;
  const double* data = nullptr;
  {
    Kokkos::View<double*> v("kept", 5);
    Kokkos::parallel_for(
        "fill", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 5),
        KOKKOS_LAMBDA(int i) { v(i) = 1.5 * i; });
    Kokkos::fence();
    retained.emplace(v);
    REQUIRE(retained->use_count() == 2);
    m = export_dlpack_versioned(v);
    REQUIRE(retained->use_count() == 3);  // the versioned export's context
    l = export_dlpack_legacy(v);
    REQUIRE(retained->use_count() == 4);  // and the legacy one
    data = v.data();
  }
  REQUIRE(retained->use_count() == 3);  // v is gone; both exports still hold it
  retained.reset();                     // the last user copy is gone too
  // The data is still there, read through the DLTensors only.
  REQUIRE(m->dl_tensor.data == data);
  REQUIRE(l->dl_tensor.data == data);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(element<double>(m->dl_tensor, {i}) == 1.5 * i);
    REQUIRE(element<double>(l->dl_tensor, {i}) == 1.5 * i);
  }
  // The consumer writes through the (writable) export; the other sees it.
  static_cast<double*>(m->dl_tensor.data)[4] = -7.0;
  REQUIRE(element<double>(l->dl_tensor, {4}) == -7.0);
  m->deleter(m);
  // One export deleted: the other still keeps the allocation (ASan would
  // report a use after free here otherwise).
  REQUIRE(element<double>(l->dl_tensor, {3}) == 4.5);
  l->deleter(l);  // the last holder: the allocation is freed (LSan: no leak)
}

TEST_CASE("export: the deleter may run on another thread", "[dlpack][export][lifetime]") {
  kokkos_via_kstage();
  Kokkos::View<float**> v("threads", 8, 3);
  std::vector<DLManagedTensorVersioned*> exports;
  for (int i = 0; i < 8; ++i) exports.push_back(export_dlpack_versioned(v));
  REQUIRE(v.use_count() == 9);
  std::vector<std::thread> threads;
  for (DLManagedTensorVersioned* m : exports) threads.emplace_back([m] { m->deleter(m); });
  for (auto& t : threads) t.join();
  REQUIRE(v.use_count() == 1);
}

TEST_CASE("export: read-only Views and read-only requests", "[dlpack][export][read_only]") {
  kokkos_via_kstage();
  Kokkos::View<float*> v("rw", 4);
  for (int i = 0; i < 4; ++i) v(i) = float(i);
  Kokkos::View<const float*> c = v;

  SECTION("a View of const data exports READ_ONLY (versioned)") {
    DLManagedTensorVersioned* m = export_dlpack_versioned(c);
    REQUIRE(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
    check_describes(m->dl_tensor, c);
    // It imports only as const data; the non-const attempt consumes it.
    const int before = v.use_count();
    DL_FAILS(import_dlpack<float*>(m), KSTAGE_INVALID_ARGUMENT, "READ_ONLY");
    REQUIRE(v.use_count() == before - 1);  // the deleter ran, exactly once
    auto ok = import_dlpack<const float*>(export_dlpack_versioned(c));
    REQUIRE(ok.read_only());
    REQUIRE(ok.view().data() == v.data());
    REQUIRE(ok.view()(3) == 3.f);
  }
  SECTION("options.read_only sets READ_ONLY on a writable View") {
    kstage::ExportOptions o;
    o.read_only = true;
    DLManagedTensorVersioned* m = export_dlpack_versioned(v, o);
    REQUIRE(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
    REQUIRE(m->dl_tensor.data == v.data());
    m->deleter(m);
    REQUIRE(v.use_count() == 2);  // v and c
  }
  SECTION("the legacy struct cannot say read-only: refused") {
    const int before = v.use_count();
    DL_FAILS(export_dlpack_legacy(c), KSTAGE_NOT_SUPPORTED, "read-only");
    kstage::ExportOptions o;
    o.read_only = true;
    DL_FAILS(export_dlpack_legacy(v, o), KSTAGE_NOT_SUPPORTED, "legacy");
    REQUIRE(v.use_count() == before);  // nothing was kept by the refusals
  }
}

TEST_CASE("export: a consumer sync request on host fences and exports as usual",
          "[dlpack][export][sync]") {
  kokkos_via_kstage();
  Kokkos::View<int*> v("sync", 1000);
  Kokkos::parallel_for(
      "fill", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 1000),
      KOKKOS_LAMBDA(int i) { v(i) = i; });
  kstage::ExportOptions o;
  o.sync.stream = 1;  // "the default stream": host spaces fence instead
  DLManagedTensorVersioned* m = export_dlpack_versioned(v, o);
  REQUIRE(m->flags == 0);
  check_describes(m->dl_tensor, v);
  long sum = 0;
  for (int i = 0; i < 1000; ++i) sum += element<int>(m->dl_tensor, {i});
  REQUIRE(sum == 999L * 1000 / 2);
  m->deleter(m);
}

namespace {
template <class T, class = void>
struct is_complete : std::false_type {};
template <class T>
struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};
}  // namespace

TEST_CASE("export: value types DLPack cannot describe do not compile", "[dlpack][export][dtype]") {
  // export_dlpack_* instantiate impl::DLPackDType<value_type>, which is left
  // undefined for types DLPack has no code for: such an export is a compile
  // error, never a wrong dtype at run time.
  STATIC_REQUIRE(is_complete<kstage::impl::DLPackDType<float>>::value);
  STATIC_REQUIRE(is_complete<kstage::impl::DLPackDType<std::complex<double>>>::value);
  STATIC_REQUIRE_FALSE(is_complete<kstage::impl::DLPackDType<long double>>::value);
  STATIC_REQUIRE_FALSE(is_complete<kstage::impl::DLPackDType<std::array<float, 3>>>::value);
  STATIC_REQUIRE_FALSE(is_complete<kstage::impl::DLPackDType<void*>>::value);
}

namespace {
// The bits a complex value type of `T` components would be exported with, or
// -1 when the bridge (correctly) refuses it at compile time.
template <class C>
int exported_bits() {
  if constexpr (is_complete<kstage::impl::DLPackDType<C>>::value) {
    return int(kstage::impl::DLPackDType<C>::value.bits);
  } else {
    return -1;
  }
}
}  // namespace

TEST_CASE("export: complex<long double> (256 bits) is not describable by an 8-bit width",
          "[dlpack][export][dtype]") {
  // DLDataType::bits is a uint8_t: a 256-bit complex cannot be described.
  // Checked at run time (not STATIC_REQUIRE) so the rest of this program
  // still builds while the bridge maps it: it must be refused, never
  // exported with a truncated width (256 -> 0).
  INFO("std::complex<long double> exports with bits "
       << exported_bits<std::complex<long double>>());
  CHECK(exported_bits<std::complex<long double>>() == -1);
  INFO("Kokkos::complex<long double> exports with bits "
       << exported_bits<Kokkos::complex<long double>>());
  CHECK(exported_bits<Kokkos::complex<long double>>() == -1);
  // The widths that do fit.
  REQUIRE(exported_bits<std::complex<double>>() == 128);
  REQUIRE(exported_bits<Kokkos::complex<float>>() == 64);
}

// ===========================================================================
// Import
// ===========================================================================

TEST_CASE("import: export -> import round trips share memory (versioned and legacy)",
          "[dlpack][import][round_trip]") {
  kokkos_via_kstage();
  Kokkos::View<float**> v("src", 3, 2);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) v(i, j) = float(i * 2 + j);
  const float* data = v.data();

  auto a =
      import_dlpack<float**, Kokkos::HostSpace, Kokkos::LayoutRight>(export_dlpack_versioned(v));
  auto b = import_dlpack<float**>(export_dlpack_legacy(v));
  REQUIRE(v.use_count() == 3);
  v = Kokkos::View<float**>();  // the producer's own View is gone
  REQUIRE(a.view().data() == data);
  REQUIRE(b.view().data() == data);
  REQUIRE(a.use_count() == 1);
  REQUIRE(b.use_count() == 1);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      REQUIRE(a.view()(i, j) == float(i * 2 + j));
      REQUIRE(b.view()(i, j) == float(i * 2 + j));
    }
  // Same memory: a write through one import shows through the other.
  a.view()(2, 1) = 42.f;
  REQUIRE(b.view()(2, 1) == 42.f);
  REQUIRE_FALSE(b.read_only());  // a legacy tensor cannot be read-only
}

TEST_CASE("import: the producer's deleter runs once, when the last DLPackView copy dies",
          "[dlpack][import][lifetime]") {
  kokkos_via_kstage();
  Producer p(64);
  for (int i = 0; i < 4; ++i) p.as<float>()[i] = float(i);

  SECTION("versioned") {
    using V = DLPackView<const float*>;
    V outer;
    REQUIRE(outer.use_count() == 0);
    {
      V a = import_dlpack<const float*>(p.versioned(dense(f32(), {4})));
      REQUIRE(a.use_count() == 1);
      {
        V b = a;  // copy
        std::vector<V> many(3, a);
        REQUIRE(a.use_count() == 5);
        V c = std::move(b);  // move: no new owner
        REQUIRE(a.use_count() == 5);
        outer = c;  // copy assignment
        REQUIRE(a.use_count() == 6);
      }
      REQUIRE(a.use_count() == 2);
      REQUIRE(p.deleted == 0);
    }
    REQUIRE(p.deleted == 0);  // `outer` still holds the producer
    REQUIRE(outer.view()(3) == 3.f);
    outer = V();
    REQUIRE(p.deleted == 1);
  }
  SECTION("legacy") {
    {
      auto a = import_dlpack<float*>(p.legacy(dense(f32(), {4})));
      auto b = a;
      a = decltype(a)();
      REQUIRE(p.deleted == 0);
      REQUIRE(b.view()(2) == 2.f);
    }
    REQUIRE(p.deleted == 1);
  }
  SECTION("the unmanaged view() does not hold the producer") {
    std::optional<DLPackView<const float*>::view_type> raw;
    {
      auto a = import_dlpack<const float*>(p.versioned(dense(f32(), {4})));
      raw.emplace(a.view());
    }
    REQUIRE(p.deleted == 1);  // only DLPackView copies own the producer
    REQUIRE(raw->data() == p.as<float>());
  }
}

TEST_CASE("import: NULL strides mean compact row-major", "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(256);
  for (int i = 0; i < 24; ++i) p.as<float>()[i] = float(i);
  {
    auto a = import_dlpack<const float**>(p.versioned(dense(f32(), {4, 6})));  // LayoutStride
    REQUIRE(a.view().stride(0) == 6);
    REQUIRE(a.view().stride(1) == 1);
    REQUIRE(a.view()(3, 5) == 23.f);
    auto r = import_dlpack<float***, Kokkos::HostSpace, Kokkos::LayoutRight>(
        p.legacy(dense(f32(), {2, 3, 4})));
    REQUIRE(r.view()(1, 2, 3) == 23.f);
    REQUIRE(r.view()(1, 0, 0) == 12.f);
    // A 2-D compact tensor is not Fortran-contiguous.
    DL_FAILS((import_dlpack<float**, Kokkos::HostSpace, Kokkos::LayoutLeft>(
                 p.versioned(dense(f32(), {4, 6})))),
             KSTAGE_INVALID_ARGUMENT, "Fortran-contiguous");
  }
  REQUIRE(p.deleted == 3);
}

TEST_CASE("import: non-compact strides become a LayoutStride View", "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(512);
  for (int i = 0; i < 64; ++i) p.as<double>()[i] = double(i);
  {
    // Transposed 3x2 of a row-major 2x3: element (i, j) at i + 3j.
    auto t = import_dlpack<double**>(p.versioned(strided(f64(), {3, 2}, {1, 3})));
    REQUIRE(t.view().data() == p.as<double>());
    REQUIRE(t.view().stride(0) == 1);
    REQUIRE(t.view().stride(1) == 3);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) REQUIRE(t.view()(i, j) == double(i + 3 * j));
    // Sliced: every other row and every other column of an 8x8.
    auto s = import_dlpack<const double**>(p.versioned(strided(f64(), {4, 4}, {16, 2})));
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) REQUIRE(s.view()(i, j) == double(16 * i + 2 * j));
    // Never densified: the View is over the producer's memory.
    REQUIRE(&s.view()(1, 1) == p.as<double>() + 18);
    // Rank 1, stride 7.
    auto r = import_dlpack<double*>(p.legacy(strided(f64(), {9}, {7})));
    REQUIRE(r.view()(8) == 56.0);
    REQUIRE(&r.view()(8) == p.as<double>() + 56);
  }
  REQUIRE(p.deleted == 3);
}

TEST_CASE("import: contiguous layouts accept only their own strides", "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(512);
  for (int i = 0; i < 24; ++i) p.as<float>()[i] = float(i);
  using Right = Kokkos::LayoutRight;
  using Left = Kokkos::LayoutLeft;
  // LayoutRight of non-contiguous strides: refused, deleter once.
  DL_FAILS((import_dlpack<float**, Kokkos::HostSpace, Right>(
               p.versioned(strided(f32(), {3, 4}, {8, 1})))),
           KSTAGE_INVALID_ARGUMENT, "strides are not C-contiguous");
  REQUIRE(p.deleted == 1);
  DL_FAILS((import_dlpack<float*, Kokkos::HostSpace, Right>(p.legacy(strided(f32(), {3}, {2})))),
           KSTAGE_INVALID_ARGUMENT, "import with Kokkos::LayoutStride");
  REQUIRE(p.deleted == 2);
  // LayoutRight of explicit row-major strides: accepted.
  {
    auto r = import_dlpack<float**, Kokkos::HostSpace, Right>(
        p.versioned(strided(f32(), {3, 4}, {4, 1})));
    REQUIRE(r.view()(2, 3) == 11.f);
  }
  REQUIRE(p.deleted == 3);
  // LayoutLeft of column-major strides: accepted, element (i, j) at i + 3j.
  {
    auto l = import_dlpack<const float**, Kokkos::HostSpace, Left>(
        p.versioned(strided(f32(), {3, 4}, {1, 3})));
    REQUIRE(l.view().data() == p.as<float>());
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) REQUIRE(l.view()(i, j) == float(i + 3 * j));
  }
  REQUIRE(p.deleted == 4);
  // LayoutLeft of row-major strides: refused.
  DL_FAILS((import_dlpack<float**, Kokkos::HostSpace, Left>(
               p.versioned(strided(f32(), {3, 4}, {4, 1})))),
           KSTAGE_INVALID_ARGUMENT, "not Fortran-contiguous");
  REQUIRE(p.deleted == 5);
}

TEST_CASE("import: any stride on an extent-0 or extent-1 axis is accepted",
          "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(256);
  for (int i = 0; i < 16; ++i) p.as<int32_t>()[i] = 100 + i;
  using Right = Kokkos::LayoutRight;
  using Left = Kokkos::LayoutLeft;
  {
    // (1, 4): the extent-1 axis has a stride of 999 (or 0, or negative).
    for (int64_t odd : {int64_t(999), int64_t(0), int64_t(-5)}) {
      auto r = import_dlpack<int32_t**, Kokkos::HostSpace, Right>(
          p.versioned(strided(i32(), {1, 4}, {odd, 1})));
      REQUIRE(r.view().extent(0) == 1);
      REQUIRE(r.view()(0, 3) == 103);
    }
    // (4, 1) as LayoutRight: the trailing extent-1 axis may have any stride.
    auto c = import_dlpack<int32_t**, Kokkos::HostSpace, Right>(
        p.versioned(strided(i32(), {4, 1}, {1, -7})));
    REQUIRE(c.view()(3, 0) == 103);
    // (4, 1) as LayoutLeft too.
    auto l = import_dlpack<int32_t**, Kokkos::HostSpace, Left>(
        p.versioned(strided(i32(), {4, 1}, {1, 12345})));
    REQUIRE(l.view()(2, 0) == 102);
    // Zero-size: (0, 3) with nonsense strides and no data.
    Desc z = strided(i32(), {0, 3}, {-3, 77});
    z.null_data = true;
    auto e = import_dlpack<int32_t**>(p.versioned(z));
    REQUIRE(e.view().size() == 0);
    // LayoutStride with extent-1 axes: strides are normalised, indexing works.
    auto s = import_dlpack<int32_t***>(p.versioned(strided(i32(), {2, 1, 3}, {3, -1000, 1})));
    REQUIRE(s.view()(1, 0, 2) == 105);
  }
  REQUIRE(p.deleted == 7);
}

TEST_CASE("import: byte_offset is honoured", "[dlpack][import][offset]") {
  kokkos_via_kstage();
  Producer p(256);
  for (int i = 0; i < 32; ++i) p.as<float>()[i] = float(i);
  {
    Desc d = dense(f32(), {4});
    d.byte_offset = 8;  // element 0 is float 2
    auto a = import_dlpack<const float*>(p.versioned(d));
    REQUIRE(static_cast<const void*>(a.view().data()) == p.base() + 8);
    REQUIRE(a.view()(0) == 2.f);
    REQUIRE(a.view()(3) == 5.f);
    // Offset and strides together, 2-D.
    Desc e = strided(f32(), {2, 3}, {8, 2});
    e.byte_offset = 4;
    auto b = import_dlpack<float**>(p.legacy(e));
    REQUIRE(b.view()(1, 2) == float(1 + 8 + 4));
    // Data not 256-byte aligned (only element-aligned): accepted, no copy.
    Desc f = dense(f32(), {3});
    f.data_offset = 4;
    auto c = import_dlpack<float*, Kokkos::HostSpace, Kokkos::LayoutRight>(p.versioned(f));
    REQUIRE(static_cast<void*>(c.view().data()) == p.base() + 4);
    REQUIRE(c.view()(2) == 3.f);
    // Both: data + 4 and byte_offset 12 -> element 0 is float 4.
    f.byte_offset = 12;
    auto g = import_dlpack<float*>(p.versioned(f));
    REQUIRE(g.view()(0) == 4.f);
  }
  REQUIRE(p.deleted == 4);
}

TEST_CASE("import: re-exporting an imported View points at the same first element",
          "[dlpack][import][export][offset]") {
  kokkos_via_kstage();
  Producer p(256);
  for (int i = 0; i < 16; ++i) p.as<double>()[i] = double(i);
  Desc d = strided(f64(), {3}, {2});
  d.byte_offset = 16;  // element 0 is double 2
  auto a = import_dlpack<const double*>(p.versioned(d, DLPACK_FLAG_BITMASK_READ_ONLY));
  // The DLPackView must outlive the re-export: an export of a.view() holds
  // the unmanaged View only, not the producer.
  DLManagedTensorVersioned* again = export_dlpack_versioned(a.view());
  REQUIRE(again->flags == DLPACK_FLAG_BITMASK_READ_ONLY);  // const data
  REQUIRE(again->dl_tensor.byte_offset == 0);
  REQUIRE(again->dl_tensor.data == p.base() + 16);
  REQUIRE(again->dl_tensor.strides[0] == 2);
  REQUIRE(element<double>(again->dl_tensor, {2}) == 6.0);
  again->deleter(again);
  REQUIRE(p.deleted == 0);
}

TEST_CASE("import: zero-size and 0-d tensors", "[dlpack][import]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<double>()[0] = 6.25;
  {
    Desc z = dense(f64(), {0});
    z.null_data = true;
    auto a = import_dlpack<double*>(p.versioned(z));
    REQUIRE(a.view().extent(0) == 0);
    REQUIRE(a.view().data() == nullptr);
    // Zero-size 2-D, LayoutRight, data NULL, NULL strides (old producer).
    Desc z2 = dense(f64(), {3, 0});
    z2.null_data = true;
    auto b = import_dlpack<double**, Kokkos::HostSpace, Kokkos::LayoutRight>(p.legacy(z2));
    REQUIRE(b.view().extent(0) == 3);
    REQUIRE(b.view().extent(1) == 0);
    // 0-d: ndim 0, shape NULL, strides NULL.
    Desc s = dense(f64(), {});
    auto c = import_dlpack<double>(p.versioned(s));
    REQUIRE(c.view()() == 6.25);
    REQUIRE(c.view().data() == p.as<double>());
    auto d = import_dlpack<const double, Kokkos::HostSpace, Kokkos::LayoutRight>(p.legacy(s));
    REQUIRE(d.view()() == 6.25);
    // A 0-d tensor has one element: data NULL is refused.
    Desc bad = dense(f64(), {});
    bad.null_data = true;
    DL_FAILS(import_dlpack<double>(p.versioned(bad)), KSTAGE_INVALID_ARGUMENT,
             "data is NULL for a non-empty tensor");
  }
  REQUIRE(p.deleted == 5);
}

TEST_CASE("import: lanes > 1 become a trailing extent", "[dlpack][import][lanes]") {
  kokkos_via_kstage();
  Producer p(512);
  for (int i = 0; i < 48; ++i) p.as<float>()[i] = float(i);
  {
    // float3, 5 rows -> View<float**> 5 x 3.
    auto a = import_dlpack<float**>(p.versioned(dense(f32(3), {5})));
    REQUIRE(a.view().extent(0) == 5);
    REQUIRE(a.view().extent(1) == 3);
    REQUIRE(a.view().stride(0) == 3);
    REQUIRE(a.view().stride(1) == 1);
    REQUIRE(a.view()(4, 2) == 14.f);
    // LayoutRight too (compact rows of lanes).
    auto r = import_dlpack<const float**, Kokkos::HostSpace, Kokkos::LayoutRight>(
        p.legacy(dense(f32(3), {5})));
    REQUIRE(r.view()(1, 0) == 3.f);
    // Strides count whole vectors: stride 2 skips every other float3.
    auto s = import_dlpack<float**>(p.versioned(strided(f32(3), {4}, {2})));
    REQUIRE(s.view().stride(0) == 6);
    REQUIRE(s.view()(1, 0) == 6.f);
    REQUIRE(s.view()(3, 2) == 20.f);
    // A 2-D tensor of float4 -> rank 3.
    auto t = import_dlpack<float***>(p.versioned(dense(f32(4), {2, 3})));
    REQUIRE(t.view().extent(2) == 4);
    REQUIRE(t.view()(1, 2, 3) == float((1 * 3 + 2) * 4 + 3));
    // LayoutLeft cannot hold the lane axis innermost: refused.
    DL_FAILS((import_dlpack<float**, Kokkos::HostSpace, Kokkos::LayoutLeft>(
                 p.versioned(dense(f32(3), {5})))),
             KSTAGE_INVALID_ARGUMENT, "lanes > 1");
    // Without room for the lane axis: refused with both ranks.
    DL_FAILS(import_dlpack<float*>(p.versioned(dense(f32(3), {5}))), KSTAGE_INVALID_ARGUMENT,
             "ndim 1 and lanes 3, so it needs a View of rank 2, not 1");
    // lanes 0 is no dtype.
    DL_FAILS(import_dlpack<float*>(p.versioned(dense(f32(0), {5}))), KSTAGE_INVALID_ARGUMENT,
             "does not match");
  }
  REQUIRE(p.deleted == 7);
}

TEST_CASE("import: an unknown major version is refused without reading the tensor",
          "[dlpack][import][version]") {
  kokkos_via_kstage();
  Producer p(64);
  for (uint32_t major : {uint32_t(2), uint32_t(0), uint32_t(1000)}) {
    DLManagedTensorVersioned* m = p.versioned(dense(f32(), {4}), 0, DLPackVersion{major, 0});
    // A future major may lay out everything after `flags` differently: fill
    // it with garbage. Reading any of it would crash or trip ASan.
    std::memset(static_cast<void*>(&m->dl_tensor), 0xAB, sizeof(DLTensor));
    m->flags = ~uint64_t(0);
    const int before = p.deleted;
    DL_FAILS(import_dlpack<float*>(m), KSTAGE_INVALID_ARGUMENT,
             "version " + std::to_string(major) + ".0 has a major version other than " +
                 std::to_string(DLPACK_MAJOR_VERSION));
    REQUIRE(p.deleted == before + 1);
  }
  // NULL is refused (nothing to delete).
  DL_FAILS(import_dlpack<float*>(static_cast<DLManagedTensorVersioned*>(nullptr)),
           KSTAGE_INVALID_ARGUMENT, "tensor is NULL");
  DL_FAILS(import_dlpack<float*>(static_cast<DLManagedTensor*>(nullptr)), KSTAGE_INVALID_ARGUMENT,
           "tensor is NULL");
  REQUIRE(p.deleted == 3);
}

TEST_CASE("import: a newer minor version and the IS_COPIED flag are accepted",
          "[dlpack][import][version]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<float>()[1] = 9.f;
  {
    auto a = import_dlpack<float*>(
        p.versioned(dense(f32(), {2}), 0, DLPackVersion{DLPACK_MAJOR_VERSION, 99}));
    REQUIRE(a.view()(1) == 9.f);
    // IS_COPIED: the consumer may assume it owns the memory alone; the
    // import is zero-copy either way, so the flag changes nothing.
    auto b = import_dlpack<float*>(p.versioned(dense(f32(), {2}), DLPACK_FLAG_BITMASK_IS_COPIED));
    REQUIRE(b.view().data() == p.as<float>());
    REQUIRE_FALSE(b.read_only());
  }
  REQUIRE(p.deleted == 2);
}

TEST_CASE("import: dtype mismatches are refused naming the dtype", "[dlpack][import][dtype]") {
  kokkos_via_kstage();
  Producer p(64);
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(DLDataType{99, 32, 1}, {4}))),
           KSTAGE_INVALID_ARGUMENT,
           "dtype code 99 bits 32 does not match the View's value type float32");
  REQUIRE(p.deleted == 1);
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(f64(), {2}))), KSTAGE_INVALID_ARGUMENT,
           "dtype float64 does not match the View's value type float32");
  REQUIRE(p.deleted == 2);
  DL_FAILS(import_dlpack<int32_t*>(p.legacy(dense(DLDataType{kDLUInt, 32, 1}, {2}))),
           KSTAGE_INVALID_ARGUMENT, "dtype uint32 does not match the View's value type int32");
  REQUIRE(p.deleted == 3);
  // FP4 (code 17, bits 4 in DLPack >= 1.1): no View value type matches.
  DL_FAILS(import_dlpack<uint8_t*>(p.versioned(dense(DLDataType{17, 4, 1}, {8}))),
           KSTAGE_INVALID_ARGUMENT, "code 17 bits 4");
  REQUIRE(p.deleted == 4);
  // Bits that do not match the code's View type (float16 into float).
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(DLDataType{kDLFloat, 16, 1}, {2}))),
           KSTAGE_INVALID_ARGUMENT, "float16");
  REQUIRE(p.deleted == 5);
  // bool is 8 bits; complex<float> is 64 bits.
  DL_FAILS(import_dlpack<bool*>(p.versioned(dense(DLDataType{kDLBool, 1, 1}, {2}))),
           KSTAGE_INVALID_ARGUMENT, "bool1");
  DL_FAILS(
      import_dlpack<std::complex<float>*>(p.versioned(dense(DLDataType{kDLComplex, 128, 1}, {2}))),
      KSTAGE_INVALID_ARGUMENT, "complex128 does not match the View's value type complex64");
  REQUIRE(p.deleted == 7);
}

TEST_CASE("import: READ_ONLY tensors import only as Views of const data",
          "[dlpack][import][read_only]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<int32_t>()[0] = 17;
  DL_FAILS(import_dlpack<int32_t*>(p.versioned(dense(i32(), {2}), DLPACK_FLAG_BITMASK_READ_ONLY)),
           KSTAGE_INVALID_ARGUMENT, "the tensor is READ_ONLY; import it as a View of const data");
  REQUIRE(p.deleted == 1);
  {
    auto c = import_dlpack<const int32_t*>(
        p.versioned(dense(i32(), {2}), DLPACK_FLAG_BITMASK_READ_ONLY));
    REQUIRE(c.read_only());
    REQUIRE(c.view()(0) == 17);
    static_assert(std::is_const_v<typename decltype(c)::value_type>, "a const View");
    // A writable tensor may be viewed as const too.
    auto w = import_dlpack<const int32_t*>(p.versioned(dense(i32(), {2})));
    REQUIRE_FALSE(w.read_only());
    // A legacy tensor has no flags: it imports writable (kstage never
    // exports read-only data as legacy).
    auto l = import_dlpack<int32_t*>(p.legacy(dense(i32(), {2})));
    REQUIRE_FALSE(l.read_only());
  }
  REQUIRE(p.deleted == 4);
}

TEST_CASE("import: device types without a host view are refused, naming the device",
          "[dlpack][import][device]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<float>()[0] = 1.f;
  struct Case {
    int32_t type;
    const char* name;
  };
  const Case cases[] = {
      {kDLCUDA, "kDLCUDA"},       {kDLOpenCL, "kDLOpenCL"},   {kDLVulkan, "kDLVulkan"},
      {kDLMetal, "kDLMetal"},     {kDLOneAPI, "kDLOneAPI"},   {kDLCUDAManaged, "kDLCUDAManaged"},
      {kDLROCM, "kDLROCM"},       {kDLVPI, "kDLVPI"},         {kDLExtDev, "kDLExtDev"},
      {kDLWebGPU, "kDLWebGPU"},   {kDLHexagon, "kDLHexagon"}, {kDLMAIA, "kDLMAIA"},
      {0, "unknown device type"}, {99, "unknown device type"}};
  int expected = 0;
  for (const Case& c : cases) {
    INFO("device type " << c.type);
    Desc d = dense(f32(), {4});
    d.device = DLDevice{static_cast<DLDeviceType>(c.type), 0};
    const std::string needle = std::string("device type ") + c.name + " (" +
                               std::to_string(c.type) + ") cannot be viewed in Kokkos::HostSpace";
    DL_FAILS(import_dlpack<const float*>(p.versioned(d)), KSTAGE_NOT_SUPPORTED, needle);
    REQUIRE(p.deleted == ++expected);
    DL_FAILS(import_dlpack<float*>(p.legacy(d)), KSTAGE_NOT_SUPPORTED, "nothing is copied");
    REQUIRE(p.deleted == ++expected);
    // Even a borrowed tensor (nothing to delete) is refused the same way.
    int64_t shape[1], strides[1];
    DL_FAILS(import_dlpack<float*>(p.borrowed(d, shape, strides)), KSTAGE_NOT_SUPPORTED, c.name);
  }
  REQUIRE(p.as<float>()[0] == 1.f);  // untouched
}

TEST_CASE("import: pinned host memory (kDLCUDAHost, kDLROCMHost) is viewed as host memory",
          "[dlpack][import][device]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<double>()[1] = 3.5;
  {
    for (DLDeviceType t : {kDLCUDAHost, kDLROCMHost}) {
      Desc d = dense(f64(), {2});
      d.device = DLDevice{t, 0};
      auto a = import_dlpack<double*>(p.versioned(d));
      REQUIRE(a.view().data() == p.as<double>());
      REQUIRE(a.view()(1) == 3.5);
      REQUIRE(a.device().device_type == t);  // as the producer said
      auto b = import_dlpack<const double*>(p.legacy(d));
      REQUIRE(b.device().device_type == t);
    }
    Desc cpu = dense(f64(), {2});
    cpu.device = DLDevice{kDLCPU, 0};
    REQUIRE(import_dlpack<double*>(p.versioned(cpu)).device().device_type == kDLCPU);
  }
  REQUIRE(p.deleted == 5);
}

TEST_CASE("import: negative strides, misaligned data and malformed tensors are refused",
          "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(256);
  int expected = 0;
  // Negative strides (a reversed array): Kokkos cannot express them.
  Desc rev = strided(f32(), {4}, {-1});
  rev.data_offset = 12;
  DL_FAILS(import_dlpack<const float*>(p.versioned(rev)), KSTAGE_INVALID_ARGUMENT,
           "strides[0] = -1 is negative");
  REQUIRE(p.deleted == ++expected);
  DL_FAILS(import_dlpack<float**>(p.legacy(strided(f32(), {2, 3}, {3, -1}))),
           KSTAGE_INVALID_ARGUMENT, "strides[1] = -1 is negative");
  REQUIRE(p.deleted == ++expected);
  // Misaligned for the value type: through data or through byte_offset.
  Desc mis = dense(f32(), {2});
  mis.data_offset = 1;
  DL_FAILS(import_dlpack<float*>(p.versioned(mis)), KSTAGE_INVALID_ARGUMENT, "not aligned");
  REQUIRE(p.deleted == ++expected);
  Desc mis2 = dense(f64(), {2});
  mis2.byte_offset = 4;
  DL_FAILS(import_dlpack<double*>(p.legacy(mis2)), KSTAGE_INVALID_ARGUMENT, "not aligned");
  REQUIRE(p.deleted == ++expected);
  // NULL shape for ndim > 0; negative shape; NULL data for a non-empty tensor.
  Desc noshape = dense(f32(), {4});
  noshape.null_shape = true;
  DL_FAILS(import_dlpack<float*>(p.versioned(noshape)), KSTAGE_INVALID_ARGUMENT, "shape is NULL");
  REQUIRE(p.deleted == ++expected);
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(f32(), {-2}))), KSTAGE_INVALID_ARGUMENT,
           "shape[0] is negative");
  REQUIRE(p.deleted == ++expected);
  Desc nodata = dense(f32(), {4});
  nodata.null_data = true;
  DL_FAILS(import_dlpack<float*>(p.versioned(nodata)), KSTAGE_INVALID_ARGUMENT,
           "data is NULL for a non-empty tensor");
  REQUIRE(p.deleted == ++expected);
  // Shapes and strides whose products overflow int64_t (a broken or hostile producer): refused,
  // not multiplied (signed overflow is undefined behaviour).
  DL_FAILS(import_dlpack<float**>(p.versioned(dense(f32(), {int64_t(1) << 40, int64_t(1) << 40}))),
           KSTAGE_INVALID_ARGUMENT, "element count overflows");
  REQUIRE(p.deleted == ++expected);
  DL_FAILS(import_dlpack<float***>(p.versioned(dense(f32(3), {int64_t(1) << 62, 1}))),
           KSTAGE_INVALID_ARGUMENT, "element count overflows");
  REQUIRE(p.deleted == ++expected);
  using StridedPairs = kstage::DLPackView<float**, Kokkos::HostSpace, Kokkos::LayoutStride>;
  auto strided_pairs = [&](DLManagedTensorVersioned* t) -> StridedPairs {
    return import_dlpack<float**, Kokkos::HostSpace, Kokkos::LayoutStride>(t);
  };
  DL_FAILS(strided_pairs(p.versioned(strided(f32(2), {2}, {int64_t(1) << 62}))),
           KSTAGE_INVALID_ARGUMENT, "overflows int64_t in elements");
  REQUIRE(p.deleted == ++expected);
}

TEST_CASE("import: a zero stride (broadcast) axis is viewed, not densified",
          "[dlpack][import][strides]") {
  kokkos_via_kstage();
  Producer p(64);
  for (int i = 0; i < 4; ++i) p.as<float>()[i] = float(i + 1);
  {
    // A row of 4 broadcast to 3 rows: shape (3, 4), strides (0, 1).
    auto b = import_dlpack<const float**>(p.versioned(strided(f32(), {3, 4}, {0, 1})));
    REQUIRE(b.view().extent(0) == 3);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) {
        REQUIRE(b.view()(i, j) == float(j + 1));
        REQUIRE(&b.view()(i, j) == p.as<float>() + j);  // the producer's memory
      }
    // As LayoutRight the same tensor is not C-contiguous: refused.
    DL_FAILS((import_dlpack<const float**, Kokkos::HostSpace, Kokkos::LayoutRight>(
                 p.versioned(strided(f32(), {3, 4}, {0, 1})))),
             KSTAGE_INVALID_ARGUMENT, "not C-contiguous");
  }
  REQUIRE(p.deleted == 2);
}

TEST_CASE("import: rank mismatch is refused with both ranks in the message", "[dlpack][import]") {
  kokkos_via_kstage();
  Producer p(256);
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(f32(), {2, 3}))), KSTAGE_INVALID_ARGUMENT,
           "tensor has ndim 2, so it needs a View of rank 2, not 1");
  DL_FAILS(import_dlpack<float***>(p.legacy(dense(f32(), {2, 3}))), KSTAGE_INVALID_ARGUMENT,
           "tensor has ndim 2, so it needs a View of rank 2, not 3");
  DL_FAILS(import_dlpack<float>(p.versioned(dense(f32(), {1}))), KSTAGE_INVALID_ARGUMENT,
           "tensor has ndim 1, so it needs a View of rank 1, not 0");
  DL_FAILS(import_dlpack<float*>(p.versioned(dense(f32(), {}))), KSTAGE_INVALID_ARGUMENT,
           "tensor has ndim 0, so it needs a View of rank 0, not 1");
  REQUIRE(p.deleted == 4);
  // ndim beyond what any View has, and a negative ndim: refused before the
  // shape is read (it is NULL here).
  {
    DLManagedTensorVersioned* m = p.versioned(dense(f32(), {}));
    m->dl_tensor.ndim = 20;
    DL_FAILS(import_dlpack<float*>(m), KSTAGE_INVALID_ARGUMENT, "tensor has ndim 20");
    DLManagedTensor* l = p.legacy(dense(f32(), {}));
    l->dl_tensor.ndim = -1;
    DL_FAILS(import_dlpack<float*>(l), KSTAGE_INVALID_ARGUMENT, "tensor has ndim -1");
  }
  REQUIRE(p.deleted == 6);
}

TEST_CASE("import: a producer without a deleter", "[dlpack][import][lifetime]") {
  kokkos_via_kstage();
  Producer p(64);
  p.as<float>()[2] = 5.f;
  // "No reasonable destructor": the consumer must not call it. The producer
  // keeps the structs alive itself (here: this scope frees them).
  DLManagedTensorVersioned* m = p.versioned(dense(f32(), {3}));
  DLManagedTensor* l = p.legacy(dense(f32(), {3}));
  m->deleter = nullptr;
  l->deleter = nullptr;
  {
    auto a = import_dlpack<float*>(m);
    auto b = import_dlpack<const float*>(l);
    REQUIRE(a.view()(2) == 5.f);
    REQUIRE(b.view()(2) == 5.f);
    auto copy = a;
    REQUIRE(copy.use_count() == 2);
  }
  // Refusals do not call a NULL deleter either.
  m->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  DL_FAILS(import_dlpack<float*>(m), KSTAGE_INVALID_ARGUMENT, "READ_ONLY");
  REQUIRE(p.deleted == 0);
  // Free what the (imaginary) producer owns.
  Producer::release_unowned(m);
  Producer::release_unowned(l);
}

TEST_CASE("import: a borrowed DLTensor is viewed without ownership", "[dlpack][import]") {
  kokkos_via_kstage();
  Producer p(128);
  for (int i = 0; i < 12; ++i) p.as<double>()[i] = double(i);
  int64_t shape[2], strides[2];
  DLTensor t = p.borrowed(strided(f64(), {3, 2}, {4, 1}), shape, strides);
  {
    auto a = import_dlpack<double**>(t);
    REQUIRE(a.use_count() == 0);  // owns nothing
    REQUIRE(a.view().data() == p.as<double>());
    REQUIRE(a.view()(2, 1) == 9.0);
    a.view()(1, 0) = -4.0;  // writable, straight into the caller's memory
    auto b = a;
    REQUIRE(b.use_count() == 0);
  }
  REQUIRE(p.as<double>()[4] == -4.0);
  REQUIRE(p.deleted == 0);
  // The same rules apply: a borrowed tensor of the wrong rank is refused.
  DL_FAILS(import_dlpack<double*>(t), KSTAGE_INVALID_ARGUMENT, "needs a View of rank 2, not 1");
  // A borrowed tensor of a kstage export: a plain view of the View's memory.
  Kokkos::View<float*> v("borrow", 3);
  v(2) = 8.f;
  DLManagedTensorVersioned* m = export_dlpack_versioned(v);
  {
    auto b = import_dlpack<float*, Kokkos::HostSpace, Kokkos::LayoutRight>(m->dl_tensor);
    REQUIRE(b.view().data() == v.data());
    REQUIRE(b.view()(2) == 8.f);
  }
  REQUIRE(v.use_count() == 2);  // borrowing took no ownership: the export still holds it
  m->deleter(m);
  REQUIRE(v.use_count() == 1);
}

// ===========================================================================
// C API: kstage_group_export / kstage_group_export_legacy
// ===========================================================================

TEST_CASE("group export: a zero-copy group exports READ_ONLY over the column storage",
          "[host_bridge][dlpack][group_export]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  kstage_token_t mass = s.token("mass");
  const std::vector<float> p0 = grid(4, 3);
  s.write_f32(q, pos, 1, p0, 3);
  s.write_f32(q, mass, 1, {1.5f, 2.5f, 3.5f, 4.5f});
  s.seal(1);

  SECTION("float3 column: shape (rows, 3), dtype lanes 1") {
    Reading r(s, q, pos);
    REQUIRE(r.g.data.index_map == nullptr);
    DLManagedTensorVersioned* m = nullptr;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
    REQUIRE(m != nullptr);
    REQUIRE(m->version.major == DLPACK_MAJOR_VERSION);
    REQUIRE(m->version.minor == DLPACK_MINOR_VERSION);
    REQUIRE(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY);  // the column's own storage
    REQUIRE(m->deleter != nullptr);
    const DLTensor& t = m->dl_tensor;
    REQUIRE(t.data == r.g.data.tensors[0].data);  // zero-copy
    REQUIRE(t.device.device_type == kResidency.device_type);
    REQUIRE(t.device.device_id == 0);
    REQUIRE(t.ndim == 2);
    REQUIRE(same_dtype(t.dtype, f32(1)));
    REQUIRE(t.shape != nullptr);
    REQUIRE(t.strides != nullptr);
    REQUIRE(t.shape[0] == 4);
    REQUIRE(t.shape[1] == 3);
    REQUIRE(t.strides[0] == 3);
    REQUIRE(t.strides[1] == 1);
    REQUIRE(t.byte_offset == 0);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) REQUIRE(element<float>(t, {i, j}) == p0[size_t(3 * i + j)]);
    // The bridge imports it as a const View (only): READ_ONLY.
    auto v = import_dlpack<const float**, Kokkos::HostSpace, Kokkos::LayoutRight>(m);
    REQUIRE(v.read_only());
    REQUIRE(v.view().data() == r.g.data.tensors[0].data);
    REQUIRE(v.view()(3, 2) == 32.f);
    DLManagedTensorVersioned* m2 = nullptr;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m2));
    DL_FAILS(import_dlpack<float**>(m2), KSTAGE_INVALID_ARGUMENT, "READ_ONLY");
  }
  SECTION("lanes-1 column: shape (rows)") {
    Reading r(s, q, mass);
    DLManagedTensorVersioned* m = nullptr;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, KSTAGE_EXPORT_READ_ONLY, &m));
    REQUIRE(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
    REQUIRE(m->dl_tensor.ndim == 1);
    REQUIRE(m->dl_tensor.shape[0] == 4);
    REQUIRE(m->dl_tensor.strides != nullptr);
    REQUIRE(m->dl_tensor.strides[0] == 1);
    REQUIRE(same_dtype(m->dl_tensor.dtype, f32(1)));
    REQUIRE(m->dl_tensor.data == r.g.data.tensors[0].data);
    REQUIRE(element<float>(m->dl_tensor, {2}) == 3.5f);
    m->deleter(m);
  }
  SECTION("legacy export of a zero-copy group is refused; out untouched") {
    Reading r(s, q, pos);
    DLManagedTensor* sentinel = reinterpret_cast<DLManagedTensor*>(uintptr_t(0x1234));
    DLManagedTensor* l = sentinel;
    KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, 0, &l), KSTAGE_NOT_SUPPORTED,
             "shares the column's storage");
    REQUIRE(l == sentinel);
    KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, KSTAGE_EXPORT_READ_ONLY, &l),
             KSTAGE_NOT_SUPPORTED, "read-only");
    REQUIRE(l == sentinel);
  }
}

TEST_CASE(
    "legacy export of a zero-copy group with KSTAGE_EXPORT_CONSUMER_READS_ONLY shares the "
    "column's storage",
    "[dlpack][group_export][legacy]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  const std::vector<float> v0 = grid(4, 3);
  s.write_f32(q, pos, 1, v0, 3);
  s.seal(1);
  const uint64_t promise = KSTAGE_EXPORT_CONSUMER_READS_ONLY;

  DLManagedTensor* l = nullptr;
  DLManagedTensor* l_ro = nullptr;
  const void* storage = nullptr;
  {
    Reading r(s, q, pos);
    storage = r.g.data.tensors[0].data;
    KS_OK(kstage_group_export_legacy(s.stage, r.g.handle, 0, promise, &l));
    REQUIRE(l->dl_tensor.data == storage);  // no copy: the column's own buffer
    REQUIRE(l->dl_tensor.ndim == 2);
    REQUIRE(l->dl_tensor.shape[0] == 4);
    REQUIRE(l->dl_tensor.shape[1] == 3);
    REQUIRE(l->dl_tensor.strides[0] == 3);
    REQUIRE(same_dtype(l->dl_tensor.dtype, f32(1)));
    // With READ_ONLY as well: the same promise, the same sharing.
    KS_OK(kstage_group_export_legacy(s.stage, r.g.handle, 0, promise | KSTAGE_EXPORT_READ_ONLY,
                                     &l_ro));
    REQUIRE(l_ro->dl_tensor.data == storage);
    // The flag is for legacy exports only.
    DLManagedTensorVersioned* v = nullptr;
    KS_FAILS(kstage_group_export(s.stage, r.g.handle, 0, promise, &v), KSTAGE_INVALID_ARGUMENT,
             "KSTAGE_EXPORT_CONSUMER_READS_ONLY is for kstage_group_export_legacy");
    REQUIRE(v == nullptr);
    // Without the promise: refused, and the message names the opt-in.
    DLManagedTensor* refused = nullptr;
    KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, 0, &refused), KSTAGE_NOT_SUPPORTED,
             "KSTAGE_EXPORT_CONSUMER_READS_ONLY");
    REQUIRE(refused == nullptr);
  }
  // The exports outlive the group; a sparse seal does not write into the
  // buffer they hold (copy-on-write), so they keep the values of ordinal 1.
  const uint32_t first[1] = {0};
  std::vector<float> changed = {-1, -2, -3};
  int64_t one[1] = {1};
  DLTensor t = tensor(changed.data(), f32(3), 1, one);
  kstage_write_data_t w = write_data(&t);
  w.count = 1;
  w.index_map = first;
  KS_OK(s.write(q, pos, 2, w));
  s.seal(2);
  REQUIRE(tensor_floats(l->dl_tensor, 12) == v0);
  REQUIRE(tensor_floats(l_ro->dl_tensor, 12) == v0);
  REQUIRE(sealed_floats(s, q, prims, pos)[0] == changed);
  l->deleter(l);
  l_ro->deleter(l_ro);
  // A compact group is the reader's own buffer: the promise is accepted there
  // too (with READ_ONLY it is what makes a legacy export possible at all).
  kstage_read_desc_t cd = compact_desc();
  Reading r(s, q, pos, &cd);
  KS_OK(kstage_group_export_legacy(s.stage, r.g.handle, 0, promise | KSTAGE_EXPORT_READ_ONLY, &l));
  REQUIRE(l->dl_tensor.data == r.g.data.tensors[0].data);
  l->deleter(l);
}

TEST_CASE("group export: the export outlives release and later seals with its old values",
          "[dlpack][group_export][lifetime]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  const std::vector<float> v0 = grid(5, 3);
  s.write_f32(q, pos, 1, v0, 3);
  s.seal(1);

  DLManagedTensorVersioned* m = nullptr;
  {
    Reading r(s, q, pos);
    // The read is released first: a fetched group stays valid (and
    // exportable) until it is released itself.
    KS_OK(kstage_release_read(s.stage, r.read));
    r.read = 0;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
    KS_OK(kstage_release_group(s.stage, r.g.handle));
    r.g.handle = 0;
  }
  auto export_values = [&] {
    std::vector<float> out;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) out.push_back(element<float>(m->dl_tensor, {i, j}));
    return out;
  };
  REQUIRE(export_values() == v0);

  // Sparse writes (which would update the storage in place if nobody held
  // it), then a full rewrite: the export keeps the snapshot it was made from.
  write_first_row(s, q, pos, 2, {-1, -2, -3}, 3);
  s.seal(2);
  REQUIRE(export_values() == v0);
  {
    std::vector<float> rows = {7, 7, 7, 8, 8, 8};
    int64_t shape[1] = {2};
    DLTensor t = tensor(rows.data(), f32(3), 1, shape);
    kstage_write_data_t w = write_data(&t);
    const uint32_t map[4] = {0, 1, 0, 1};
    w.count = 4;
    w.index_map = map;
    KS_OK(s.write(q, pos, 3, w));
  }
  s.seal(3);
  REQUIRE(export_values() == v0);
  const std::vector<float> v4 = grid(5, 3, 1000);
  s.write_f32(q, pos, 4, v4, 3);
  s.seal(4);
  REQUIRE(export_values() == v0);
  // The column moved on meanwhile.
  REQUIRE(sealed_floats(s, q, prims, pos) == rows_of(v4, 3));
  m->deleter(m);  // now, and only now, the snapshot is freed (ASan: no leak)
}

TEST_CASE("group export: a compact group owns its buffer: writable, legacy allowed",
          "[host_bridge][dlpack][group_export]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t all = s.query(prims);
  kstage_query_t some = s.query({prims[3], prims[1]});  // not the row order
  kstage_token_t pos = s.token("points");
  const std::vector<float> v0 = grid(4, 2);
  s.write_f32(all, pos, 1, v0, 2);
  s.seal(1);

  const kstage_read_desc_t cd = compact_desc();
  Reading r(s, some, pos, &cd);
  REQUIRE(r.g.data.index_map == nullptr);
  const void* data = r.g.data.tensors[0].data;

  DLManagedTensorVersioned* m = nullptr;
  KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
  REQUIRE(m->flags == 0);  // the reader's own copy: writable
  REQUIRE(m->version.major == DLPACK_MAJOR_VERSION);
  REQUIRE(m->dl_tensor.data == data);
  REQUIRE(m->dl_tensor.ndim == 2);
  REQUIRE(m->dl_tensor.shape[0] == 2);
  REQUIRE(m->dl_tensor.shape[1] == 2);
  REQUIRE(m->dl_tensor.strides[0] == 2);
  REQUIRE(m->dl_tensor.strides[1] == 1);
  REQUIRE(element<float>(m->dl_tensor, {0, 1}) == 31.f);  // prim 3 first
  REQUIRE(element<float>(m->dl_tensor, {1, 0}) == 10.f);

  DLManagedTensorVersioned* ro = nullptr;
  KS_OK(kstage_group_export(s.stage, r.g.handle, 0, KSTAGE_EXPORT_READ_ONLY, &ro));
  REQUIRE(ro->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
  REQUIRE(ro->dl_tensor.data == data);

  DLManagedTensor* l = nullptr;
  KS_OK(kstage_group_export_legacy(s.stage, r.g.handle, 0, 0, &l));
  REQUIRE(l != nullptr);
  REQUIRE(l->dl_tensor.data == data);
  REQUIRE(l->dl_tensor.ndim == 2);
  REQUIRE(l->dl_tensor.strides != nullptr);
  REQUIRE(same_dtype(l->dl_tensor.dtype, f32(1)));
  DLManagedTensor* sentinel = reinterpret_cast<DLManagedTensor*>(uintptr_t(0x99));
  DLManagedTensor* l2 = sentinel;
  KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, KSTAGE_EXPORT_READ_ONLY, &l2),
           KSTAGE_NOT_SUPPORTED, "KSTAGE_EXPORT_READ_ONLY needs kstage_group_export");
  REQUIRE(l2 == sentinel);
  r.release();

  // Writable: a consumer may write through it. It is a copy, so the column
  // does not change.
  auto w = import_dlpack<float**, Kokkos::HostSpace, Kokkos::LayoutRight>(m);
  w.view()(0, 0) = -99.f;
  REQUIRE(element<float>(l->dl_tensor, {0, 0}) == -99.f);  // same buffer as the other exports
  REQUIRE(sealed_floats(s, all, prims, pos) == rows_of(v0, 2));
  ro->deleter(ro);
  l->deleter(l);
}

TEST_CASE("group export: array groups export one tensor per prim",
          "[host_bridge][dlpack][group_export][array]") {
  Stage s(host_execution());
  auto prims = s.paths("/a", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t pairs = s.token("pairs");
  // float2 arrays of 2, 0 and 3 elements.
  std::vector<std::vector<float>> rows = {{1, 2, 3, 4}, {}, {5, 6, 7, 8, 9, 10}};
  int64_t shapes[3] = {2, 0, 3};
  DLTensor ts[3];
  for (int i = 0; i < 3; ++i)
    ts[i] =
        tensor(rows[size_t(i)].empty() ? nullptr : rows[size_t(i)].data(), f32(2), 1, &shapes[i]);
  KS_OK(s.write(q, pairs, 1, write_data(ts, 3, true)));
  s.seal(1);

  for (bool compact : {false, true}) {
    INFO("compact " << compact);
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = compact;
    Reading r(s, q, pairs, &d);
    REQUIRE(r.g.is_array);
    REQUIRE(r.g.data.tensor_count == 3);
    std::vector<DLManagedTensorVersioned*> ex(3, nullptr);
    for (uint64_t i = 0; i < 3; ++i) {
      KS_OK(kstage_group_export(s.stage, r.g.handle, i, 0, &ex[i]));
      const DLTensor& t = ex[i]->dl_tensor;
      REQUIRE(ex[i]->flags == (compact ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY));
      REQUIRE(t.ndim == 2);
      REQUIRE(t.shape[0] == shapes[i]);
      REQUIRE(t.shape[1] == 2);
      REQUIRE(t.strides[0] == 2);
      REQUIRE(t.strides[1] == 1);
      REQUIRE(same_dtype(t.dtype, f32(1)));
      if (shapes[i] == 0) {
        REQUIRE(t.data == nullptr);  // zero-size: data NULL
      } else {
        REQUIRE(t.data == r.g.data.tensors[i].data);
      }
    }
    KS_FAILS(kstage_group_export(s.stage, r.g.handle, 3, 0, &ex[0]), KSTAGE_INVALID_ARGUMENT,
             "tensor index 3 is out of range: the group has 3 tensor(s)");
    r.release();
    for (uint64_t i = 0; i < 3; ++i) {
      std::vector<float> got;
      for (int64_t e = 0; e < shapes[i]; ++e)
        for (int64_t c = 0; c < 2; ++c) got.push_back(element<float>(ex[i]->dl_tensor, {e, c}));
      REQUIRE(got == rows[i]);
      // Each imports back (the empty one too).
      auto v = import_dlpack<const float**>(ex[i]);
      REQUIRE(v.view().extent(0) == size_t(shapes[i]));
    }
  }
}

TEST_CASE("group export: invalid index, tombstone, flags, handles and NULL out are refused",
          "[dlpack][group_export][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_query_t first = s.query({prims[0]});
  kstage_token_t a = s.token("a");
  s.write_f32(q, a, 1, {1, 2, 3});
  s.seal(1);
  KS_OK(s.remove(first, {a}, 2));
  s.seal(2);

  DLManagedTensorVersioned* const sentinel =
      reinterpret_cast<DLManagedTensorVersioned*>(uintptr_t(0x5150));
  DLManagedTensorVersioned* out = sentinel;
  DLManagedTensor* const lsentinel = reinterpret_cast<DLManagedTensor*>(uintptr_t(0x5151));
  DLManagedTensor* lout = lsentinel;

  const kstage_read_desc_t cd = compact_desc();
  Reading r(s, q, a, &cd);
  KS_FAILS(kstage_group_export(s.stage, r.g.handle, 1, 0, &out), KSTAGE_INVALID_ARGUMENT,
           "tensor index 1 is out of range: the group has 1 tensor(s)");
  KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 1, 0, &lout), KSTAGE_INVALID_ARGUMENT,
           "out of range");
  KS_FAILS(kstage_group_export(s.stage, r.g.handle, UINT64_MAX, 0, &out), KSTAGE_INVALID_ARGUMENT,
           "out of range");
  KS_FAILS(kstage_group_export(s.stage, r.g.handle, 0, 4, &out), KSTAGE_INVALID_ARGUMENT,
           "flags 0x4 has unknown bits");
  KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, uint64_t(1) << 63, &lout),
           KSTAGE_INVALID_ARGUMENT, "unknown bits");
  KS_FAILS(kstage_group_export(s.stage, r.g.handle, 0, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "tensor is NULL");
  KS_FAILS(kstage_group_export_legacy(s.stage, r.g.handle, 0, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "tensor is NULL");
  // Bad handles: 0, unknown, the read handle (wrong kind), a bad stage.
  KS_FAILS(kstage_group_export(s.stage, 0, 0, 0, &out), KSTAGE_INVALID_HANDLE, "not live");
  KS_FAILS(kstage_group_export(s.stage, 987654321, 0, 0, &out), KSTAGE_INVALID_HANDLE, "not live");
  KS_FAILS(kstage_group_export(s.stage, r.read, 0, 0, &out), KSTAGE_INVALID_HANDLE, "not live");
  KS_FAILS(kstage_group_export_legacy(s.stage, 0, 0, 0, &lout), KSTAGE_INVALID_HANDLE, "not live");
  KS_FAILS(kstage_group_export(0, r.g.handle, 0, 0, &out), KSTAGE_INVALID_HANDLE,
           "not a live stage");
  // A released group.
  const kstage_group_t released = r.g.handle;
  r.release();
  KS_FAILS(kstage_group_export(s.stage, released, 0, 0, &out), KSTAGE_INVALID_HANDLE, "not live");
  KS_FAILS(kstage_group_export_legacy(s.stage, released, 0, 0, &lout), KSTAGE_INVALID_HANDLE,
           "not live");

  // A tombstone group (change range [2, 2]: prims[0] lost the attribute).
  kstage_read_desc_t cr = kstage_read_desc_init();
  cr.change_range = true;
  cr.range_begin = 2;
  cr.range_end = 2;
  kstage_read_t rd = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &cr, &rd));
  kstage_read_group_t g{};
  bool found = false;
  for (;;) {
    kstage_status_t st = kstage_fetch_read_next(s.stage, rd, 0, &g);
    if (st == KSTAGE_END_OF_ITERATION) break;
    KS_OK(st);
    if (g.is_delete) {
      found = true;
      REQUIRE(g.prim_count == 1);
      KS_FAILS(kstage_group_export(s.stage, g.handle, 0, 0, &out), KSTAGE_INVALID_ARGUMENT,
               "a tombstone group has no tensors to export");
      KS_FAILS(kstage_group_export_legacy(s.stage, g.handle, 0, 0, &lout), KSTAGE_INVALID_ARGUMENT,
               "tombstone");
    }
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  KS_OK(kstage_release_read(s.stage, rd));
  REQUIRE(found);
  // Out-parameters are written only on success.
  REQUIRE(out == sentinel);
  REQUIRE(lout == lsentinel);
}

TEST_CASE("group export: an export outlives the stage",
          "[host_bridge][dlpack][group_export][lifetime]") {
  std::optional<Stage> s;
  s.emplace(host_execution());
  auto prims = s->paths("/p", 3);
  kstage_query_t q = s->query(prims);
  kstage_token_t a = s->token("a");
  s->write_f32(q, a, 1, {1.25f, 2.25f, 3.25f});
  s->seal(1);
  DLManagedTensorVersioned* zero_copy = nullptr;
  DLManagedTensorVersioned* compact = nullptr;
  DLManagedTensor* legacy = nullptr;
  {
    Reading r(*s, q, a);
    KS_OK(kstage_group_export(s->stage, r.g.handle, 0, 0, &zero_copy));
  }
  {
    const kstage_read_desc_t cd = compact_desc();
    Reading r(*s, q, a, &cd);
    KS_OK(kstage_group_export(s->stage, r.g.handle, 0, 0, &compact));
    KS_OK(kstage_group_export_legacy(s->stage, r.g.handle, 0, 0, &legacy));
    // The stage is destroyed with this group still open (its handle dies with it).
    r.g.handle = 0;
    r.read = 0;
  }
  s.reset();  // kstage_destroy
  for (int i = 0; i < 3; ++i) {
    REQUIRE(element<float>(zero_copy->dl_tensor, {i}) == 1.25f + float(i));
    REQUIRE(element<float>(compact->dl_tensor, {i}) == 1.25f + float(i));
    REQUIRE(element<float>(legacy->dl_tensor, {i}) == 1.25f + float(i));
  }
  // The bridge can still import them (Kokkos is up until exit).
  {
    auto v = import_dlpack<const float*>(zero_copy);
    REQUIRE(v.view()(2) == 3.25f);
  }
  compact->deleter(compact);
  legacy->deleter(legacy);  // ASan/LSan: every snapshot freed exactly once
}

// ===========================================================================
// Round trips through a stage without a copy
// ===========================================================================

TEST_CASE("round trip: a View exported into a column becomes its storage without a copy",
          "[host_adoption][dlpack][round_trip][managed]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 6);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  std::optional<Kokkos::View<float**>> retained;  // the test's window on the allocation
  const float* data = nullptr;
  {
    Kokkos::View<float**> v("positions", 6, 3);  // (N, 3): folds into lanes 3
    Kokkos::parallel_for(
        "fill", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, 6), KOKKOS_LAMBDA(int i) {
          for (int j = 0; j < 3; ++j) v(i, j) = float(10 * i + j);
        });
    Kokkos::fence();
    retained.emplace(v);
    data = v.data();
    DLManagedTensorVersioned* list[1] = {export_dlpack_versioned(v)};
    kstage_write_data_t w = managed_data(list);
    KS_OK(s.write(q, pos, 1, w));
    REQUIRE(retained->use_count() == 3);  // v, retained, the pending write
  }
  s.seal(1);
  REQUIRE(retained->use_count() == 2);  // the column holds the export
  {
    Reading r(s, q, pos);
    REQUIRE(r.g.data.tensors[0].data == data);  // the View's memory is the column
    REQUIRE(r.g.dtype.lanes == 3);
    REQUIRE(r.g.data.index_map == nullptr);
  }
  REQUIRE(sealed_floats(s, q, prims, pos) == rows_of(grid(6, 3), 3));

  // A kstage group export of that column is the View's memory again, and
  // imports back as a View over it.
  {
    Reading r(s, q, pos);
    DLManagedTensorVersioned* m = nullptr;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
    auto back = import_dlpack<const float**, Kokkos::HostSpace, Kokkos::LayoutRight>(m);
    REQUIRE(back.view().data() == data);
    REQUIRE(back.view()(5, 2) == 52.f);
  }

  SECTION("replacing the column releases the View export (its deleter ran)") {
    s.write_f32(q, pos, 2, grid(6, 3, 500), 3);
    s.seal(2);
    REQUIRE(retained->use_count() == 1);
    REQUIRE((*retained)(5, 2) == 52.f);  // the stage never wrote into it
  }
  SECTION("a group export of the column outlives the stage, and holds the View") {
    DLManagedTensorVersioned* m = nullptr;
    {
      Reading r(s, q, pos);
      KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
    }
    KS_OK(kstage_destroy(s.stage));
    s.stage = 0;
    REQUIRE(retained->use_count() == 2);  // column gone; the group export holds the View export
    REQUIRE(m->dl_tensor.data == data);
    REQUIRE(element<float>(m->dl_tensor, {4, 1}) == 41.f);
    m->deleter(m);
    REQUIRE(retained->use_count() == 1);
  }
  SECTION("a sparse update copies first only if someone holds the storage") {
    // The View's export is writable (not READ_ONLY) and nobody else holds
    // the column storage: the stage may update the adopted memory in place.
    // Either way the new value is visible and the other rows are kept.
    write_first_row(s, q, pos, 2, {-1, -2, -3}, 3);
    s.seal(2);
    REQUIRE(sealed_floats(s, q, prims, pos)[0] == std::vector<float>{-1, -2, -3});
    REQUIRE(sealed_floats(s, q, prims, pos)[5] == std::vector<float>{50, 51, 52});
  }
}

TEST_CASE("round trip: a View that cannot be adopted is copied and released at once",
          "[dlpack][round_trip][managed]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  kstage_token_t mass = s.token("mass");
  // Column-major (N, 3): not compact rows, so it is copied.
  Kokkos::View<float**, Kokkos::LayoutLeft> left("left", 4, 3);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) left(i, j) = float(10 * i + j);
  {
    DLManagedTensorVersioned* list[1] = {export_dlpack_versioned(left)};
    KS_OK(s.write(q, pos, 1, managed_data(list)));
  }
  REQUIRE(left.use_count() == 1);  // copied at the write, then deleted
  s.seal(1);
  {
    Reading r(s, q, pos);
    REQUIRE(r.g.data.tensors[0].data != static_cast<void*>(left.data()));
  }
  REQUIRE(sealed_floats(s, q, prims, pos) == rows_of(grid(4, 3), 3));

  // A sparse (count = 1) write of a compact View: its rows are scattered
  // into the column at seal, after which the stage lets go of the export.
  Kokkos::View<float*> one("one", 1);
  one(0) = 7.5f;
  {
    s.write_f32(q, mass, 2, {1, 2, 3, 4});
    DLManagedTensorVersioned* list[1] = {export_dlpack_versioned(one)};
    kstage_write_data_t w = managed_data(list);
    w.count = 1;
    KS_OK(s.write(q, mass, 3, w));
  }
  REQUIRE(one.use_count() <= 2);
  s.seal(3);
  REQUIRE(one.use_count() == 1);
  {
    Reading r(s, q, mass);
    REQUIRE(r.g.data.tensors[0].data != static_cast<void*>(one.data()));
  }
  REQUIRE(sealed_floats(s, q, prims, mass) ==
          std::vector<std::vector<float>>{{7.5f}, {2}, {3}, {4}});
}

TEST_CASE("round trip: a group export written back shares storage; later sparse writes copy first",
          "[dlpack][round_trip][managed]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t a1 = s.token("original");
  kstage_token_t a2 = s.token("copy");
  const std::vector<float> v0 = grid(4, 3);
  s.write_f32(q, a1, 1, v0, 3);
  s.seal(1);

  const void* shared = nullptr;
  {
    Reading r(s, q, a1);
    DLManagedTensorVersioned* m = nullptr;
    KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &m));
    REQUIRE(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
    shared = m->dl_tensor.data;
    REQUIRE(shared == r.g.data.tensors[0].data);
    // Shape (4, 3) lanes 1: the write folds it into float3 rows.
    DLManagedTensorVersioned* list[1] = {m};
    KS_OK(s.write(q, a2, 2, managed_data(list)));
  }
  s.seal(2);
  auto storage = [&](kstage_token_t a) {
    Reading r(s, q, a);
    return r.g.data.tensors[0].data;
  };
  REQUIRE(storage(a2) == shared);  // adopted: no copy
  REQUIRE(storage(a1) == shared);  // and still a1's storage
  REQUIRE(sealed_floats(s, q, prims, a2) == rows_of(v0, 3));

  // A sparse write to a1: a2 holds a1's buffer, so a1 copies first.
  write_first_row(s, q, a1, 3, {-1, -2, -3}, 3);
  s.seal(3);
  REQUIRE(storage(a1) != shared);
  REQUIRE(storage(a2) == shared);
  REQUIRE(sealed_floats(s, q, prims, a2) == rows_of(v0, 3));
  REQUIRE(sealed_floats(s, q, prims, a1)[0] == std::vector<float>{-1, -2, -3});

  // A sparse write to a2: the adopted tensor is READ_ONLY, so a2 copies
  // first; the shared memory keeps its values.
  write_first_row(s, q, a2, 4, {100, 101, 102}, 3);
  s.seal(4);
  REQUIRE(storage(a2) != shared);
  auto got = sealed_floats(s, q, prims, a2);
  REQUIRE(got[0] == std::vector<float>{100, 101, 102});
  REQUIRE(got[3] == std::vector<float>{30, 31, 32});
  // a1 rows 1..3 are the original values, as is a2 rows 1..3.
  auto orig = sealed_floats(s, q, prims, a1);
  for (size_t i = 1; i < 4; ++i) REQUIRE(orig[i] == rows_of(v0, 3)[i]);
}

TEST_CASE("round trip: a READ_ONLY tensor the producer owns is copied before a sparse update",
          "[host_adoption][dlpack][round_trip][managed][read_only]") {
  kokkos_via_kstage();
  Producer p(256);
  const std::vector<float> v0 = grid(4, 2);
  std::memcpy(p.base(), v0.data(), v0.size() * sizeof(float));
  {
    Stage s(host_execution());
    auto prims = s.paths("/p", 4);
    kstage_query_t q = s.query(prims);
    kstage_token_t a = s.token("uv");
    DLManagedTensorVersioned* list[1] = {
        p.versioned(dense(f32(2), {4}), DLPACK_FLAG_BITMASK_READ_ONLY)};
    KS_OK(s.write(q, a, 1, managed_data(list)));
    s.seal(1);
    {
      Reading r(s, q, a);
      REQUIRE(r.g.data.tensors[0].data == p.base());  // adopted: the producer's memory
    }
    REQUIRE(p.deleted == 0);
    write_first_row(s, q, a, 2, {-5, -6}, 2);
    s.seal(2);
    // The producer's memory is unchanged; the new value is visible.
    REQUIRE(std::memcmp(p.base(), v0.data(), v0.size() * sizeof(float)) == 0);
    auto got = sealed_floats(s, q, prims, a);
    REQUIRE(got[0] == std::vector<float>{-5, -6});
    REQUIRE(got[1] == std::vector<float>{10, 11});
    REQUIRE(got[3] == std::vector<float>{30, 31});
    {
      Reading r(s, q, a);
      REQUIRE(r.g.data.tensors[0].data != p.base());
    }
    // An index_map write: the same.
    std::vector<float> row = {42, 43};
    int64_t shape[1] = {1};
    DLTensor t = tensor(row.data(), f32(2), 1, shape);
    kstage_write_data_t w = write_data(&t);
    const uint32_t map[2] = {0, 0};
    w.count = 2;
    w.index_map = map;
    KS_OK(s.write(q, a, 3, w));
    s.seal(3);
    REQUIRE(std::memcmp(p.base(), v0.data(), v0.size() * sizeof(float)) == 0);
    REQUIRE(sealed_floats(s, q, prims, a)[1] == std::vector<float>{42, 43});
  }
  REQUIRE(p.deleted == 1);  // exactly once, by the stage
}

TEST_CASE("round trip: a managed tensor without a deleter is copied",
          "[dlpack][round_trip][managed]") {
  kokkos_via_kstage();
  Producer p(128);
  for (int i = 0; i < 4; ++i) p.as<float>()[i] = float(i) + 0.5f;
  DLManagedTensorVersioned* m = p.versioned(dense(f32(), {4}));
  m->deleter = nullptr;  // nobody can say how long the memory lives
  {
    Stage s(host_execution());
    auto prims = s.paths("/p", 4);
    kstage_query_t q = s.query(prims);
    kstage_token_t a = s.token("a");
    DLManagedTensorVersioned* list[1] = {m};
    KS_OK(s.write(q, a, 1, managed_data(list)));
    // Copied during the write: the producer may reuse its memory now.
    p.as<float>()[0] = -1.f;
    s.seal(1);
    Reading r(s, q, a);
    REQUIRE(r.g.data.tensors[0].data != p.base());
    REQUIRE(element<float>(r.g.data.tensors[0], {0}) == 0.5f);
    REQUIRE(element<float>(r.g.data.tensors[0], {3}) == 3.5f);
  }
  REQUIRE(p.deleted == 0);
  Producer::release_unowned(m);
}

// ===========================================================================
// Deleters after Kokkos::finalize (checklist item 7, analogue)
// ===========================================================================

// Runs only as a child of the next test (the process must finalize Kokkos,
// which cannot be undone). Hidden: not listed, not discovered by ctest.
TEST_CASE("lifetime child: deleters run after Kokkos::finalize", "[.][dlpack_child]") {
  if (std::getenv("KSTAGE_DLPACK_CHILD") == nullptr) {
    SUCCEED("runs only as a child process");
    return;
  }
  kokkos_via_kstage();
  DLManagedTensorVersioned* view_export = nullptr;
  DLManagedTensor* view_legacy = nullptr;
  DLManagedTensorVersioned* group_export = nullptr;
  DLManagedTensor* group_legacy = nullptr;
  {
    Kokkos::View<double*> v("late", 4);
    for (int i = 0; i < 4; ++i) v(i) = 0.25 * i;
    view_export = export_dlpack_versioned(v);
    view_legacy = export_dlpack_legacy(v);
    Stage s;
    auto prims = s.paths("/p", 2);
    kstage_query_t q = s.query(prims);
    kstage_token_t a = s.token("a");
    s.write_f32(q, a, 1, {4.f, 5.f});
    s.seal(1);
    {
      Reading r(s, q, a);
      KS_OK(kstage_group_export(s.stage, r.g.handle, 0, 0, &group_export));
    }
    {
      const kstage_read_desc_t cd = compact_desc();
      Reading r(s, q, a, &cd);
      KS_OK(kstage_group_export_legacy(s.stage, r.g.handle, 0, 0, &group_legacy));
    }
  }  // the View and the stage are gone: only the exports hold memory
  Kokkos::finalize();
  REQUIRE_FALSE(Kokkos::is_initialized());
  // The memory is leaked on purpose, so it is still readable.
  REQUIRE(element<double>(view_export->dl_tensor, {3}) == 0.75);
  REQUIRE(element<float>(group_export->dl_tensor, {1}) == 5.f);
  view_export->deleter(view_export);
  view_legacy->deleter(view_legacy);
  group_export->deleter(group_export);
  group_legacy->deleter(group_legacy);
  std::printf("KSTAGE_DLPACK_CHILD_DONE\n");
  std::fflush(stdout);
}

TEST_CASE("lifetime: deleters that run after Kokkos::finalize free only the DLPack structs",
          "[dlpack][lifetime]") {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  // The child leaks the Views' allocations on purpose (see kstage/dlpack.hpp):
  // leak detection is off there.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string cmd = std::string("KSTAGE_DLPACK_CHILD=1 ASAN_OPTIONS='") +
                          (asan ? std::string(asan) + ":" : std::string()) + "detect_leaks=0' '" +
                          exe + "' 'lifetime child: deleters run after Kokkos::finalize' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe)) output += buf;
  const int status = pclose(pipe);
  INFO("child output:\n" << output);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(output.find("KSTAGE_DLPACK_CHILD_DONE") != std::string::npos);
}
