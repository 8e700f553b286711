// SPDX-License-Identifier: Apache-2.0
#include "api/descriptors.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace kstage::capi {
namespace {

// The first released layout of each descriptor: a struct_size below it
// cannot come from any kstage.h. These sizes are frozen; fields added later
// go after them, as kstage_write_data_t::legacy_managed_tensors did after
// byte 80 (static_asserts below keep the current structs free of implicit
// padding, so that "every byte the library knows" is exact).
template <class T>
struct Layout;
// `layouts` lists where each released layout ends: a caller's struct_size
// between two of them holds the earlier one whole and part of the next
// field, which is read as absent (copy_descriptor), never half-copied.
template <>
struct Layout<kstage_config_t> {
  static constexpr const char* name = "kstage_config_t";
  static constexpr size_t layouts[] = {8, 16};  // 0.1; 0.3 residency
  static constexpr size_t first = layouts[0];
};
template <>
struct Layout<kstage_write_data_t> {
  static constexpr const char* name = "kstage_write_data_t";
  // 0.1; 0.2 legacy_managed_tensors; 0.3 residency; 0.4 selection_device, index_map64.
  static constexpr size_t layouts[] = {80, 88, 96, 112};
  static constexpr size_t first = layouts[0];
};
template <>
struct Layout<kstage_read_desc_t> {
  static constexpr const char* name = "kstage_read_desc_t";
  static constexpr size_t layouts[] = {48, 56};  // 0.1; 0.3 max_group_prims
  static constexpr size_t first = layouts[0];
};
template <>
struct Layout<kstage_map_desc_t> {
  static constexpr const char* name = "kstage_map_desc_t";
  static constexpr size_t layouts[] = {48};
  static constexpr size_t first = layouts[0];
};

template <>
struct Layout<kstage_attribute_info_t> {
  static constexpr const char* name = "kstage_attribute_info_t";
  static constexpr size_t layouts[] = {48, 56};  // 0.4; 0.4 schema_count
  static constexpr size_t first = layouts[0];
};
template <>
struct Layout<kstage_transform_desc_t> {
  static constexpr const char* name = "kstage_transform_desc_t";
  static constexpr size_t layouts[] = {32};  // 0.4
  static constexpr size_t first = layouts[0];
};

template <>
struct Layout<kstage_filter_ex_t> {
  static constexpr const char* name = "kstage_filter_ex_t";
  static constexpr size_t layouts[] = {24};  // 0.4
  static constexpr size_t first = layouts[0];
};

// The largest released layout of T that `size` bytes hold whole.
template <class T>
constexpr size_t whole_layout(size_t size) {
  size_t known = 0;
  for (size_t end : Layout<T>::layouts)
    if (end <= size) known = end;
  return known;
}
template <class T>
constexpr size_t last_layout() {
  return whole_layout<T>(SIZE_MAX);
}

static_assert(sizeof(kstage_config_t) == offsetof(kstage_config_t, residency) + sizeof(DLDevice));
static_assert(sizeof(kstage_write_data_t) ==
              offsetof(kstage_write_data_t, index_map64) + sizeof(void*));
static_assert(sizeof(kstage_read_desc_t) ==
              offsetof(kstage_read_desc_t, max_group_prims) + sizeof(uint64_t));
static_assert(offsetof(kstage_read_desc_t, max_group_prims) == Layout<kstage_read_desc_t>::first,
              "max_group_prims was appended to the first layout");
static_assert(sizeof(kstage_map_desc_t) ==
              offsetof(kstage_map_desc_t, reserved) + sizeof(kstage_map_desc_t::reserved));
static_assert(sizeof(kstage_attribute_info_t) ==
              offsetof(kstage_attribute_info_t, schema_count) + sizeof(uint64_t));
static_assert(sizeof(kstage_transform_desc_t) ==
              offsetof(kstage_transform_desc_t, world) + sizeof(kstage_token_t));
static_assert(sizeof(kstage_filter_ex_t) ==
              offsetof(kstage_filter_ex_t, predicate_count) + sizeof(uint64_t));
// Every released layout is listed, the last one being this header's struct.
static_assert(last_layout<kstage_config_t>() == sizeof(kstage_config_t),
              "a new kstage_config_t layout must be listed in Layout<>::layouts");
static_assert(last_layout<kstage_write_data_t>() == sizeof(kstage_write_data_t),
              "a new kstage_write_data_t layout must be listed in Layout<>::layouts");
static_assert(last_layout<kstage_read_desc_t>() == sizeof(kstage_read_desc_t),
              "a new kstage_read_desc_t layout must be listed in Layout<>::layouts");
static_assert(last_layout<kstage_map_desc_t>() == sizeof(kstage_map_desc_t),
              "a new kstage_map_desc_t layout must be listed in Layout<>::layouts");
static_assert(last_layout<kstage_attribute_info_t>() == sizeof(kstage_attribute_info_t),
              "a new kstage_attribute_info_t layout must be listed in Layout<>::layouts");
static_assert(last_layout<kstage_filter_ex_t>() == sizeof(kstage_filter_ex_t),
              "a new kstage_filter_ex_t layout must be listed in Layout<>::layouts");
static_assert(Layout<kstage_write_data_t>::layouts[1] ==
              offsetof(kstage_write_data_t, legacy_managed_tensors) + sizeof(void*));
static_assert(Layout<kstage_config_t>::layouts[1] ==
              offsetof(kstage_config_t, residency) + sizeof(DLDevice));

template <class T>
Status check_size(uint32_t size, const char* what) {
  using L = Layout<T>;
  if (size == 0)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%s.struct_size is 0: start the %s from %.*s_init() (or set struct_size = "
                 "sizeof(%s))",
                 what, L::name, int(std::strlen(L::name) - 2), L::name, L::name);
  // kstage.h: any size from the first layout to KSTAGE_MAX_STRUCT_SIZE, aligned or not.
  if (size < L::first || size > KSTAGE_MAX_STRUCT_SIZE)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%s.struct_size is %u, which is outside what kstage.h accepts for %s: %zu (the "
                 "first layout) to %u (KSTAGE_MAX_STRUCT_SIZE); this library's is %zu",
                 what, unsigned(size), L::name, L::first, unsigned(KSTAGE_MAX_STRUCT_SIZE),
                 sizeof(T));
  return Status::OK();
}

// Reads the caller's `size` bytes (check_size passed): the released layouts
// they hold whole are copied; a field that ends past them is absent (its zero
// default), so its bytes inside the caller's struct must be 0; and a newer
// caller's bytes past this struct must be 0. `what()` names the argument; it
// is only called for a message (a batch write formats no name per descriptor
// unless one is rejected).
template <class T, class What>
Status copy_descriptor(const T* in, uint32_t size, const What& what, T& out) {
  std::memset(&out, 0, sizeof(T));
  const size_t whole = whole_layout<T>(size);
  std::memcpy(&out, in, whole);
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = whole; i < std::min<size_t>(size, sizeof(T)); ++i)
    if (bytes[i] != 0)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s sets byte %zu of its %u-byte %s, part of a field that does not fit in "
                   "it (a struct_size of %u holds the layout that ends at byte %zu whole: the "
                   "fields after it are absent)",
                   what().c_str(), i, unsigned(size), Layout<T>::name, unsigned(size), whole);
  for (size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      return error(KSTAGE_NOT_SUPPORTED,
                   "%s sets byte %zu of its %u-byte %s, a field this kstage (%d.%d.%d, whose %s "
                   "has %zu bytes) does not know; a newer kstage.h declared it",
                   what().c_str(), i, unsigned(size), Layout<T>::name, KSTAGE_VERSION_MAJOR,
                   KSTAGE_VERSION_MINOR, KSTAGE_VERSION_PATCH, Layout<T>::name, sizeof(T));
  out.struct_size = uint32_t(sizeof(T));
  return Status::OK();
}

