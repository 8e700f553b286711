// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/kstage.hpp
 * \brief The kstage C++ API: RAII handles over the C API, and Kokkos Views in
 * and out.
 *
 * Header-only, over the C API (`kstage.h`) alone: it works with any build of
 * libkstage and adds no semantics. Every rule of kstage.h holds as written
 * there; this header only spares C++ code the descriptors, the release calls
 * and the DLTensor bookkeeping. Views go in and out through the DLPack bridge
 * (`dlpack.hpp`), so link `kstage::kokkos_bridge`.
 *
 * Handles. `Stage`, `PathList`, `Query`, `Read`, `ReadGroup`, `Map`, `Op` own
 * one C handle each and release it exactly once, in their destructor (or
 * `reset()`); they are move-only, and a moved-from object is empty (`!obj`).
 * Releasing after the stage was destroyed is harmless (the C call reports a
 * stale handle, which the destructor ignores). `MapGroup` owns nothing: its
 * memory belongs to its `Map`. `Stage::borrow` and `Query::borrow` wrap
 * handles that C code owns, for codes that mix the two; they release nothing.
 *
 * Errors, two ways (as std::filesystem does it):
 * - every call has an overload taking a trailing `kstage::Status&`: it never
 *   throws (a failure leaves the status code and `kstage_last_error()` in the
 *   Status and returns an empty object; a success resets it to OK), for code
 *   built with -fno-exceptions;
 * - the overloads without it throw `kstage::Error` (status + message) and are
 *   declared only when exceptions are enabled. Iterating a Read or a Map with
 *   range-for is of this kind; `next(group, status)` is the other.
 *
 * Views. `write` takes any Kokkos View of rank 1-3 in any enabled memory space
 * (LayoutRight, LayoutLeft or LayoutStride): its trailing extents fold into
 * lanes as kstage.h says, so a `View<float*[3]>` of N rows writes a float32 x
 * 3 column. `ReadGroup::view<const float*[3]>(i)` returns an unmanaged View of
 * the group's tensor in the memory space asked for (default Kokkos::HostSpace):
 * a value type, rank, fixed extent, layout or memory space that does not fit
 * the tensor is an error naming both, never a copy. The View aliases the group's
 * memory (the column's storage for a zero-copy read): keep the group alive
 * while it is used.
 */
#ifndef KSTAGE_KSTAGE_HPP_
#define KSTAGE_KSTAGE_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

/**
 * \def KSTAGE_CPP_EXCEPTIONS
 * \brief 1 when the compiler has C++ exceptions enabled, else 0. kstage::Error
 * and the throwing overloads are declared only when it is 1; the overloads
 * taking a `Status&` always are.
 */
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define KSTAGE_CPP_EXCEPTIONS 1
#else
#define KSTAGE_CPP_EXCEPTIONS 0
#endif

namespace kstage {

// ---- spans -------------------------------------------------------------------------------------

/**
 * \brief A view of `size()` contiguous host elements that someone else owns
 * (C++17 has no std::span): the fields of the option structs. Made from a
 * pointer and a count, an lvalue std::vector (not a temporary one, which
 * would be gone before the span is used), or a contiguous rank-1 Kokkos View
 * whose memory the host can read (the View's memory must outlive the span).
 */
template <class T>
class span {
 public:
  /// The element type (const for a read-only span).
  using element_type = T;
  /// The element type without const or volatile.
  using value_type = std::remove_cv_t<T>;
  /// A plain pointer.
  using iterator = T*;

  /// An empty span.
  constexpr span() noexcept = default;
  /// The `size` elements starting at `data`.
  constexpr span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  /// The elements of `v`, which must outlive the span.
  template <class U, class A, class = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  span(const std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}
  /// The elements of `v`, which must outlive the span.
  template <class U, class A, class = std::enable_if_t<std::is_convertible_v<U (*)[], T (*)[]>>>
  span(std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}
  template <class U, class A>
  span(std::vector<U, A>&& v) = delete;  // a temporary: gone before the span is used
  /// The `N` elements of a built-in array.
  template <size_t N>
  constexpr span(T (&array)[N]) noexcept : data_(array), size_(N) {}
  template <class V, class = std::enable_if_t<Kokkos::is_view<V>::value>, class = void>
  span(const V&& view) = delete;  // a temporary View: its memory may go before the span is used
  /// The elements of a contiguous rank-1 View in memory the host can read (checked at compile
  /// time); its memory must outlive the span.
  template <class V, class = std::enable_if_t<Kokkos::is_view<V>::value>, class = void>
  span(const V& view) noexcept : data_(view.data()), size_(view.size()) {
    static_assert(V::rank == 1, "a span is made from a rank-1 View");
    static_assert(!std::is_same_v<typename V::array_layout, Kokkos::LayoutStride>,
                  "a span needs contiguous memory: a LayoutRight or LayoutLeft View");
    static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible,
                  "index maps, masks and row counts are host memory (kstage.h)");
  }

  /// Pointer to the first element.
  constexpr T* data() const noexcept { return data_; }
  /// The number of elements.
  constexpr size_t size() const noexcept { return size_; }
  /// True when size() is 0.
  constexpr bool empty() const noexcept { return size_ == 0; }
  /// Element `i` (no bounds check).
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }
  /// Pointer to the first element.
  constexpr T* begin() const noexcept { return data_; }
  /// Pointer one past the last element.
  constexpr T* end() const noexcept { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

/**
 * \brief A view of `size()` contiguous elements in the memory of `device()`
 * (a GPU's, for a device index map: kstage.h "Device index maps and masks"), which
 * someone else owns. Made from a pointer, a count and the DLPack device, or
 * from a contiguous rank-1 Kokkos View in any space DLPack can describe (its
 * memory must outlive the span; a temporary View is refused).
 */
template <class T>
class device_span {
 public:
  /// An empty span (device {0, 0}).
  constexpr device_span() noexcept = default;
  /// The `size` elements starting at `data`, in the memory of `device`.
  constexpr device_span(T* data, size_t size, DLDevice device) noexcept
      : data_(data), size_(size), device_(device) {}
  template <class V, class = std::enable_if_t<Kokkos::is_view<V>::value>, class = void>
  device_span(const V&& view) = delete;
  /// The elements of a contiguous rank-1 View, with the device of its memory space and pointer.
  template <class V, class = std::enable_if_t<Kokkos::is_view<V>::value>, class = void>
  device_span(const V& view) noexcept
      : data_(view.data()),
        size_(view.size()),
        device_(DLPackSpace<typename V::memory_space>::device(view.data())) {
    static_assert(V::rank == 1, "a device_span is made from a rank-1 View");
    static_assert(!std::is_same_v<typename V::array_layout, Kokkos::LayoutStride>,
                  "a device_span needs contiguous memory: a LayoutRight or LayoutLeft View");
  }

  /// Pointer to the first element (device memory for a device span).
  constexpr T* data() const noexcept { return data_; }
  /// The number of elements.
  constexpr size_t size() const noexcept { return size_; }
  /// True when size() is 0.
  constexpr bool empty() const noexcept { return size_ == 0; }
  /// The DLPack device whose memory holds the elements.
  constexpr DLDevice device() const noexcept { return device_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  DLDevice device_{DLDeviceType(0), 0};
};

/**
 * \brief A function argument of contiguous host elements: everything a span
 * takes, and a braced list (`stage.read(query, {position, velocity})`), which
 * lives until the end of the call's full expression. For parameters only:
 * never keep one (LLVM's ArrayRef has the same rule).
 */
template <class T>
class array_ref : public span<const T> {
 public:
  using span<const T>::span;
  /// The elements of `s`.
  array_ref(span<const T> s) noexcept : span<const T>(s) {}  // NOLINT: implicit on purpose
  /// The elements of `v`.
  template <class U, class A>
  array_ref(const std::vector<U, A>& v) noexcept : span<const T>(v.data(), v.size()) {}
  /// The elements of a temporary vector, which lives until the end of the call's full expression.
  template <class U, class A>
  array_ref(std::vector<U, A>&& v) noexcept : span<const T>(v.data(), v.size()) {}  // lives for the call
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  /// The elements of a braced list, which lives until the end of the call's full expression.
  array_ref(std::initializer_list<T> list) noexcept : span<const T>(list.begin(), list.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
};

// ---- errors ------------------------------------------------------------------------------------

/// \brief The outcome of a non-throwing call: a kstage_status_t and its message.
class Status {
 public:
  /// OK, with no message.
  Status() = default;
  /// A status of `code` with `message`.
  Status(kstage_status_t code, std::string message) : code_(code), message_(std::move(message)) {}
  /// The call's kstage_status_t (KSTAGE_OK on success).
  kstage_status_t code() const noexcept { return code_; }
  /// True when code() is KSTAGE_OK.
  bool ok() const noexcept { return code_ == KSTAGE_OK; }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }
  /// kstage_last_error() of the failed call ("" when ok).
  const std::string& message() const noexcept { return message_; }
  /// "KSTAGE_INVALID_ARGUMENT: <message>"
  std::string to_string() const { return std::string(kstage_status_string(code_)) + ": " + message_; }

 private:
  kstage_status_t code_ = KSTAGE_OK;
  std::string message_;
};

#if KSTAGE_CPP_EXCEPTIONS
/// \brief What the throwing calls throw: the C call's status and kstage_last_error().
class Error : public std::runtime_error {
 public:
  /// The error of a failed `status` (what() is status.to_string()).
  explicit Error(const Status& status)
      : std::runtime_error(status.to_string()), status_(status.code()), message_(status.message()) {}
  /// The failed call's kstage_status_t.
  kstage_status_t status() const noexcept { return status_; }
  /// The message alone (what() is "<status name>: <message>").
  const std::string& message() const noexcept { return message_; }

 private:
  kstage_status_t status_;
  std::string message_;
};
#endif

namespace detail {

// True when `code` is KSTAGE_OK (and `st` is reset to OK, as std::filesystem's
// error_code overloads do); otherwise records it and the thread's message in `st`.
inline bool check(kstage_status_t code, Status& st) {
  if (code == KSTAGE_OK) {
    if (!st.ok()) st = Status();
    return true;
  }
  st = Status(code, kstage_last_error());
  return false;
}

#if KSTAGE_CPP_EXCEPTIONS
inline void raise_if(const Status& st) {
  if (!st.ok()) throw Error(st);
}
// The throwing form of a call: runs `call(status)` and throws what it recorded.
template <class F>
auto throwing(F&& call) {
  Status st;
  if constexpr (std::is_void_v<decltype(call(st))>) {
    call(st);
    raise_if(st);
  } else {
    auto result = call(st);
    raise_if(st);
    return result;
  }
}
#endif

// One C handle of a stage, released once with Release(stage, handle).
template <kstage_status_t (*Release)(kstage_stage_t, uint64_t)>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  // `owned` false: a handle someone else releases (see Query::borrow).
  UniqueHandle(kstage_stage_t stage, uint64_t handle, bool owned = true) noexcept
      : stage_(stage), handle_(handle), owned_(owned) {}
  UniqueHandle(UniqueHandle&& o) noexcept
      : stage_(std::exchange(o.stage_, 0)), handle_(std::exchange(o.handle_, 0)), owned_(o.owned_) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      stage_ = std::exchange(o.stage_, 0);
      handle_ = std::exchange(o.handle_, 0);
      owned_ = o.owned_;
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  ~UniqueHandle() { reset(); }

  kstage_stage_t stage() const noexcept { return stage_; }
  uint64_t get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != 0; }
  /// Releases the handle now (a status other than OK is that of the release).
  kstage_status_t reset() noexcept {
    kstage_status_t st = KSTAGE_OK;
    if (handle_ != 0 && owned_) st = Release(stage_, handle_);
    stage_ = 0;
    handle_ = 0;
    return st;
  }
  /// Gives the handle up without releasing it.
  uint64_t release() noexcept {
    stage_ = 0;
    return std::exchange(handle_, 0);
  }

 private:
  kstage_stage_t stage_ = 0;
  uint64_t handle_ = 0;
  bool owned_ = true;
};

template <class T, bool = Kokkos::is_view<T>::value>
struct is_view_rank_1_to_3 : std::false_type {};
template <class T>
struct is_view_rank_1_to_3<T, true> : std::bool_constant<(T::rank >= 1 && T::rank <= 3)> {};

}  // namespace detail

// ---- dtypes ------------------------------------------------------------------------------------

/**
 * \brief The DLPack dtype of a C++ value type, with its array extents as lanes:
 * dtype_of<float>() is float32 lanes 1, dtype_of<float[3]>() lanes 3,
 * dtype_of<double[4][4]>() float64 lanes 16. Uses the DLPack bridge's table.
 */
template <class T>
constexpr DLDataType dtype_of() {
  using E = std::remove_cv_t<std::remove_all_extents_t<T>>;
  DLDataType d = impl::DLPackDType<E>::value;
  static_assert(std::rank_v<T> <= 3, "dtype_of: at most three array extents");
  constexpr uint64_t lanes = (std::rank_v<T> >= 1 ? std::extent_v<T, 0> : 1) *
                             (std::rank_v<T> >= 2 ? std::extent_v<T, 1> : 1) *
                             (std::rank_v<T> >= 3 ? std::extent_v<T, 2> : 1);
  static_assert(lanes >= 1 && lanes <= 65535, "dtype_of: DLPack lanes are 1..65535");
  d.lanes = uint16_t(lanes);
  return d;
}

// ---- options -----------------------------------------------------------------------------------

/// \brief Options of a write (kstage_write_data_t's fields; zero is every default).
struct WriteOptions {
  /// Source row of logical element i (host memory, `count` entries).
  span<const uint32_t> index_map;
  /// Bit i%64 of word i/64 selects logical element i (host memory, ceil(count/64) words).
  span<const uint64_t> mask;
  /// The leading `count` prims of the query; 0: all of them.
  uint64_t count = 0;
  /// UPSERT, INSERT or UPDATE (a WriteBatch has its own).
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  /// Semantic of the column; must match an existing column's.
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  /// The producer's {stream, event} for device data (kstage.h).
  kstage_device_sync_t device_sync{0, 0};
  /// Where a column this write creates lives ({0, 0}: the stage's choice).
  DLDevice residency{DLDeviceType(0), 0};
  /// Source row of logical element i in device memory (`count` entries, on the write's
  /// device; exclusive with index_map): read in place by the device's gather and checked
  /// there, a bad entry failing the op (kstage.h "Device index maps and masks"). Host memory here
  /// (a HostSpace View) is a host index_map.
  device_span<const uint32_t> device_index_map;
  /// Mask words in device memory (ceil(count/64) words, on the write's device; exclusive with
  /// mask): read in place by the device's gather; the host reads the words back when it needs
  /// the selection (kstage.h "Device index maps and masks").
  device_span<const uint64_t> device_mask;
  /// index_map with int64 entries (host memory, `count` entries; exclusive with the other
  /// index maps and masks): a negative entry is out of range.
  span<const int64_t> index_map64;
  /// device_index_map with int64 entries (a device View<int64_t*>, as torch's index tensors),
  /// read in place as int64 by the device's gather and checked there.
  device_span<const int64_t> device_index_map64;
};

/// \brief Options of a read (kstage_read_desc_t's fields): the latest sealed values, zero-copy.
struct ReadOptions {
  /// Rows gathered into a buffer of the group's own, in prim order (no index map).
  bool compact = false;
  /// Only prims that changed at a sealed ordinal in [range_begin, range_end], plus tombstones.
  bool change_range = false;
  /// First ordinal of the change range (inclusive).
  uint64_t range_begin = 0;
  /// Last ordinal of the change range (inclusive).
  uint64_t range_end = 0;
  /// Where the reader wants the data ({0, 0}: the column's residency); another device implies compact.
  DLDevice target_device{DLDeviceType(0), 0};
  /// The reader's {stream, event}: a non-zero event is recorded after the work that produces
  /// the groups' data, a non-zero stream made to wait for it (kstage.h).
  kstage_device_sync_t device_sync{0, 0};
  /// Groups of at most this many prims, in query order (0: one group per attribute).
  uint64_t max_group_prims = 0;
  /// A zero-copy group on a device hands out its index map in device memory
  /// (ReadGroup::device_index_map; kstage_read_desc_t::device_index_map).
  bool device_index_map = false;

  /// The changes sealed at ordinals in [begin, end].
  static ReadOptions changes(uint64_t begin, uint64_t end) {
    ReadOptions o;
    o.change_range = true;
    o.range_begin = begin;
    o.range_end = end;
    return o;
  }
};

/// \brief Options of a map (kstage_map_desc_t's fields besides attribute and dtype).
struct MapOptions {
  /// Semantic of the column; must match an existing column's.
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  /// UPSERT, INSERT or UPDATE (kstage_map_desc_t::prim_mode).
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  /// Where a new column lives ({0, 0}: the stage's config residency, or the host).
  DLDevice residency{DLDeviceType(0), 0};
  /// Groups of at most this many prims (0: one group).
  uint64_t max_group_prims = 0;
  /// An array attribute: element_counts[i] is prim i's new length.
  bool is_array = false;
  /// An array map's new lengths, one per prim of the query (empty for a fixed-size map).
  span<const uint64_t> element_counts;
};

// ---- handles -----------------------------------------------------------------------------------

class Stage;
class Map;

/// \brief A refcounted, immutable array of path ids (kstage_path_list_t), one reference.
class PathList {
 public:
  /// An empty PathList.
  PathList() = default;
  /// The C handle (0 when empty); this object still holds its reference.
  kstage_path_list_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a list.
  explicit operator bool() const noexcept { return bool(h_); }
  /// The ids (empty for an empty PathList).
  span<const kstage_path_t> paths() const noexcept {
    const kstage_path_t* p = nullptr;
    uint64_t n = 0;
    if (!h_ || kstage_path_list_get(h_.stage(), h_.get(), &p, &n) != KSTAGE_OK) return {};
    return {p, size_t(n)};
  }
  /// Drops this object's reference now (kstage_path_list_release).
  void reset() noexcept { h_.reset(); }

 private:
  friend class Stage;
  friend class Query;
  PathList(kstage_stage_t s, kstage_path_list_t h) : h_(s, h) {}
  detail::UniqueHandle<kstage_path_list_release> h_;
};

/// \brief A fixed, ordered list of prims (kstage_query_t). Calls that can fail come in
/// the two forms of the file comment (Errors): with a trailing `Status&`, which records a
/// failure and returns an empty value, and without it, throwing kstage::Error.
class Query {
 public:
  /// An empty Query.
  Query() = default;
  /// A Query over a handle that C code owns and releases (never released here).
  static Query borrow(kstage_stage_t stage, kstage_query_t query) noexcept {
    Query q;
    q.h_ = detail::UniqueHandle<kstage_query_release>(stage, query, false);
    return q;
  }
  /// The C handle (0 when empty), still owned by this object (unless borrowed).
  kstage_query_t handle() const noexcept { return h_.get(); }
  /// The stage the query belongs to (0 when empty).
  kstage_stage_t stage() const noexcept { return h_.stage(); }
  /// True when the object holds a query.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The number of prims in the query (kstage_query_count); 0 on failure.
  uint64_t count(Status& st) const {
    uint64_t n = 0;
    detail::check(kstage_query_count(h_.stage(), h_.get(), &n), st);
    return n;
  }
  /// The query's prims as a new PathList (kstage_query_get_paths); empty on failure.
  PathList paths(Status& st) const {
    kstage_path_list_t list = 0;
    if (!detail::check(kstage_query_get_paths(h_.stage(), h_.get(), &list), st)) return {};
    return PathList(h_.stage(), list);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As count(Status&) const, throwing kstage::Error on failure.
  uint64_t count() const {
    return detail::throwing([&](Status& st) { return count(st); });
  }
  /// As paths(Status&) const, throwing kstage::Error on failure.
  PathList paths() const {
    return detail::throwing([&](Status& st) { return paths(st); });
  }
#endif
  /// Releases the query now (kstage_query_release; nothing for a borrowed one). Reads, maps
  /// and ops made from it are unaffected.
  void reset() noexcept { h_.reset(); }

 private:
  friend class Stage;
  Query(kstage_stage_t s, kstage_query_t h) : h_(s, h) {}
  detail::UniqueHandle<kstage_query_release> h_;
};

/**
 * \brief A submitted mutation (kstage_op_t). Releasing it does not cancel its work.
 *
 * The sources of a write must stay valid until its work is done (kstage.h): a
 * write from a host View into a device column copies after the call returns.
 * An Op of a write from Views therefore keeps those Views (and so their
 * memory, for managed Views) until wait() sees the work done; destroying or
 * resetting it before then waits for the work first. Unmanaged Views and
 * DLTensors own no memory: their memory must outlive the op, as in C.
 */
class Op {
 public:
  /// An empty Op.
  Op() = default;
  /// Takes `o`'s op and the Views it keeps; `o` is left empty.
  Op(Op&& o) noexcept = default;
  /// Releases this op (see reset()), then takes `o`'s.
  Op& operator=(Op&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::move(o.h_);
      keep_ = std::move(o.keep_);
    }
    return *this;
  }
  ~Op() { reset(); }
  /// The C handle (0 when empty), still owned by this object.
  kstage_op_t handle() const noexcept { return h_.get(); }
  /// True when the object holds an op.
  explicit operator bool() const noexcept { return bool(h_); }

  /// True once the op's work is done; false if `timeout_ns` ran out (KSTAGE_TIMEOUT is
  /// not an error). A failed op leaves its code and kstage_op_error() in `st`.
  bool wait(uint64_t timeout_ns, Status& st) {
    const kstage_status_t code = kstage_wait(h_.stage(), h_.get(), timeout_ns);
    if (code != KSTAGE_TIMEOUT) keep_.reset();  // done (or failed): the sources are free
    if (code == KSTAGE_TIMEOUT || code == KSTAGE_OK) {
      if (!st.ok()) st = Status();
      return code == KSTAGE_OK;
    }
    const char* why = nullptr;
    if (kstage_op_error(h_.stage(), h_.get(), &why) == KSTAGE_OK && why != nullptr && *why)
      st = Status(code, why);
    else
      st = Status(code, kstage_last_error());
    return false;
  }
  /// Waits until the op's work is done: wait(KSTAGE_TIMEOUT_INFINITE, st).
  bool wait(Status& st) { return wait(KSTAGE_TIMEOUT_INFINITE, st); }
#if KSTAGE_CPP_EXCEPTIONS
  /// As wait(uint64_t, Status&), throwing kstage::Error when the op failed (a timeout is
  /// still false, not an error).
  bool wait(uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return wait(timeout_ns, st); });
  }
