// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/span.hpp
 * \brief The C++ API's views of memory someone else owns: span (host elements),
 * device_span (elements on a DLPack device) and array_ref (function arguments).
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_SPAN_HPP_
#define KSTAGE_HPP_SPAN_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

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
    static_assert(
        Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible,
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
  array_ref(std::vector<U, A>&& v) noexcept
      : span<const T>(v.data(), v.size()) {}  // lives for the call
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

}  // namespace kstage

#endif  // KSTAGE_HPP_SPAN_HPP_