template <size_t N, class What>
Status check_reserved(const uint8_t (&reserved)[N], const What& what) {
  for (size_t i = 0; i < N; ++i)
    if (reserved[i] != 0)
      return error(KSTAGE_INVALID_ARGUMENT, "%s.reserved[%zu] is %u; reserved bytes must be 0",
                   what().c_str(), i, unsigned(reserved[i]));
  return Status::OK();
}

// `what` as a name for copy_descriptor and check_reserved.
inline auto named(const char* what) {
  return [what] { return std::string(what); };
}

template <class T>
Result<T> read_one(const T* in, const char* what) {
  if (in == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s is NULL", what);
  KSTAGE_RETURN_NOT_OK(check_size<T>(in->struct_size, what));
  T out;
  KSTAGE_RETURN_NOT_OK(copy_descriptor(in, in->struct_size, named(what), out));
  return out;
}

}  // namespace

Result<kstage_config_t> read_descriptor(const kstage_config_t* in, const char* what) {
  return read_one(in, what);
}

Result<kstage_read_desc_t> read_descriptor(const kstage_read_desc_t* in, const char* what) {
  kstage_read_desc_t out;
  KSTAGE_ASSIGN_OR_RETURN(out, read_one(in, what));
  // (A byte that held 0 before 0.4: read as a byte, any other value refused, so that the bool
  // is never read with a representation it cannot have.)
  uint8_t byte = 0;
  std::memcpy(&byte, &out.prims_as_progression, 1);
  if (byte > 1)
    return error(KSTAGE_INVALID_ARGUMENT, "%s.prims_as_progression is %u; it must be 0 or 1", what,
                 unsigned(byte));
  return out;
}