#endif
  /// Releases the op (after waiting for its work if it still holds the write's Views).
  void reset() noexcept {
    if (keep_ && h_) kstage_wait(h_.stage(), h_.get(), KSTAGE_TIMEOUT_INFINITE);
    keep_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  friend class Map;
  friend class MapGroup;
  Op(kstage_stage_t s, kstage_op_t h, std::shared_ptr<void> keep = nullptr)
      : h_(s, h), keep_(std::move(keep)) {}
  detail::UniqueHandle<kstage_release_op> h_;
  std::shared_ptr<void> keep_;  // the write's source Views, until its work is done
};

namespace detail {

// An unmanaged View of tensor `t` (group data), or an empty one and `st` set.
// `usable` false: `st` already says why there is no tensor.
template <class DataType, class MemorySpace, class Layout>
Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view_of(
    const DLTensor* t, uint64_t index, uint64_t count, Status& st, bool usable = true) {
  using View = Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  typename View::pointer_type ptr = nullptr;
  Layout layout = impl::empty_layout<View>();
  if (!usable) return View(ptr, layout);
  if (index >= count) {
    st = Status(KSTAGE_INVALID_ARGUMENT, "tensor " + std::to_string(index) + " of a group with " +
                                             std::to_string(count) + " tensor(s)");
    return View(ptr, layout);
  }
  bool read_only = false;
  const impl::ViewRefusal r = impl::check_viewable<View>(t[index], 0, false, ptr, layout, read_only);
  if (!r.ok()) {
    st = Status(r.status, "tensor " + std::to_string(index) + " as a View of " +
                              impl::dtype_name(impl::DLPackDType<typename View::non_const_value_type>::value) +
                              " (rank " + std::to_string(int(View::rank)) + "): " + r.why);
    return View(nullptr, impl::empty_layout<View>());
  }
  check(KSTAGE_OK, st);
  return View(ptr, layout);
}

}  // namespace detail

