// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/dlpack.hpp
 * \brief Zero-copy DLPack export and import of Kokkos Views.
 *
 * Export: any View (rank 0..8, LayoutRight, LayoutLeft or LayoutStride, any
 * enabled memory space) becomes a `DLManagedTensorVersioned` or a legacy
 * `DLManagedTensor` that keeps a copy of the View, and so its memory, alive
 * until the consumer calls the deleter. Shape and strides are always filled
 * (the DLPack >= 1.2 rule), in elements; byte_offset is 0. The device type
 * and ordinal come from the memory space and the pointer itself.
 *
 * Import: any DLPack tensor becomes a DLPackView: an unmanaged Kokkos View
 * over the producer's memory plus a shared owner that calls the producer's
 * deleter exactly once, when the last copy of the DLPackView dies. Nothing is
 * ever copied: a tensor that cannot be viewed as requested is refused with a
 * kstage::DLPackError naming the reason.
 *
 * Lifetime and Kokkos finalize: the deleter of a kstage export releases a
 * View. If it runs after Kokkos::finalize (say, from a static destructor),
 * the View cannot be released any more; the deleter then frees only the
 * DLPack structures and deliberately leaks the View's allocation. Imported
 * tensors call their producer's deleter, which involves no Kokkos object of
 * ours; keep DLPackViews out of static storage all the same, since the
 * unmanaged View inside must not outlive the producer's memory.
 */
#pragma once

#include <kstage/kstage.h>
#include <kstage/memory_space.hpp>

#include <Kokkos_Core.hpp>

#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kstage {