Result<kstage_map_desc_t> read_descriptor(const kstage_map_desc_t* in, const char* what) {
  kstage_map_desc_t out;
  KSTAGE_ASSIGN_OR_RETURN(out, read_one(in, what));
  KSTAGE_RETURN_NOT_OK(check_reserved(out.reserved, named(what)));
  return out;
}

Result<kstage_transform_desc_t> read_descriptor(const kstage_transform_desc_t* in,
                                                const char* what) {
  return read_one(in, what);
}

Result<kstage_filter_ex_t> read_descriptor(const kstage_filter_ex_t* in, const char* what) {
  kstage_filter_ex_t out;
  KSTAGE_ASSIGN_OR_RETURN(out, read_one(in, what));
  if (out.reserved != 0)
    return error(KSTAGE_INVALID_ARGUMENT, "%s.reserved is %u; it must be 0", what,
                 unsigned(out.reserved));
  return out;
}

Status write_descriptor(const kstage_attribute_info_t& info, kstage_attribute_info_t* out,
                        const char* what) {
  using T = kstage_attribute_info_t;
  if (out == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s is NULL", what);
  uint32_t size;
  std::memcpy(&size, out, sizeof size);  // bytes: a bad struct_size may mean a misaligned struct
  KSTAGE_RETURN_NOT_OK(check_size<T>(size, what));
  // The released layouts the caller's struct holds whole, then zeros: a field that does not
  // fit is absent for that caller, and a newer caller's fields this library does not know
  // take their zero default.
  const size_t whole = whole_layout<T>(size);
  unsigned char* bytes = reinterpret_cast<unsigned char*>(out);
  T copy = info;
  copy.struct_size = size;
  std::memcpy(bytes, &copy, whole);
  std::memset(bytes + whole, 0, size - whole);
  return Status::OK();
}

Status read_write_descriptors(const kstage_write_data_t* in, uint64_t n,
                              std::vector<kstage_write_data_t>& out) {
  using T = kstage_write_data_t;
  out.clear();
  if (in == nullptr || n == 0) return Status::OK();  // the engine names what is missing
  // Bytes, not struct accesses: with a bad struct_size the elements may be
  // misaligned.
  const auto* base = reinterpret_cast<const unsigned char*>(in);
  auto size_at = [](const unsigned char* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  const uint32_t size = size_at(base);
  Status layout = check_size<T>(size, "data[0]");
  // The stride is the caller's struct size whenever kstage.h accepts it, else
  // this header's: either way every element is read, so that its managed
  // tensors can be deleted, but never past one stride.
  const bool accepted = layout.ok();
  const size_t stride = accepted ? size : sizeof(T);
  // What the best effort copies: whole fields only -- the released layouts
  // the caller's size holds, or, for a size kstage.h rejects (which says
  // nothing of the caller's struct), this header's struct. Every managed and
  // legacy tensor whose field lies inside is then found and deleted.
  const size_t known = accepted ? whole_layout<T>(size) : sizeof(T);
  out.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const unsigned char* d = base + i * stride;
    if (layout.ok() && size_at(d) != size)
      layout = error(KSTAGE_INVALID_ARGUMENT,
                     "data[%llu].struct_size is %u but data[0].struct_size is %u; every "
                     "descriptor of one call has the caller's struct size",
                     (unsigned long long)i, unsigned(size_at(d)), unsigned(size));
    if (!layout.ok()) {  // best effort
      std::memset(&out[i], 0, sizeof(T));
      std::memcpy(&out[i], d, known);
      continue;
    }
    auto what = [i] { return format("data[%llu]", (unsigned long long)i); };
    Status st = copy_descriptor(reinterpret_cast<const T*>(d), size, what, out[i]);
    if (st.ok()) st = check_reserved(out[i].reserved, what);
    if (!st.ok()) layout = st;
  }
  return layout;
}

}  // namespace kstage::capi