namespace detail {

// The range-for iterator of a Read or a Map: the owner holds the current group
// (its `current_`); ++ fetches the next with the throwing next(), and the end
// is a null owner. Made at begin() on the first group. (Used only where
// exceptions are on: next(Group&) without a Status is the throwing form.)
template <class Owner, class Group>
class GroupIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Group;
  using difference_type = std::ptrdiff_t;
  using pointer = Group*;
  using reference = Group&;
  GroupIterator() = default;
  explicit GroupIterator(Owner* owner) : owner_(owner) { ++*this; }
  Group& operator*() const noexcept { return owner_->current_; }
  Group* operator->() const noexcept { return &owner_->current_; }
  GroupIterator& operator++() {
    if (!owner_->next(owner_->current_)) owner_ = nullptr;
    return *this;
  }
  bool operator==(const GroupIterator& o) const noexcept { return owner_ == o.owner_; }
  bool operator!=(const GroupIterator& o) const noexcept { return owner_ != o.owner_; }

 private:
  Owner* owner_ = nullptr;
};

}  // namespace detail

/// \brief One group of a read (kstage_read_group_t), released on destruction. Calls that
/// can fail come in the two forms of the file comment (Errors): with a trailing `Status&`,
/// which records a failure and returns an empty View or a null tensor, and without it,
/// throwing kstage::Error.
class ReadGroup {
 public:
  /// An empty group.
  ReadGroup() = default;
  /// Takes `o`'s group; `o` is left empty.
  ReadGroup(ReadGroup&& o) noexcept
      : h_(std::move(o.h_)), g_(std::exchange(o.g_, {})), device_map_(std::exchange(o.device_map_, false)) {}
  /// Releases this group, then takes `o`'s.
  ReadGroup& operator=(ReadGroup&& o) noexcept {
    h_ = std::move(o.h_);
    g_ = std::exchange(o.g_, {});
    device_map_ = std::exchange(o.device_map_, false);
    return *this;
  }
  /// The C handle (0 when empty), still owned by this object.
  kstage_group_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a group.
  explicit operator bool() const noexcept { return bool(h_); }
  /// The C descriptor (valid while this group lives).
  const kstage_read_group_t& raw() const noexcept { return g_; }

  /// The attribute read.
  kstage_token_t attribute() const noexcept { return g_.attribute; }
  /// The attribute's write floor at the snapshot.
  uint64_t ordinal() const noexcept { return g_.ordinal; }
  /// The group's prims (path ids); prim i is logical element i.
  span<const kstage_path_t> prims() const noexcept { return {g_.prims, size_t(g_.prim_count)}; }
  /// Row of prim i (empty: row i, as for compact reads and array groups). Host memory, unless
  /// the read asked for ReadOptions::device_index_map and the group is on a device: then use
  /// device_index_map().
  span<const uint32_t> index_map() const noexcept {
    return g_.data.index_map ? span<const uint32_t>(g_.data.index_map, size_t(g_.data.count))
                             : span<const uint32_t>();
  }
  /// The same map where it lives, labelled with the group's device: the device's memory for a
  /// read with ReadOptions::device_index_map of a group on a device, else host memory.
  device_span<const uint32_t> device_index_map() const noexcept {
    if (!g_.data.index_map || g_.data.tensor_count == 0) return {};
    const DLDevice d = g_.data.tensors[0].device;
    const bool on_device = !is_host_memory(d.device_type) && device_map_;
    return {g_.data.index_map, size_t(g_.data.count), on_device ? d : DLDevice{kDLCPU, 0}};
  }
  /// True for a tombstone group: prims() lost the attribute in the change range; no tensors.
  bool is_tombstone() const noexcept { return g_.is_delete; }
  /// True for an array attribute: one tensor per prim.
  bool is_array() const noexcept { return g_.is_array; }
  /// The column's dtype (lanes = tuple width).
  DLDataType dtype() const noexcept { return g_.dtype; }
  /// The column's semantic.
  kstage_semantic_t semantic() const noexcept { return g_.semantic; }
  /// The stage's {stream, event} for device data ({0, 0}: complete).
  kstage_device_sync_t device_sync() const noexcept { return g_.data.device_sync; }
  /// The number of tensors (see kstage_data_t::tensors).
  uint64_t tensor_count() const noexcept { return g_.data.tensor_count; }
  /// Tensor `i` as the C API describes it (no bounds check: i < tensor_count()).
  const DLTensor& tensor(uint64_t i) const noexcept { return g_.data.tensors[i]; }