/// Thrown by the DLPack bridge; `status()` is the kstage_status_t it maps to.
class DLPackError : public std::runtime_error {
 public:
  /// An error of `status` whose what() is `what`.
  DLPackError(kstage_status_t status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  /// The kstage_status_t the refusal maps to.
  kstage_status_t status() const noexcept { return status_; }

 private:
  kstage_status_t status_;
};

namespace impl {
// Throws `e`; in a build without exceptions (-fno-exceptions) prints it and
// aborts instead. The C++ API (kstage.hpp) checks everything the bridge
// would refuse before calling it, so its non-throwing calls never get here.
[[noreturn]] inline void raise(const DLPackError& e) {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw e;
#else
  std::fprintf(stderr, "kstage: %s\n", e.what());
  std::abort();
#endif
}
}  // namespace impl

/// Options of an export.
struct ExportOptions {
  /// Set DLPACK_FLAG_BITMASK_READ_ONLY (versioned only). Implied for Views of const data.
  bool read_only = false;
  /// The consumer's {stream, event} (kstage.h's values), ordered after the
  /// work pending on the View's space's default execution instance: device
  /// spaces record `event` there and make `stream` wait for it; host spaces
  /// have no streams and fence the host execution space instead when either
  /// is non-zero.
  kstage_device_sync_t sync{0, 0};
};

namespace impl {

// ---- dtypes ----------------------------------------------------------------
template <class T, class Enable = void>
struct DLPackDType;  // undefined: a value type DLPack cannot describe

template <class T>
struct DLPackDType<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr DLDataType value{uint8_t(std::is_signed_v<T> ? kDLInt : kDLUInt),
                                    uint8_t(sizeof(T) * 8), 1};
};
template <class T>
struct DLPackDType<T, std::enable_if_t<std::is_floating_point_v<T> && sizeof(T) <= 8>> {
  static constexpr DLDataType value{kDLFloat, uint8_t(sizeof(T) * 8), 1};
};
template <>
struct DLPackDType<bool> {
  static_assert(sizeof(bool) == 1, "DLPack bool is one byte");
  static constexpr DLDataType value{kDLBool, 8, 1};
};
// Complex: the DLPack bits field (8 bits) holds the whole number, so only
// components up to 64 bits (complex128) are describable.
template <class T>
struct DLPackDType<std::complex<T>,
                   std::enable_if_t<std::is_floating_point_v<T> && sizeof(T) <= 8>> {
  static constexpr DLDataType value{kDLComplex, uint8_t(sizeof(T) * 16), 1};
};
template <class T>
struct DLPackDType<Kokkos::complex<T>,
                   std::enable_if_t<std::is_floating_point_v<T> && sizeof(T) <= 8>> {
  static constexpr DLDataType value{kDLComplex, uint8_t(sizeof(T) * 16), 1};
};

// Defined in libkstage and exported with it (the library's only C++ symbols).
KSTAGE_API const char* device_type_name(int32_t device_type);
KSTAGE_API std::string dtype_name(DLDataType t);
KSTAGE_API bool kokkos_is_initialized();

// What an export owns: the View (keeping its allocation alive) and the
// shape and strides arrays the DLTensor points at.
template <class View>
struct ExportContext {
  View view;
  int64_t shape[9];
  int64_t strides[9];
  static void release(ExportContext* ctx) {
    if (kokkos_is_initialized()) {
      delete ctx;
    } else {
      // After Kokkos::finalize a View must not be destroyed: free everything
      // but the View's allocation, which is leaked on purpose.
      ::operator delete(static_cast<void*>(ctx));
    }
  }
};

// Describes `view`'s memory in `t`; `shape` and `strides` (rank entries
// each) are the arrays `t` points at.
template <class View>
void fill_tensor(DLTensor& t, const View& view, int64_t* shape, int64_t* strides) {
  using value_type = typename View::non_const_value_type;
  t.data = const_cast<value_type*>(view.data());
  t.device = kstage::DLPackSpace<typename View::memory_space>::device(view.data());
  t.ndim = int32_t(View::rank);
  t.dtype = DLPackDType<value_type>::value;
  for (int d = 0; d < int(View::rank); ++d) {
    shape[d] = int64_t(view.extent(size_t(d)));
    strides[d] = int64_t(view.stride(size_t(d)));
  }
  t.shape = View::rank > 0 ? shape : nullptr;
  t.strides = View::rank > 0 ? strides : nullptr;
  t.byte_offset = 0;
  if (view.size() == 0) t.data = nullptr;  // DLPack: data is NULL for size 0
}

template <class View>
void order_after_pending_work(const View&, const ExportOptions& o) {
  if (const char* why = kstage::DLPackSpace<typename View::memory_space>::order_consumer(o.sync))
    impl::raise(DLPackError(
        KSTAGE_INVALID_ARGUMENT,
        std::string("DLPack export: options.sync was refused by the device runtime: ") + why));
}

template <class View>
void check_exportable() {
  static_assert(Kokkos::is_view<View>::value, "kstage::export_dlpack takes a Kokkos::View");
  static_assert(View::rank <= 8, "DLPack export supports rank 0..8");
  using L = typename View::array_layout;
  static_assert(std::is_same_v<L, Kokkos::LayoutRight> || std::is_same_v<L, Kokkos::LayoutLeft> ||
                    std::is_same_v<L, Kokkos::LayoutStride>,
                "DLPack export supports LayoutRight, LayoutLeft and LayoutStride");
}

// ---- import ------------------------------------------------------------------
// Holds a producer's tensor; its destructor calls the producer's deleter once.
struct Adopted {
  DLManagedTensorVersioned* versioned = nullptr;
  DLManagedTensor* legacy = nullptr;
  Adopted() = default;
  Adopted(const Adopted&) = delete;
  Adopted& operator=(const Adopted&) = delete;
  ~Adopted() {
    if (versioned && versioned->deleter) versioned->deleter(versioned);
    if (legacy && legacy->deleter) legacy->deleter(legacy);
  }
};

}  // namespace impl

/**
 * \brief Export `view` as a versioned DLPack tensor (ownership to the caller,
 * who hands it to a consumer; the consumer calls `deleter` exactly once).
 * READ_ONLY is set when `options.read_only` or the View's data is const.
 */
template <class View>
DLManagedTensorVersioned* export_dlpack_versioned(const View& view,
                                                  const ExportOptions& options = {}) {
  impl::check_exportable<View>();
  using Ctx = impl::ExportContext<View>;
  impl::order_after_pending_work(view, options);
  auto ctx = std::make_unique<Ctx>(Ctx{view, {}, {}});
  auto out = std::make_unique<DLManagedTensorVersioned>();
  out->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->flags = (options.read_only || std::is_const_v<typename View::value_type>)
                   ? DLPACK_FLAG_BITMASK_READ_ONLY
                   : 0;
  impl::fill_tensor(out->dl_tensor, ctx->view, ctx->shape, ctx->strides);
  out->manager_ctx = ctx.release();
  out->deleter = [](DLManagedTensorVersioned* self) {
    Ctx::release(static_cast<Ctx*>(self->manager_ctx));
    delete self;
  };
  return out.release();
}

/**
 * \brief Export `view` as a legacy DLPack tensor. The legacy struct cannot say
 * "read-only", so a const View or `options.read_only` is refused (as numpy
 * does) with DLPackError(KSTAGE_NOT_SUPPORTED).
 */