  /// Tensor i as an unmanaged View (const data: groups are read-only). See the file comment.
  template <class DataType, class MemorySpace = Kokkos::HostSpace, class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i, Status& st) const {
    static_assert(std::is_const_v<typename Kokkos::ViewTraits<DataType>::value_type>,
                  "a read group is read-only: view it as const data, e.g. view<const float*[3]>(i)");
    return detail::view_of<DataType, MemorySpace, Layout>(g_.data.tensors, i, g_.data.tensor_count, st);
  }
  /// Tensor i as an owning DLPack tensor (kstage_group_export).
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags, Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    detail::check(kstage_group_export(h_.stage(), h_.get(), i, flags, &out), st);
    return out;
  }
  /// Tensor i for a consumer on its device stream `stream` (kstage_group_export_on_stream): the
  /// stream is ordered after the data, and the deleter releases the memory only after the work
  /// queued on that stream (for consumers that call deleters without synchronising).
  DLManagedTensorVersioned* export_dlpack_on_stream(uint64_t i, uintptr_t stream, uint64_t flags,
                                                    Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    detail::check(kstage_group_export_on_stream(h_.stage(), h_.get(), i, flags, stream, &out), st);
    return out;
  }
  /// Orders a consumer's {stream, event} after the work producing the data (kstage_group_sync).
  void sync(kstage_device_sync_t consumer, Status& st) const {
    detail::check(kstage_group_sync(h_.stage(), h_.get(), consumer), st);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As view(uint64_t, Status&) const, throwing kstage::Error when the tensor does not fit.
  template <class DataType, class MemorySpace = Kokkos::HostSpace, class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i) const {
    return detail::throwing([&](Status& st) { return view<DataType, MemorySpace, Layout>(i, st); });
  }
  /// As export_dlpack(uint64_t, uint64_t, Status&) const, throwing kstage::Error on failure.
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags = 0) const {
    return detail::throwing([&](Status& st) { return export_dlpack(i, flags, st); });
  }
  /// As export_dlpack_on_stream(uint64_t, uintptr_t, uint64_t, Status&) const, throwing
  /// kstage::Error on failure.
  DLManagedTensorVersioned* export_dlpack_on_stream(uint64_t i, uintptr_t stream,
                                                    uint64_t flags = 0) const {
    return detail::throwing([&](Status& st) { return export_dlpack_on_stream(i, stream, flags, st); });
  }
  /// As sync(kstage_device_sync_t, Status&) const, throwing kstage::Error on failure.
  void sync(kstage_device_sync_t consumer) const {
    detail::throwing([&](Status& st) { sync(consumer, st); });
  }
#endif
  /// Releases the group now (its data stays valid until here).
  void reset() noexcept {
    h_.reset();
    g_ = {};
    device_map_ = false;
  }

 private:
  friend class Read;
  detail::UniqueHandle<kstage_release_group> h_;
  kstage_read_group_t g_{};
  bool device_map_ = false;  // the read asked for device index maps
};

/// \brief An open read (kstage_read_t): iterate its groups, with next() or range-for.
class Read {
 public:
  /// An empty Read.
  Read() = default;
  /// The C handle (0 when empty), still owned by this object.
  kstage_read_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a read.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The next group into `group` (releasing what it held): true, or false at the end
  /// (`st` ok) or on failure (`st` set).
  bool next(ReadGroup& group, Status& st, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    group.reset();
    kstage_read_group_t g{};
    const kstage_status_t code = kstage_fetch_read_next(h_.stage(), h_.get(), timeout_ns, &g);
    if (code == KSTAGE_END_OF_ITERATION) return !detail::check(KSTAGE_OK, st);
    if (!detail::check(code, st)) return false;
    group.h_ = detail::UniqueHandle<kstage_release_group>(h_.stage(), g.handle);
    group.g_ = g;
    group.device_map_ = device_map_;
    return true;
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As next(ReadGroup&, Status&, uint64_t), throwing kstage::Error on failure (false at
  /// the end).
  bool next(ReadGroup& group, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return next(group, st, timeout_ns); });
  }

  /// Input iterator over the groups; each is released when the iterator moves on
  /// (move it out to keep it). Throws kstage::Error when a fetch fails.
  using iterator = detail::GroupIterator<Read, ReadGroup>;
  /// An iterator at the first group (fetched here).
  iterator begin() { return iterator(this); }
  /// The end iterator.
  iterator end() noexcept { return iterator(); }
#endif
  /// Releases the read (groups already fetched stay valid until released).
  void reset() noexcept {
    current_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  template <class, class>
  friend class detail::GroupIterator;
  Read(kstage_stage_t s, kstage_read_t h, bool device_map) : h_(s, h), device_map_(device_map) {}
  detail::UniqueHandle<kstage_release_read> h_;
  bool device_map_ = false;  // ReadOptions::device_index_map
  ReadGroup current_;  // the range-for group
};

/// \brief One writable group of a map (kstage_map_group_info_t). Owns nothing: its
/// buffers belong to the Map, and are committed by commit() or Map::commit(). Once
/// its map is committed, abandoned or destroyed, or the group itself committed,
/// view(), export_dlpack() and commit() refuse it (INVALID_HANDLE); the raw
/// accessors (tensor(), prims(), raw()) then point at freed memory.
class MapGroup {
 public:
  /// An empty group.
  MapGroup() = default;
  /// Takes `o`'s group; `o` is left empty.
  MapGroup(MapGroup&& o) noexcept
      : stage_(std::exchange(o.stage_, 0)), map_(std::exchange(o.map_, 0)), g_(std::exchange(o.g_, {})),
        alive_(std::move(o.alive_)) {}
  /// Takes `o`'s group; `o` is left empty. The group this object held stays mapped (its
  /// Map owns it).
  MapGroup& operator=(MapGroup&& o) noexcept {
    if (this == &o) return *this;
    stage_ = std::exchange(o.stage_, 0);
    map_ = std::exchange(o.map_, 0);
    g_ = std::exchange(o.g_, {});
    alive_ = std::move(o.alive_);
    return *this;
  }
  /// The C handle of the group (0 when empty).
  kstage_map_group_t handle() const noexcept { return g_.handle; }
  /// True when the object holds a group (not committed, moved from or never fetched).
  explicit operator bool() const noexcept { return g_.handle != 0; }
  /// The C descriptor.
  const kstage_map_group_info_t& raw() const noexcept { return g_; }
  /// The mapped attribute.
  kstage_token_t attribute() const noexcept { return g_.attribute; }
  /// The map's ordinal, at which the group is committed.
  uint64_t ordinal() const noexcept { return g_.ordinal; }
  /// The group's prims (path ids); prim i is logical element i.
  span<const kstage_path_t> prims() const noexcept { return {g_.prims, size_t(g_.prim_count)}; }
  /// Row of prim i in a fixed-size group's tensor (empty: row i).
  span<const uint32_t> index_map() const noexcept {
    return g_.data.index_map ? span<const uint32_t>(g_.data.index_map, size_t(g_.data.count))
                             : span<const uint32_t>();
  }
  /// The column's dtype (lanes = tuple width).
  DLDataType dtype() const noexcept { return g_.dtype; }
  /// The number of tensors (1 for a fixed-size map, one per prim for an array map).
  uint64_t tensor_count() const noexcept { return g_.data.tensor_count; }
  /// Tensor `i` as the C API describes it (no bounds check: i < tensor_count()).
  const DLTensor& tensor(uint64_t i) const noexcept { return g_.data.tensors[i]; }

  /// Tensor i as a writable unmanaged View (fill every row before committing).
  template <class DataType, class MemorySpace = Kokkos::HostSpace, class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i, Status& st) const {
    const bool ok = live(st);
    return detail::view_of<DataType, MemorySpace, Layout>(g_.data.tensors, i, ok ? g_.data.tensor_count : 0,
                                                          st, ok);
  }
  /// Tensor i as a writable DLPack tensor (kstage_map_group_export).
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags, Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    if (live(st)) detail::check(kstage_map_group_export(stage_, map_, g_.handle, i, flags, &out), st);
    return out;
  }
  /// Commits this group alone (kstage_unmap_group); on failure it stays mapped. A committed
  /// group is empty.
  Op commit(kstage_device_sync_t done_sync, Status& st) {
    kstage_op_t op = 0;
    if (!live(st) || !detail::check(kstage_unmap_group(stage_, map_, g_.handle, done_sync, &op), st))
      return {};
    const kstage_stage_t stage = stage_;
    *this = MapGroup();
    return Op(stage, op);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As view(uint64_t, Status&) const, throwing kstage::Error on failure.
  template <class DataType, class MemorySpace = Kokkos::HostSpace, class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i) const {
    return detail::throwing([&](Status& st) { return view<DataType, MemorySpace, Layout>(i, st); });
  }
  /// As export_dlpack(uint64_t, uint64_t, Status&) const, throwing kstage::Error on failure.
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags = 0) const {
    return detail::throwing([&](Status& st) { return export_dlpack(i, flags, st); });
  }
  /// As commit(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  Op commit(kstage_device_sync_t done_sync = {0, 0}) {
    return detail::throwing([&](Status& st) { return commit(done_sync, st); });
  }
#endif

 private:
  friend class Map;
  bool live(Status& st) const {
    if (g_.handle == 0) {
      st = Status(KSTAGE_INVALID_HANDLE, "an empty map group (committed, moved from or never fetched)");
      return false;
    }
    if (alive_.expired()) {
      st = Status(KSTAGE_INVALID_HANDLE, "map group " + std::to_string(g_.handle) +
                                             ": its map was committed, abandoned or destroyed, and its "
                                             "buffers with it");
      return false;
    }
    uint64_t floor = 0;  // the stage destroyed under a live Map took the buffers too
    if (kstage_get_write_floor(stage_, 0, &floor) != KSTAGE_OK) {
      st = Status(KSTAGE_INVALID_HANDLE, "map group " + std::to_string(g_.handle) +
                                             ": its stage was destroyed, and the map's buffers with it");
      return false;
    }
    return true;
  }
  kstage_stage_t stage_ = 0;
  kstage_map_t map_ = 0;
  kstage_map_group_info_t g_{};
  std::weak_ptr<const char> alive_;  // expires with the map
};

/// \brief An open map (kstage_map_t). Destroyed without commit(), it is abandoned
/// (kstage_release_map): nothing it handed out is written. Calls that can fail come in the
/// two forms of the file comment (Errors).
class Map {
 public:
  /// An empty Map.
  Map() = default;
  /// The C handle (0 when empty), still owned by this object.
  kstage_map_t handle() const noexcept { return h_.get(); }
  /// True when the object holds an open map.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The next writable group: true, or false at the end (`st` ok) or on failure.
  bool next(MapGroup& group, Status& st, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    group = MapGroup();
    kstage_map_group_info_t g{};
    const kstage_status_t code = kstage_fetch_map_next(h_.stage(), h_.get(), timeout_ns, &g);
    if (code == KSTAGE_END_OF_ITERATION) return !detail::check(KSTAGE_OK, st);
    if (!detail::check(code, st)) return false;
    group.stage_ = h_.stage();
    group.map_ = h_.get();
    group.g_ = g;
    group.alive_ = alive_;
    return true;
  }
  /// Commits every fetched group not yet committed, as one op, and ends the map
  /// (kstage_unmap_attribute). On failure nothing is committed and the map stays open.
  Op commit(kstage_device_sync_t done_sync, Status& st) {
    kstage_op_t op = 0;
    if (!detail::check(kstage_unmap_attribute(h_.stage(), h_.get(), done_sync, &op), st)) return {};
    const kstage_stage_t stage = h_.stage();
    h_.release();  // unmapping ended the map: nothing left to release
    current_ = MapGroup();
    alive_.reset();
    return Op(stage, op);
  }
  /// Commits with done_sync {0, 0}: commit({0, 0}, st).
  Op commit(Status& st) { return commit({0, 0}, st); }
  /// Abandons the map once the work `producer` has queued so far has run
  /// (kstage_release_map_after): for a producer that gives the map up with its writes into
  /// device buffers still queued. On failure the map stays open.
  bool abandon_after(kstage_device_sync_t producer, Status& st) {
    if (!detail::check(kstage_release_map_after(h_.stage(), h_.get(), producer), st)) return false;
    h_.release();  // released: nothing left to release
    current_ = MapGroup();
    alive_.reset();
    return true;
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As abandon_after(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  void abandon_after(kstage_device_sync_t producer) {
    detail::throwing([&](Status& st) { return abandon_after(producer, st); });
  }
  /// As next(MapGroup&, Status&, uint64_t), throwing kstage::Error on failure (false at
  /// the end).
  bool next(MapGroup& group, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return next(group, st, timeout_ns); });
  }
  /// As commit(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  Op commit(kstage_device_sync_t done_sync = {0, 0}) {
    return detail::throwing([&](Status& st) { return commit(done_sync, st); });
  }
  /// Input iterator over the groups (each stays mapped until committed).
  using iterator = detail::GroupIterator<Map, MapGroup>;
  /// An iterator at the first group (fetched here).
  iterator begin() { return iterator(this); }
  /// The end iterator.
  iterator end() noexcept { return iterator(); }
#endif
  /// Abandons the map now (kstage_release_map).
  void reset() noexcept {
    current_ = MapGroup();
    alive_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  template <class, class>
  friend class detail::GroupIterator;
  Map(kstage_stage_t s, kstage_map_t h) : h_(s, h), alive_(std::make_shared<const char>('\0')) {}
  detail::UniqueHandle<kstage_release_map> h_;
  MapGroup current_;
  std::shared_ptr<const char> alive_;  // its groups' weak_ptrs expire with it
};

/// \brief A path range (kstage_intern_path_range): `count` paths with ids first, first + 1, ...
struct PathRange {
  PathRange() noexcept {}  // not an aggregate: a braced list passed to query() is a path list
  /// The id of member 0 (0 for an empty PathRange).
  kstage_path_t first = 0;
  /// The number of members.
  uint64_t count = 0;
  /// Member i's id (no check: i < count).
  kstage_path_t operator[](uint64_t i) const noexcept { return first + i; }
};

/// \brief How a path range was made (kstage_path_range_definition): kstage_intern_path_range's
/// arguments. The strings are the stage's, valid for its lifetime.
struct PathRangeDefinition {
  std::string_view parent;  ///< the parent path ("/" for top-level members)
  std::string_view prefix;  ///< the prefix ("" for none)
  uint64_t begin = 0;       ///< the number of the first member
  uint64_t count = 0;       ///< the number of members
};

/// \brief A filter over existing prims (kstage_filter_t): the AND of what is set.
struct Filter {
  Filter() noexcept {}  // not an aggregate: a braced list passed to query() is a path list
  /// Prims that hold every one of these attributes (sealed).
  span<const kstage_token_t> has;
  /// Prims whose path is in this list (an empty PathList handle: no constraint).
  kstage_path_list_t path_in = 0;
  /// Prims at or below this path (0: none).
  kstage_path_t path_prefix = 0;
};

/**
 * \brief Several attributes written as one op (kstage_write_attributes): all are
 * accepted or none is. Each add() keeps a copy of its View, which the write's
 * Op then keeps until its work is done (see Op); add() ignores options.mode:
 * the batch's mode applies.
 */
class WriteBatch {
 public:
  /// An empty batch whose writes use prim mode `mode`.
  explicit WriteBatch(kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) : mode_(mode) {}
  /// Adds a write of `attribute` from a View of rank 1-3 (a fixed-size attribute).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  WriteBatch& add(kstage_token_t attribute, const View& view, const WriteOptions& options = {}) {
    add(attribute, borrow_dlpack(view).tensor(), options);
    items_.back().keep = std::make_shared<View>(view);
    return *this;
  }
  /// A borrowed DLTensor (copied here, with its shape and strides).
  WriteBatch& add(kstage_token_t attribute, const DLTensor& tensor, const WriteOptions& options = {}) {
    Item item;
    item.attribute = attribute;
    item.options = options;
    item.tensor = tensor;
    for (int d = 0; d < tensor.ndim && d < 3; ++d) {
      item.shape[d] = tensor.shape ? tensor.shape[d] : 0;
      item.strides[d] = tensor.strides ? tensor.strides[d] : 0;
    }
    item.ndim_ok = tensor.ndim >= 0 && tensor.ndim <= 3;
    items_.push_back(item);
    return *this;
  }
  /// The batch's prim mode.
  kstage_prim_mode_t mode() const noexcept { return mode_; }
  /// The number of writes added.
  size_t size() const noexcept { return items_.size(); }

 private:
  friend class Stage;
  struct Item {
    kstage_token_t attribute = 0;
    WriteOptions options;
    DLTensor tensor{};
    int64_t shape[3] = {};
    int64_t strides[3] = {};
    bool ndim_ok = true;
    std::shared_ptr<void> keep;  // the View, kept by the write's Op
  };
  kstage_prim_mode_t mode_;
  std::vector<Item> items_;
};

namespace detail {

// The C API reads `count` index_map entries and ceil(count / 64) mask words: spans shorter
// than that are refused here (the C API cannot see their sizes).
inline bool check_selection(const WriteOptions& o, const std::string& where, Status& st) {
  const uint64_t words = o.count / 64 + (o.count % 64 != 0);
  std::string what;
  // The selections set, by the options' names (the C API would name its fields instead).
  std::string set;
  int n_set = 0;
  for (auto [on, name] : {std::pair{!o.index_map.empty(), "options.index_map"},
                          std::pair{!o.device_index_map.empty(), "options.device_index_map"},
                          std::pair{!o.index_map64.empty(), "options.index_map64"},
                          std::pair{!o.device_index_map64.empty(), "options.device_index_map64"},
                          std::pair{!o.mask.empty(), "options.mask"},
                          std::pair{!o.device_mask.empty(), "options.device_mask"}})
    if (on) set += std::string(n_set++ == 0 ? "" : " and ") + name;
  if (n_set > 1) {
    st = Status(KSTAGE_INVALID_ARGUMENT,
                where + set + (n_set == 2 ? " are both set" : " are all set") + "; pass one");
    return false;
  }
  if (!o.device_index_map.empty() && o.device_index_map.size() < o.count)
    what = "options.device_index_map has " + std::to_string(o.device_index_map.size()) + " entries";
  else if (!o.device_index_map64.empty() && o.device_index_map64.size() < o.count)
    what = "options.device_index_map64 has " + std::to_string(o.device_index_map64.size()) + " entries";
  else if (!o.index_map64.empty() && o.index_map64.size() < o.count)
    what = "options.index_map64 has " + std::to_string(o.index_map64.size()) + " entries";
  else if (!o.device_mask.empty() && o.device_mask.size() < words)
    what = "options.device_mask has " + std::to_string(o.device_mask.size()) + " words (" +
           std::to_string(o.device_mask.size() * 64) + " prims)";
  else if (!o.index_map.empty() && o.index_map.size() < o.count)
    what = "options.index_map has " + std::to_string(o.index_map.size()) + " entries";
  else if (!o.mask.empty() && o.mask.size() < words)
    what = "options.mask has " + std::to_string(o.mask.size()) + " words (" +
           std::to_string(o.mask.size() * 64) + " prims)";
  if (what.empty()) return true;
  st = Status(KSTAGE_INVALID_ARGUMENT, where + what + " but options.count is " + std::to_string(o.count));
  return false;
}

inline kstage_write_data_t write_data(const WriteOptions& o) {
  kstage_write_data_t d = kstage_write_data_init();
  d.semantic = o.semantic;
  d.count = o.count;
  d.index_map = o.index_map.empty() ? nullptr : o.index_map.data();
  if (!o.device_index_map.empty()) {
    d.index_map = o.device_index_map.data();
    d.selection_device = o.device_index_map.device();
  }
  d.index_map64 = o.index_map64.empty() ? nullptr : o.index_map64.data();
  if (!o.device_index_map64.empty()) {
    d.index_map64 = o.device_index_map64.data();
    d.selection_device = o.device_index_map64.device();
  }
  d.mask = o.mask.empty() ? nullptr : o.mask.data();
  if (!o.device_mask.empty()) {
    d.mask = o.device_mask.data();
    d.selection_device = o.device_mask.device();
  }
  d.device_sync = o.device_sync;
  d.residency = o.residency;
  return d;
}

}  // namespace detail