template <class View>
DLManagedTensor* export_dlpack_legacy(const View& view, const ExportOptions& options = {}) {
  impl::check_exportable<View>();
  if (options.read_only || std::is_const_v<typename View::value_type>)
    impl::raise(DLPackError(KSTAGE_NOT_SUPPORTED,
                            "a read-only export needs the versioned DLPack struct: the legacy "
                            "DLManagedTensor cannot signal read-only"));
  using Ctx = impl::ExportContext<View>;
  impl::order_after_pending_work(view, options);
  auto ctx = std::make_unique<Ctx>(Ctx{view, {}, {}});
  auto out = std::make_unique<DLManagedTensor>();
  impl::fill_tensor(out->dl_tensor, ctx->view, ctx->shape, ctx->strides);
  out->manager_ctx = ctx.release();
  out->deleter = [](DLManagedTensor* self) {
    Ctx::release(static_cast<Ctx*>(self->manager_ctx));
    delete self;
  };
  return out.release();
}

/**
 * \brief A DLTensor that describes a View's memory and owns nothing: for C
 * calls that read a tensor only while they run (kstage_write_attribute with
 * `tensors`), with no allocation. The View must outlive every use of the
 * DLTensor. Same layout rules as the exports: shape and strides always
 * filled, in elements; device and ordinal from the memory space and the
 * pointer. Copies are independent (each holds its own shape and strides).
 */
class BorrowedTensor {
 public:
  /// Describes `view` (rank 0..8; LayoutRight, LayoutLeft or LayoutStride, checked at compile
  /// time).
  template <class View, class = std::enable_if_t<Kokkos::is_view<View>::value>>
  explicit BorrowedTensor(const View& view) {
    impl::check_exportable<View>();
    impl::fill_tensor(tensor_, view, shape_, strides_);
  }
  /// A copy with shape and strides arrays of its own.
  BorrowedTensor(const BorrowedTensor& other) noexcept { *this = other; }
  /// Copies `other`'s description into this object's own shape and strides arrays.
  BorrowedTensor& operator=(const BorrowedTensor& other) noexcept {
    if (this == &other) return *this;
    tensor_ = other.tensor_;
    for (int d = 0; d < 8; ++d) shape_[d] = other.shape_[d], strides_[d] = other.strides_[d];
    tensor_.shape = other.tensor_.shape ? shape_ : nullptr;
    tensor_.strides = other.tensor_.strides ? strides_ : nullptr;
    return *this;
  }
  /// The DLTensor; its shape and strides point into this object, so it is valid while it lives.
  const DLTensor& tensor() const noexcept { return tensor_; }

 private:
  DLTensor tensor_{};
  int64_t shape_[8] = {};
  int64_t strides_[8] = {};
};

/// \brief Describe `view` as a borrowed DLTensor (see BorrowedTensor).
template <class View>
BorrowedTensor borrow_dlpack(const View& view) {
  return BorrowedTensor(view);
}

/**
 * \brief A Kokkos View over DLPack memory, holding the producer open.
 *
 * `view()` is an unmanaged View: capture it in kernels, but keep a DLPackView
 * (any copy) alive while they run. The producer's deleter runs when the last
 * copy of the DLPackView is destroyed. A tensor with dtype lanes L > 1 gets
 * a trailing extent L (so a float3 column of N rows is a View<float**> N x 3).
 *
 * \tparam DataType  Kokkos data type, e.g. `float**` or `const double*`; its
 *                   rank is the tensor's ndim (+1 when lanes > 1)
 * \tparam MemorySpace where the memory must live (checked against the device)
 * \tparam Layout    LayoutStride (any strides), LayoutRight (C-contiguous
 *                   only) or LayoutLeft (Fortran-contiguous only)
 */
template <class DataType, class MemorySpace = Kokkos::HostSpace,
          class Layout = Kokkos::LayoutStride>
class DLPackView {
 public:
  /// The unmanaged Kokkos View type of view().
  using view_type =
      Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  /// The View's value type (const when DataType's is).
  using value_type = typename view_type::value_type;