/**
 * \brief A stage (kstage_stage_t), destroyed with the object.
 *
 * Each call names the C function it makes; kstage.h has the rules. Every call that can
 * fail comes in the two forms of the file comment (Errors): the one with a trailing
 * `Status&` records a failure there and returns an empty value (0, an empty handle
 * object, an empty string or vector); the one without it throws kstage::Error and is
 * declared only when KSTAGE_CPP_EXCEPTIONS is 1.
 */
class Stage {
 public:
  /// An empty Stage; use Stage::create.
  Stage() = default;
  /// A Stage over a stage that C code created and destroys (never destroyed here): for
  /// C++ parts of a code whose stage lives in C.
  static Stage borrow(kstage_stage_t stage) noexcept {
    Stage s;
    s.stage_ = stage;
    s.owned_ = false;
    return s;
  }
  /// Takes `o`'s stage; `o` is left empty.
  Stage(Stage&& o) noexcept : stage_(std::exchange(o.stage_, 0)), owned_(o.owned_) {}
  /// Destroys this object's stage (unless borrowed; see reset()), then takes `o`'s.
  Stage& operator=(Stage&& o) noexcept {
    if (this != &o) {
      reset();
      stage_ = std::exchange(o.stage_, 0);
      owned_ = o.owned_;
    }
    return *this;
  }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage() { reset(); }

  /// The C handle (0 when empty), still owned by this object (unless borrowed).
  kstage_stage_t handle() const noexcept { return stage_; }
  /// True when the object holds a stage.
  explicit operator bool() const noexcept { return stage_ != 0; }
  /// Destroys the stage now: every handle of it becomes stale.
  void reset() noexcept {
    if (stage_ != 0 && owned_) kstage_destroy(stage_);
    stage_ = 0;
  }

  /// A new stage with `config` (kstage_create).
  static Stage create(const kstage_config_t& config, Status& st) {
    Stage s;
    detail::check(kstage_create(&config, &s.stage_), st);
    return s;
  }

  // --- dictionary -------------------------------------------------------------------------------
  /// Interns an attribute name (kstage_intern_token).
  kstage_token_t token(std::string_view name, Status& st) const {
    kstage_token_t t = 0;
    detail::check(kstage_intern_token(stage_, name.data(), name.size(), &t), st);
    return t;
  }
  /// Interns a prim path (kstage_intern_path).
  kstage_path_t path(std::string_view name, Status& st) const {
    kstage_path_t p = 0;
    detail::check(kstage_intern_path(stage_, name.data(), name.size(), &p), st);
    return p;
  }
  /// Interns every path of `names` at once (kstage_intern_paths): all, or none when one is bad.
  std::vector<kstage_path_t> paths(array_ref<std::string_view> names, Status& st) const {
    std::vector<const char*> strs(names.size());
    std::vector<size_t> lengths(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      strs[i] = names[i].data();
      lengths[i] = names[i].size();
    }
    std::vector<kstage_path_t> ids(names.size());
    if (!detail::check(kstage_intern_paths(stage_, strs.data(), lengths.data(), ids.size(), ids.data()), st))
      return {};
    return ids;
  }
  /// Interns the paths "<parent>/<prefix><n>", n in [begin, begin + count): O(1), consecutive ids.
  PathRange path_range(std::string_view parent, std::string_view prefix, uint64_t begin, uint64_t count,
                       Status& st) const {
    PathRange r;
    if (detail::check(kstage_intern_path_range(stage_, parent.data(), parent.size(),
                                               prefix.empty() ? "" : prefix.data(), prefix.size(), begin,
                                               count, &r.first),
                      st))
      r.count = count;
    return r;
  }
  /// How the range whose first id is range.first was made (kstage_path_range_definition).
  PathRangeDefinition path_range_definition(kstage_path_t first, Status& st) const {
    PathRangeDefinition d;
    const char *parent = nullptr, *prefix = nullptr;
    size_t parent_length = 0, prefix_length = 0;
    if (!detail::check(kstage_path_range_definition(stage_, first, &parent, &parent_length, &prefix,
                                                    &prefix_length, &d.begin),
                       st) ||
        !detail::check(kstage_path_range_info(stage_, first, nullptr, &d.count, nullptr), st))
      return {};
    d.parent = {parent, parent_length};
    d.prefix = {prefix, prefix_length};
    return d;
  }
  /// The string of a token (kstage_token_string), valid for the stage's lifetime.
  std::string_view token_string(kstage_token_t token, Status& st) const {
    const char* s = nullptr;
    size_t n = 0;
    if (!detail::check(kstage_token_string(stage_, token, &s, &n), st)) return {};
    return {s, n};
  }
  /// The string of a path (kstage_path_string), valid for the stage's lifetime.
  std::string_view path_string(kstage_path_t path, Status& st) const {
    const char* s = nullptr;
    size_t n = 0;
    if (!detail::check(kstage_path_string(stage_, path, &s, &n), st)) return {};
    return {s, n};
  }
  /// A PathList holding a copy of `paths` (kstage_path_list_create).
  PathList path_list(array_ref<kstage_path_t> paths, Status& st) const {
    kstage_path_list_t list = 0;
    if (!detail::check(kstage_path_list_create(stage_, paths.data(), paths.size(), &list), st)) return {};
    return PathList(stage_, list);
  }

  // --- queries ----------------------------------------------------------------------------------
  /// A query over `paths`, in this order (kstage_query_paths); they may name prims that do
  /// not exist yet.
  Query query(array_ref<kstage_path_t> paths, Status& st) const {
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_paths(stage_, paths.data(), paths.size(), &q), st)) return {};
    return Query(stage_, q);
  }
  /// A query over members start, start + stride, ... of `range` (kstage_query_range; count 0:
  /// to its end; stride 0: 1).
  Query query(const PathRange& range, uint64_t start, uint64_t count, uint64_t stride, Status& st) const {
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_range(stage_, range.first, start, count, stride, &q), st)) return {};
    return Query(stage_, q);
  }
  /// A query over the existing prims that match `filter` (kstage_query_filter), in path-id
  /// order.
  Query query(const Filter& filter, Status& st) const {
    kstage_filter_t f{};
    f.has_attributes = filter.has.data();
    f.has_attribute_count = filter.has.size();
    f.path_in = filter.path_in;
    f.path_prefix = filter.path_prefix;
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_filter(stage_, &f, &q), st)) return {};
    return Query(stage_, q);
  }

  // --- writes -----------------------------------------------------------------------------------
  /// Writes `attribute` of the query's prims at `ordinal` from a View of rank 1-3, a
  /// fixed-size attribute (kstage_write_attribute); the Op keeps a copy of the View until
  /// the work is done (see Op).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write(kstage_token_t attribute, const Query& query, const View& view, uint64_t ordinal,
           const WriteOptions& options, Status& st) const {
    return submit(attribute, query, &borrow_dlpack(view).tensor(), 1, false, ordinal, options, st,
                  std::make_shared<View>(view));
  }
  /// Writes `attribute` of the query's prims at `ordinal` from a borrowed DLTensor, a
  /// fixed-size attribute (kstage_write_attribute); the tensor must stay valid until the op
  /// completes.
  Op write(kstage_token_t attribute, const Query& query, const DLTensor& tensor, uint64_t ordinal,
           const WriteOptions& options, Status& st) const {
    return submit(attribute, query, &tensor, 1, false, ordinal, options, st, nullptr);
  }
  /// Writes every attribute of `batch` for the query's prims at `ordinal`, as one op with
  /// the batch's prim mode (kstage_write_attributes): all are accepted or none is.
  Op write(const Query& query, const WriteBatch& batch, uint64_t ordinal, Status& st) const {
    std::vector<kstage_token_t> attributes(batch.items_.size());
    std::vector<DLTensor> tensors(batch.items_.size());
    std::vector<kstage_write_data_t> data(batch.items_.size());
    for (size_t i = 0; i < batch.items_.size(); ++i) {
      const WriteBatch::Item& item = batch.items_[i];
      if (!item.ndim_ok) {
        st = Status(KSTAGE_INVALID_ARGUMENT,
                    "batch entry " + std::to_string(i) + ": a tensor of rank 1-3 is written");
        return {};
      }
      if (!detail::check_selection(item.options, "batch entry " + std::to_string(i) + ": ", st)) return {};
      attributes[i] = item.attribute;
      tensors[i] = item.tensor;
      tensors[i].shape = item.tensor.shape ? const_cast<int64_t*>(item.shape) : nullptr;
      tensors[i].strides = item.tensor.strides ? const_cast<int64_t*>(item.strides) : nullptr;
      data[i] = detail::write_data(item.options);
      data[i].tensors = &tensors[i];
      data[i].tensor_count = 1;
    }
    // What the Op keeps is made first: nothing may fail once the stage has the write.
    std::vector<std::shared_ptr<void>> keep;
    for (const WriteBatch::Item& item : batch.items_)
      if (item.keep) keep.push_back(item.keep);
    auto kept = keep.empty() ? nullptr : std::make_shared<decltype(keep)>(std::move(keep));
    kstage_op_t op = 0;
    if (!detail::check(kstage_write_attributes(stage_, query.handle(), attributes.data(), data.data(),
                                               data.size(), ordinal, batch.mode_, &op),
                       st))
      return {};
    return Op(stage_, op, std::move(kept));
  }
  /// Writes an array attribute (kstage_write_attribute), one View per source row (any range
  /// of Views); the Op keeps copies of the Views until the work is done.
  template <class Rows, class = std::enable_if_t<!Kokkos::is_view<Rows>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const Rows& rows, uint64_t ordinal,
                  const WriteOptions& options, Status& st) const {
    using RowView = std::decay_t<decltype(*std::begin(rows))>;
    static_assert(detail::is_view_rank_1_to_3<RowView>::value, "write_ragged: a range of Views of rank 1-3");
    auto keep = std::make_shared<std::vector<RowView>>(std::begin(rows), std::end(rows));
    if (keep->size() == 1 && !one_source_row(query, options, "one View", st)) return {};
    std::vector<BorrowedTensor> held;
    held.reserve(keep->size());
    for (const RowView& row : *keep) held.push_back(borrow_dlpack(row));
    std::vector<DLTensor> tensors;
    tensors.reserve(held.size());
    for (const BorrowedTensor& b : held) tensors.push_back(b.tensor());
    return submit(attribute, query, tensors.data(), tensors.size(), true, ordinal, options, st,
                  std::move(keep));
  }
  /// An array attribute from one packed View: source row i is the next
  /// `row_counts[i]` entries of its leading axis (no copy: one DLTensor per row
  /// into the View's memory).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const View& packed,
                  array_ref<uint64_t> row_counts, uint64_t ordinal, const WriteOptions& options,
                  Status& st) const {
    if (row_counts.size() == 1 && !one_source_row(query, options, "row_counts with one entry", st))
      return {};
    const BorrowedTensor whole = borrow_dlpack(packed);
    const DLTensor& w = whole.tensor();
    const uint64_t entries = uint64_t(w.shape[0]);
    uint64_t total = 0;
    for (uint64_t c : row_counts) {
      if (c > entries - total) {  // (total <= entries: no overflow)
        st = Status(KSTAGE_INVALID_ARGUMENT, "row_counts add up to more than the packed View's " +
                                                 std::to_string(entries) + " entries");
        return {};
      }
      total += c;
    }
    if (total != entries) {
      st = Status(KSTAGE_INVALID_ARGUMENT, "row_counts add up to " + std::to_string(total) +
                                               " entries, but the packed View has " +
                                               std::to_string(w.shape[0]));
      return {};
    }
    const size_t elem = size_t(w.dtype.bits / 8) * w.dtype.lanes;
    std::vector<DLTensor> tensors(row_counts.size(), w);
    std::vector<int64_t> shapes(row_counts.size() * size_t(w.ndim));
    uint64_t first = 0;
    for (size_t i = 0; i < row_counts.size(); ++i) {
      int64_t* shape = &shapes[i * size_t(w.ndim)];
      for (int d = 0; d < w.ndim; ++d) shape[d] = w.shape[d];
      shape[0] = int64_t(row_counts[i]);
      tensors[i].shape = shape;
      tensors[i].byte_offset = row_counts[i] ? first * uint64_t(w.strides[0]) * elem : 0;
      if (row_counts[i] == 0) tensors[i].data = w.data;
      first += row_counts[i];
    }
    return submit(attribute, query, tensors.data(), tensors.size(), true, ordinal, options, st,
                  std::make_shared<View>(packed));
  }
  /**
   * \brief A fixed-size attribute whose memory passes to the stage (a managed
   * tensor): a compact dense write on the column's device is adopted without a
   * copy. Taken by value: when the write holds the View's last reference (it was
   * moved in), the stage may write into it in place; otherwise it is handed over
   * read-only, so the copies the caller keeps never see the stage's later
   * writes (a sparse write copies the column first). Kokkos 3's View move
   * copies, so there the caller's View always keeps a reference and the
   * hand-over is read-only. An unmanaged View owns nothing to hand over:
   * INVALID_ARGUMENT.
   */
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_managed(kstage_token_t attribute, const Query& query, View view, uint64_t ordinal,
                   const WriteOptions& options, Status& st) const {
    if (view.use_count() == 0 && view.size() > 0) {
      st = Status(KSTAGE_INVALID_ARGUMENT,
                  "write_managed: the View is unmanaged, so it owns no memory to hand to the "
                  "stage; write it with write() instead");
      return {};
    }
    if (!detail::check_selection(options, "write_managed: ", st)) return {};
    ExportOptions eo;
    eo.read_only = view.use_count() > 1;
    DLManagedTensorVersioned* managed = export_dlpack_versioned(std::move(view), eo);
    kstage_write_data_t d = detail::write_data(options);
    d.managed_tensors = &managed;
    d.tensor_count = 1;
    kstage_op_t op = 0;
    // The stage calls the deleter exactly once, also when it rejects the write.
    if (!detail::check(kstage_write_attribute(stage_, query.handle(), attribute, ordinal, &d,
                                              options.mode, &op),
                       st))
      return {};
    return Op(stage_, op);
  }
  /// Deletes `attributes` of the query's prims at `ordinal` (none: the prims themselves;
  /// kstage_delete_attributes).
  Op delete_attributes(const Query& query, array_ref<kstage_token_t> attributes, uint64_t ordinal,
                       Status& st) const {
    kstage_op_t op = 0;
    if (!detail::check(kstage_delete_attributes(stage_, query.handle(), attributes.data(),
                                                attributes.size(), ordinal, &op),
                       st))
      return {};
    return Op(stage_, op);
  }
  /// Deletes the query's prims (every attribute they hold) at `ordinal`.
  Op delete_prims(const Query& query, uint64_t ordinal, Status& st) const {
    return delete_attributes(query, {}, ordinal, st);
  }
  /// Seals: advances the write floor of `attributes` (none: every attribute) to `ordinal`
  /// (kstage_advance_write_floor).
  void seal(uint64_t ordinal, array_ref<kstage_token_t> attributes, Status& st) const {
    detail::check(kstage_advance_write_floor(stage_, ordinal, attributes.data(), attributes.size()), st);
  }
  /// Advances every attribute's write floor to `ordinal`.
  void seal(uint64_t ordinal, Status& st) const { seal(ordinal, {}, st); }
  /// The write floor of `attribute` (0: the global floor; kstage_get_write_floor).
  uint64_t write_floor(kstage_token_t attribute, Status& st) const {
    uint64_t f = 0;
    detail::check(kstage_get_write_floor(stage_, attribute, &f), st);
    return f;
  }

  // --- describing the stage ---------------------------------------------------------------------
  /// The attributes that have a column, in token order (kstage_list_attributes).
  std::vector<kstage_token_t> attributes(Status& st) const {
    std::vector<kstage_token_t> out;
    uint64_t n = 0;
    // Another thread may create columns between the two calls: ask until the count holds.
    for (;;) {
      if (!detail::check(kstage_list_attributes(stage_, out.data(), out.size(), &n), st)) return {};
      if (n <= out.size()) break;
      out.resize(n);
    }
    out.resize(n);
    return out;
  }
  /// An attribute's schema, residency, write floor and sealed prim count
  /// (kstage_attribute_info).
  kstage_attribute_info_t attribute_info(kstage_token_t attribute, Status& st) const {
    kstage_attribute_info_t info = kstage_attribute_info_init();
    if (!detail::check(kstage_attribute_info(stage_, attribute, &info), st)) return kstage_attribute_info_init();
    return info;
  }

  // --- reads and maps ---------------------------------------------------------------------------
  /// Opens a read of `attributes` for the query's prims against the latest sealed state
  /// (kstage_read_attributes).
  Read read(const Query& query, array_ref<kstage_token_t> attributes, const ReadOptions& options,
            Status& st) const {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = options.compact;
    d.change_range = options.change_range;
    d.range_begin = options.range_begin;
    d.range_end = options.range_end;
    d.target_device = options.target_device;
    d.device_sync = options.device_sync;
    d.max_group_prims = options.max_group_prims;
    d.device_index_map = options.device_index_map;
    kstage_read_t r = 0;
    if (!detail::check(kstage_read_attributes(stage_, query.handle(), attributes.data(),
                                              attributes.size(), &d, &r),
                       st))
      return {};
    return Read(stage_, r, options.device_index_map);
  }
  /// Maps the query's prims for `attribute` of `dtype` at `ordinal` (kstage_map_attribute):
  /// writable groups to fill and commit.
  Map map(const Query& query, kstage_token_t attribute, uint64_t ordinal, DLDataType dtype,
          const MapOptions& options, Status& st) const {
    kstage_map_desc_t d = kstage_map_desc_init();
    d.semantic = options.semantic;
    d.attribute = attribute;
    d.dtype = dtype;
    d.prim_mode = options.mode;
    d.residency = options.residency;
    d.max_group_prims = options.max_group_prims;
    d.is_array = options.is_array;
    kstage_map_t m = 0;
    if (!detail::check(kstage_map_attribute(stage_, query.handle(), &d, ordinal,
                                            options.element_counts.empty() ? nullptr
                                                                           : options.element_counts.data(),
                                            options.element_counts.size(), &m),
                       st))
      return {};
    return Map(stage_, m);
  }