  /// An empty DLPackView (no producer). Note: this default-constructs a
  /// View, which GCC 12.2-12.5 miscompiles with the mdspan-based View of
  /// Kokkos >= 4.7 (Kokkos issue #8187); the bridge itself never does.
  DLPackView() = default;
  /// The unmanaged View over the producer's memory (valid while a copy of this DLPackView lives).
  const view_type& view() const { return view_; }
  /// The imported tensor's device, as the producer gave it.
  DLDevice device() const { return device_; }
  /// True when the tensor was imported with DLPACK_FLAG_BITMASK_READ_ONLY (never for a legacy
  /// or borrowed tensor).
  bool read_only() const { return read_only_; }
  /// Number of DLPackView copies sharing the producer (0 for a default one).
  long use_count() const { return owner_.use_count(); }

 private:
  template <class D, class M, class L>
  friend DLPackView<D, M, L> import_impl(const DLTensor& t, uint64_t flags,
                                         std::shared_ptr<impl::Adopted> owner, bool legacy);
  DLPackView(view_type view, std::shared_ptr<impl::Adopted> owner, DLDevice device, bool read_only)
      : view_(std::move(view)), owner_(std::move(owner)), device_(device), read_only_(read_only) {}
  view_type view_;
  std::shared_ptr<impl::Adopted> owner_;
  DLDevice device_{kDLCPU, 0};
  bool read_only_ = false;
};

namespace impl {

template <class Layout>
Layout make_layout(const int64_t* shape, const int64_t* strides, int rank) {
  Layout layout;
  for (int d = 0; d < rank; ++d) {
    layout.dimension[d] = size_t(shape[d]);
    if constexpr (std::is_same_v<Layout, Kokkos::LayoutStride>)
      layout.stride[d] = size_t(strides[d]);
  }
  return layout;
}

}  // namespace impl

namespace impl {

// Why a tensor cannot be viewed as a given View type (status KSTAGE_OK: it can).
struct ViewRefusal {
  kstage_status_t status = KSTAGE_OK;
  std::string why;
  bool ok() const noexcept { return status == KSTAGE_OK; }
};

// The checks of every import, without throwing: on success `ptr` and
// `layout` describe the tensor's memory as a View of type View (unmanaged).
// Shared by import_dlpack and the C++ API (kstage.hpp), which must also
// build without exceptions.
template <class View>
ViewRefusal check_viewable(const DLTensor& t, uint64_t flags, bool legacy,
                           typename View::pointer_type& ptr, typename View::array_layout& layout,
                           bool& read_only) {
  using MemorySpace = typename View::memory_space;
  using Layout = typename View::array_layout;
  using value_type = typename View::non_const_value_type;
  constexpr int rank = int(View::rank);
  static_assert(rank <= 8, "DLPack import supports rank 0..8");
  static_assert(std::is_same_v<Layout, Kokkos::LayoutStride> ||
                    std::is_same_v<Layout, Kokkos::LayoutRight> ||
                    std::is_same_v<Layout, Kokkos::LayoutLeft>,
                "DLPack import supports LayoutStride, LayoutRight and LayoutLeft");
  auto fail = [](kstage_status_t st, std::string why) { return ViewRefusal{st, std::move(why)}; };
  // Device: nothing is ever copied, so the memory must be where the View says.
  if (!DLPackSpace<MemorySpace>::accepts(t.device.device_type))
    return fail(KSTAGE_NOT_SUPPORTED,
                std::string("device type ") + device_type_name(t.device.device_type) + " (" +
                    std::to_string(t.device.device_type) + ") cannot be viewed in " +
                    DLPackSpace<MemorySpace>::name + "; nothing is copied");
  // The ordinal: a GPU pointer's own, never assumed.
  if (!is_host_memory(t.device.device_type) && t.data) {
    const DLDevice actual = DLPackSpace<MemorySpace>::device(t.data);
    if (actual.device_id != t.device.device_id)
      return fail(KSTAGE_INVALID_ARGUMENT,
                  "the tensor says device_id " + std::to_string(t.device.device_id) +
                      " but its data is memory of device " + std::to_string(actual.device_id));
  }
  // dtype: lanes > 1 become a trailing extent.
  const DLDataType want = DLPackDType<value_type>::value;
  if (t.dtype.code != want.code || t.dtype.bits != want.bits || t.dtype.lanes < 1)
    return fail(KSTAGE_INVALID_ARGUMENT, "dtype " + dtype_name(t.dtype) +
                                             " does not match the View's value type " +
                                             dtype_name(want));
  const bool lane_axis = t.dtype.lanes > 1;
  if (t.ndim < 0 || t.ndim + (lane_axis ? 1 : 0) != rank)
    return fail(KSTAGE_INVALID_ARGUMENT,
                "tensor has ndim " + std::to_string(t.ndim) +
                    (lane_axis ? " and lanes " + std::to_string(t.dtype.lanes) : std::string()) +
                    ", so it needs a View of rank " + std::to_string(t.ndim + (lane_axis ? 1 : 0)) +
                    ", not " + std::to_string(rank));
  if (std::is_same_v<Layout, Kokkos::LayoutLeft> && lane_axis)
    return fail(KSTAGE_INVALID_ARGUMENT,
                "lanes > 1 are the innermost axis; view them with LayoutRight or LayoutStride");
  const bool writable_view = !std::is_const_v<typename View::value_type>;
  read_only = legacy ? false : (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  if (read_only && writable_view)
    return fail(KSTAGE_INVALID_ARGUMENT,
                "the tensor is READ_ONLY; import it as a View of const data");
  if (t.ndim > 0 && t.shape == nullptr) return fail(KSTAGE_INVALID_ARGUMENT, "shape is NULL");

  int64_t shape[9] = {}, strides[9] = {};
  int64_t size = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return fail(KSTAGE_INVALID_ARGUMENT, "shape[" + std::to_string(d) + "] is negative");
    shape[d] = t.shape[d];
    // (A producer's shapes are not trusted to multiply within int64_t.)
    if (shape[d] != 0 && size > INT64_MAX / shape[d])
      return fail(KSTAGE_INVALID_ARGUMENT, "the shape's element count overflows int64_t");
    size *= shape[d];
  }
  // Strides in View elements (a lane is one element).
  const int64_t lanes = t.dtype.lanes;
  if (size > INT64_MAX / lanes)
    return fail(KSTAGE_INVALID_ARGUMENT, "the shape's element count overflows int64_t");
  if (lane_axis) {
    shape[t.ndim] = lanes;
    strides[t.ndim] = 1;
  }
  // Extents the View type fixes (View<float*[3]>) must be the tensor's.
  for (int d = 0; d < rank; ++d) {
    const size_t fixed = View::static_extent(unsigned(d));
    if (d >= int(View::rank_dynamic) && fixed != size_t(shape[d]))
      return fail(KSTAGE_INVALID_ARGUMENT,
                  "axis " + std::to_string(d) + " of the tensor has extent " +
                      std::to_string(shape[d]) + (lane_axis && d == t.ndim ? " (its lanes)" : "") +
                      ", but the View's type fixes it at " + std::to_string(fixed));
  }
  if (t.strides == nullptr) {  // old producers: NULL means compact row-major
    int64_t s = lanes;
    for (int d = t.ndim - 1; d >= 0; --d) {
      strides[d] = s;
      s *= shape[d];
    }
  } else {
    for (int d = 0; d < t.ndim; ++d) {
      if (t.strides[d] < 0 && shape[d] > 1)
        return fail(KSTAGE_INVALID_ARGUMENT,
                    "strides[" + std::to_string(d) + "] = " + std::to_string(t.strides[d]) +
                        " is negative; Kokkos Views cannot express negative strides");
      if (shape[d] > 1 && t.strides[d] > INT64_MAX / lanes)
        return fail(KSTAGE_INVALID_ARGUMENT, "strides[" + std::to_string(d) +
                                                 "] = " + std::to_string(t.strides[d]) +
                                                 " overflows int64_t in elements");
      // Any stride of an extent-0/1 axis is fine; normalise it.
      strides[d] = shape[d] <= 1 ? 1 : t.strides[d] * lanes;
    }
  }
  if constexpr (!std::is_same_v<Layout, Kokkos::LayoutStride>) {
    // Contiguous layouts: check the strides really are that layout.
    const int n = rank;
    int64_t expect = 1;
    for (int k = 0; k < n; ++k) {
      const int d = std::is_same_v<Layout, Kokkos::LayoutRight> ? n - 1 - k : k;
      if (shape[d] > 1 && strides[d] != expect)
        return fail(KSTAGE_INVALID_ARGUMENT,
                    std::string("strides are not ") +
                        (std::is_same_v<Layout, Kokkos::LayoutRight> ? "C" : "Fortran") +
                        "-contiguous; import with Kokkos::LayoutStride");
      expect *= shape[d];
    }
  }
  const auto* base = static_cast<const unsigned char*>(t.data);
  if (size > 0 && base == nullptr)
    return fail(KSTAGE_INVALID_ARGUMENT, "data is NULL for a non-empty tensor");
  ptr = reinterpret_cast<typename View::pointer_type>(
      const_cast<unsigned char*>(base == nullptr ? base : base + t.byte_offset));
  if (reinterpret_cast<uintptr_t>(ptr) % alignof(value_type) != 0)
    return fail(KSTAGE_INVALID_ARGUMENT,
                "data + byte_offset is not aligned for the View's value type");
  layout = make_layout<Layout>(shape, strides, rank);
  return {};
}

// The layout of an empty View of type View: extent 0 on every runtime axis
// (what a non-throwing call returns when it fails).
template <class View>
typename View::array_layout empty_layout() {
  int64_t shape[9] = {}, strides[9] = {};
  for (int d = 0; d < int(View::rank); ++d) {
    shape[d] = d >= int(View::rank_dynamic) ? int64_t(View::static_extent(unsigned(d))) : 0;
    strides[d] = 1;
  }
  return make_layout<typename View::array_layout>(shape, strides, int(View::rank));
}

}  // namespace impl