#if KSTAGE_CPP_EXCEPTIONS
  // --- the throwing forms -----------------------------------------------------------------------
  /// As create(const kstage_config_t&, Status&), throwing kstage::Error on failure.
  static Stage create(const kstage_config_t& config = kstage_config_init()) {
    return detail::throwing([&](Status& st) { return create(config, st); });
  }
  /// As token(std::string_view, Status&) const, throwing kstage::Error on failure.
  kstage_token_t token(std::string_view name) const {
    return detail::throwing([&](Status& st) { return token(name, st); });
  }
  /// As path(std::string_view, Status&) const, throwing kstage::Error on failure.
  kstage_path_t path(std::string_view name) const {
    return detail::throwing([&](Status& st) { return path(name, st); });
  }
  /// As paths(array_ref<std::string_view>, Status&) const, throwing kstage::Error on failure.
  std::vector<kstage_path_t> paths(array_ref<std::string_view> names) const {
    return detail::throwing([&](Status& st) { return paths(names, st); });
  }
  /// As path_range(std::string_view, std::string_view, uint64_t, uint64_t, Status&) const,
  /// throwing kstage::Error on failure.
  PathRange path_range(std::string_view parent, std::string_view prefix, uint64_t begin, uint64_t count) const {
    return detail::throwing([&](Status& st) { return path_range(parent, prefix, begin, count, st); });
  }
  /// As path_range_definition(kstage_path_t, Status&) const, throwing kstage::Error on failure.
  PathRangeDefinition path_range_definition(kstage_path_t first) const {
    return detail::throwing([&](Status& st) { return path_range_definition(first, st); });
  }
  /// As query(const PathRange&, uint64_t, uint64_t, uint64_t, Status&) const, throwing
  /// kstage::Error on failure.
  Query query(const PathRange& range, uint64_t start = 0, uint64_t count = 0, uint64_t stride = 1) const {
    return detail::throwing([&](Status& st) { return query(range, start, count, stride, st); });
  }
  /// As token_string(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  std::string_view token_string(kstage_token_t token) const {
    return detail::throwing([&](Status& st) { return token_string(token, st); });
  }
  /// As path_string(kstage_path_t, Status&) const, throwing kstage::Error on failure.
  std::string_view path_string(kstage_path_t path) const {
    return detail::throwing([&](Status& st) { return path_string(path, st); });
  }
  /// As path_list(array_ref<kstage_path_t>, Status&) const, throwing kstage::Error on failure.
  PathList path_list(array_ref<kstage_path_t> paths) const {
    return detail::throwing([&](Status& st) { return path_list(paths, st); });
  }
  /// As query(array_ref<kstage_path_t>, Status&) const, throwing kstage::Error on failure.
  Query query(array_ref<kstage_path_t> paths) const {
    return detail::throwing([&](Status& st) { return query(paths, st); });
  }
  /// As query(const Filter&, Status&) const, throwing kstage::Error on failure.
  Query query(const Filter& filter) const {
    return detail::throwing([&](Status& st) { return query(filter, st); });
  }
  /// As the write of a View taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write(kstage_token_t attribute, const Query& query, const View& view, uint64_t ordinal,
           const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) { return write(attribute, query, view, ordinal, options, st); });
  }
  /// As the write of a DLTensor taking a Status&, throwing kstage::Error on failure.
  Op write(kstage_token_t attribute, const Query& query, const DLTensor& tensor, uint64_t ordinal,
           const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) { return write(attribute, query, tensor, ordinal, options, st); });
  }
  /// As write(const Query&, const WriteBatch&, uint64_t, Status&) const, throwing kstage::Error on failure.
  Op write(const Query& query, const WriteBatch& batch, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return write(query, batch, ordinal, st); });
  }
  /// As the write_ragged of a range of Views taking a Status&, throwing kstage::Error on failure.
  template <class Rows, class = std::enable_if_t<!Kokkos::is_view<Rows>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const Rows& rows, uint64_t ordinal,
                  const WriteOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return write_ragged(attribute, query, rows, ordinal, options, st); });
  }
  /// As the write_ragged of a packed View taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const View& packed,
                  array_ref<uint64_t> row_counts, uint64_t ordinal, const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) {
      return write_ragged(attribute, query, packed, row_counts, ordinal, options, st);
    });
  }
  /// As the write_managed taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_managed(kstage_token_t attribute, const Query& query, View view, uint64_t ordinal,
                   const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) {
      return write_managed(attribute, query, std::move(view), ordinal, options, st);
    });
  }
  /// As delete_attributes(const Query&, array_ref<kstage_token_t>, uint64_t, Status&) const,
  /// throwing kstage::Error on failure.
  Op delete_attributes(const Query& query, array_ref<kstage_token_t> attributes, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return delete_attributes(query, attributes, ordinal, st); });
  }
  /// As delete_prims(const Query&, uint64_t, Status&) const, throwing kstage::Error on failure.
  Op delete_prims(const Query& query, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return delete_prims(query, ordinal, st); });
  }
  /// As seal(uint64_t, array_ref<kstage_token_t>, Status&) const, throwing kstage::Error on failure.
  void seal(uint64_t ordinal, array_ref<kstage_token_t> attributes = {}) const {
    detail::throwing([&](Status& st) { seal(ordinal, attributes, st); });
  }
  /// As write_floor(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  uint64_t write_floor(kstage_token_t attribute = 0) const {
    return detail::throwing([&](Status& st) { return write_floor(attribute, st); });
  }
  /// As attributes(Status&) const, throwing kstage::Error on failure.
  std::vector<kstage_token_t> attributes() const {
    return detail::throwing([&](Status& st) { return attributes(st); });
  }
  /// As attribute_info(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  kstage_attribute_info_t attribute_info(kstage_token_t attribute) const {
    return detail::throwing([&](Status& st) { return attribute_info(attribute, st); });
  }
  /// As read(const Query&, array_ref<kstage_token_t>, const ReadOptions&, Status&) const,
  /// throwing kstage::Error on failure.
  Read read(const Query& query, array_ref<kstage_token_t> attributes,
            const ReadOptions& options = {}) const {
    return detail::throwing([&](Status& st) { return read(query, attributes, options, st); });
  }
  /// As map(const Query&, kstage_token_t, uint64_t, DLDataType, const MapOptions&, Status&)
  /// const, throwing kstage::Error on failure.
  Map map(const Query& query, kstage_token_t attribute, uint64_t ordinal, DLDataType dtype,
          const MapOptions& options = {}) const {
    return detail::throwing([&](Status& st) { return map(query, attribute, ordinal, dtype, options, st); });
  }
#endif

 private:
  // A ragged write of a single tensor is the C API's packed form when more than one source
  // row is wanted; the C++ API's one-View-per-row forms must be one row.
  bool one_source_row(const Query& query, const WriteOptions& o, const char* what, Status& st) const {
    uint64_t wanted = o.count;
    if (!o.index_map.empty()) {
      wanted = 0;
      const size_t n = o.count ? std::min<size_t>(o.index_map.size(), size_t(o.count)) : o.index_map.size();
      for (size_t i = 0; i < n; ++i) wanted = std::max<uint64_t>(wanted, uint64_t(o.index_map[i]) + 1);
    } else if (wanted == 0) {
      wanted = query.count(st);
      if (!st.ok()) return false;
    }
    if (wanted == 1) return true;
    st = Status(KSTAGE_INVALID_ARGUMENT,
                std::string("write_ragged: ") + what + " for " + std::to_string(wanted) +
                    " source rows: give one View per row, or a packed View with one row count per row");
    return false;
  }
  Op submit(kstage_token_t attribute, const Query& query, const DLTensor* tensors, size_t n,
            bool is_array, uint64_t ordinal, const WriteOptions& options, Status& st,
            std::shared_ptr<void> keep) const {
    if (!detail::check_selection(options, "", st)) return {};
    kstage_write_data_t d = detail::write_data(options);
    d.tensors = tensors;
    d.tensor_count = n;
    d.is_array = is_array;
    kstage_op_t op = 0;
    if (!detail::check(kstage_write_attribute(stage_, query.handle(), attribute, ordinal, &d,
                                              options.mode, &op),
                       st))
      return {};
    return Op(stage_, op, std::move(keep));
  }

  kstage_stage_t stage_ = 0;
  bool owned_ = true;
};

/// How the library was built and what it runs on: kstage_build_info's "key: value" lines
/// (kstage, kokkos_built, kokkos_running, host_execution, host_threads, backends, devices).
inline std::string build_info(Status& st) {
  const char* text = nullptr;
  if (!detail::check(kstage_build_info(&text), st)) return {};
  return text;
}
#if KSTAGE_CPP_EXCEPTIONS
/// As build_info(Status&), throwing kstage::Error on failure.
inline std::string build_info() {
  return detail::throwing([&](Status& st) { return build_info(st); });
}
#endif

}  // namespace kstage

#endif  // KSTAGE_KSTAGE_HPP_