/// \brief The part of import_dlpack that every overload shares (call import_dlpack instead):
/// views `t` as a DLPackView holding `owner`, or throws DLPackError; `flags` are the
/// versioned tensor's, `legacy` true for a DLManagedTensor (which cannot say read-only).
template <class DataType, class MemorySpace, class Layout>
DLPackView<DataType, MemorySpace, Layout> import_impl(const DLTensor& t, uint64_t flags,
                                                      std::shared_ptr<impl::Adopted> owner,
                                                      bool legacy) {
  using Out = DLPackView<DataType, MemorySpace, Layout>;
  using View = typename Out::view_type;
  typename View::pointer_type ptr = nullptr;
  Layout layout;
  bool read_only = false;
  const impl::ViewRefusal r = impl::check_viewable<View>(t, flags, legacy, ptr, layout, read_only);
  if (!r.ok()) impl::raise(DLPackError(r.status, "DLPack import: " + r.why));
  // Always through a layout object: Kokkos 4 cannot build a LayoutStride View
  // from extents alone, not even for rank 0. The View is constructed in
  // place, never default-constructed and assigned (Kokkos issue #8187).
  return Out(View(ptr, layout), std::move(owner), t.device, read_only);
}

/**
 * \brief Import a versioned DLPack tensor; ownership passes in with the call.
 * On any failure the deleter is called (once) before DLPackError is thrown;
 * a major version other than DLPACK_MAJOR_VERSION is refused without reading
 * anything but the version.
 */
template <class DataType, class MemorySpace = Kokkos::HostSpace,
          class Layout = Kokkos::LayoutStride>
DLPackView<DataType, MemorySpace, Layout> import_dlpack(DLManagedTensorVersioned* tensor) {
  if (tensor == nullptr)
    impl::raise(DLPackError(KSTAGE_INVALID_ARGUMENT, "DLPack import: tensor is NULL"));
  auto owner = std::make_shared<impl::Adopted>();
  owner->versioned = tensor;  // from here on, every path calls the deleter exactly once
  if (tensor->version.major != DLPACK_MAJOR_VERSION)
    impl::raise(DLPackError(KSTAGE_INVALID_ARGUMENT,
                            "DLPack import: version " + std::to_string(tensor->version.major) +
                                "." + std::to_string(tensor->version.minor) +
                                " has a major version other than " +
                                std::to_string(DLPACK_MAJOR_VERSION)));
  return import_impl<DataType, MemorySpace, Layout>(tensor->dl_tensor, tensor->flags,
                                                    std::move(owner), false);
}

/// \brief Import a legacy DLPack tensor (ownership passes in; deleter called on failure too).
template <class DataType, class MemorySpace = Kokkos::HostSpace,
          class Layout = Kokkos::LayoutStride>
DLPackView<DataType, MemorySpace, Layout> import_dlpack(DLManagedTensor* tensor) {
  if (tensor == nullptr)
    impl::raise(DLPackError(KSTAGE_INVALID_ARGUMENT, "DLPack import: tensor is NULL"));
  auto owner = std::make_shared<impl::Adopted>();
  owner->legacy = tensor;
  return import_impl<DataType, MemorySpace, Layout>(tensor->dl_tensor, 0, std::move(owner), true);
}

/// \brief View a borrowed DLTensor (no ownership: the caller keeps the memory alive).
template <class DataType, class MemorySpace = Kokkos::HostSpace,
          class Layout = Kokkos::LayoutStride>
DLPackView<DataType, MemorySpace, Layout> import_dlpack(const DLTensor& tensor) {
  return import_impl<DataType, MemorySpace, Layout>(tensor, 0, nullptr, false);
}

}  // namespace kstage
