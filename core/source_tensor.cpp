// SPDX-License-Identifier: Apache-2.0
#include "core/source_tensor.hpp"

#include "core/dtype.hpp"

#include <limits>

namespace kstage::core {

namespace {

// Messages name the tensor through this placeholder; the real name is only
// formatted when a tensor is rejected (ragged writes decode one per row).
constexpr const char* kName = "\x01";

// Decodes into `s` (a ragged write decodes one tensor per row: no SourceTensor is built, copied
// or returned by value, and no string is made unless the tensor is rejected).
Status decode(const DLTensor* t, SourceTensor& s) {
  const char* w = kName;
  if (t == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s is NULL", w);
  if (!dtype_supported(t->dtype)) return validate_dtype(t->dtype, std::string(kName) + " dtype");
  if (t->ndim < 1)
    return error(
        KSTAGE_INVALID_ARGUMENT,
        "%s: ndim %d; a tensor needs a leading row axis (canonical layout ndim=1, shape=[rows])", w,
        int(t->ndim));
  if (t->ndim > kernels::StridedCopy::kMaxDims)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: ndim %d exceeds the supported %d", w, int(t->ndim),
                 kernels::StridedCopy::kMaxDims);
  if (t->shape == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s: shape is NULL", w);

  const size_t elem = size_t(t->dtype.bits / 8) * t->dtype.lanes;
  uint64_t total = 1, inner = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0)
      return error(KSTAGE_INVALID_ARGUMENT, "%s: shape[%d] is negative (%lld)", w, d,
                   (long long)t->shape[d]);
    const uint64_t e = uint64_t(t->shape[d]);
    if (e != 0 && total > std::numeric_limits<uint64_t>::max() / e / elem)
      return error(KSTAGE_INVALID_ARGUMENT, "%s: size overflows", w);
    total *= e;
    if (d > 0) inner *= e;
  }
  if (inner == 0 && t->shape[0] != 0)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: a trailing axis has extent 0, so rows have no lanes",
                 w);

  s.tensor = t;
  s.device = t->device;
  s.rows = uint64_t(t->shape[0]);
  s.dtype = t->dtype;
  const uint64_t folded_lanes = uint64_t(t->dtype.lanes) * (inner == 0 ? 1 : inner);
  if (folded_lanes > 255)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%s: folding trailing axes gives %llu lanes (dtype lanes %u x %llu); at most 255",
                 w, (unsigned long long)folded_lanes, unsigned(t->dtype.lanes),
                 (unsigned long long)inner);
  s.dtype.lanes = uint16_t(folded_lanes);
  s.row_bytes = tuple_bytes(s.dtype);
  if (total != 0 && t->data == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: data is NULL but the tensor has %llu elements", w,
                 (unsigned long long)total);
  if (total == 0) {  // nothing is ever read: no address to form (data may be NULL)
    s.base = nullptr;
    s.layout = SourceTensor::Layout::Compact;
    s.row_stride_bytes = int64_t(s.row_bytes);
    return Status::OK();
  }

  // Strides in bytes. An axis of extent 1 is never stepped along, so its
  // stride (arbitrary in DLPack) is not used at all, not even multiplied.
  // Every other axis must be addressable: its stride in bytes times its
  // extent fits in int64, and so do the spans of all axes added up, forwards
  // (positive strides) and backwards (negative ones).
  int64_t byte_strides[kernels::StridedCopy::kMaxDims] = {};
  uint64_t forward = 0, backward = 0;
  if (t->strides == nullptr) {
    forward = total * elem - elem;  // compact row-major (total * elem was checked above)
  } else {
    for (int d = 0; d < t->ndim; ++d) {
      if (t->shape[d] <= 1) continue;
      int64_t bytes = 0, reach = 0;
      const bool wraps = __builtin_mul_overflow(t->strides[d], int64_t(elem), &bytes) ||
                         __builtin_mul_overflow(bytes, t->shape[d] - 1, &reach) ||
                         reach == std::numeric_limits<int64_t>::min();
      uint64_t& span = reach < 0 ? backward : forward;
      const uint64_t axis_span = wraps ? 0 : uint64_t(reach < 0 ? -reach : reach);
      if (wraps || axis_span > uint64_t(std::numeric_limits<int64_t>::max()) - span)
        return error(KSTAGE_INVALID_ARGUMENT,
                     "%s: strides[%d] = %lld is not addressable: %lld steps of %lld elements of "
                     "%zu bytes overflow a 64-bit byte offset",
                     w, d, (long long)t->strides[d], (long long)(t->shape[d] - 1),
                     (long long)t->strides[d], elem);
      span += axis_span;
      byte_strides[d] = bytes;
    }
  }
  // The bytes read, [data + byte_offset - backward, data + byte_offset +
  // forward + elem), must be addresses: no wrap around either end.
  const uintptr_t data = reinterpret_cast<uintptr_t>(t->data);
  if (t->byte_offset > UINTPTR_MAX - data)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: byte_offset %llu overflows the address of data", w,
                 (unsigned long long)t->byte_offset);
  const uintptr_t first = data + uintptr_t(t->byte_offset);
  if (backward > first || forward > UINTPTR_MAX - first || elem > UINTPTR_MAX - first - forward)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%s: the elements span %llu bytes before and %llu bytes after data + byte_offset, "
                 "which wraps around the address space",
                 w, (unsigned long long)backward, (unsigned long long)forward);
  s.base = static_cast<const std::byte*>(t->data) + t->byte_offset;

  if (t->strides == nullptr) {  // NULL strides: compact row-major
    s.layout = SourceTensor::Layout::Compact;
    s.row_stride_bytes = int64_t(s.row_bytes);
    return Status::OK();
  }
  // Interior axes contiguous (ignoring extent-1 axes, whose stride is arbitrary)?
  bool interior_compact = true;
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 1; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expect) interior_compact = false;
    expect *= t->shape[d];
  }
  if (interior_compact) {
    s.row_stride_bytes = byte_strides[0];
    s.layout = (s.row_stride_bytes == int64_t(s.row_bytes) || s.rows <= 1)
                   ? SourceTensor::Layout::Compact
                   : SourceTensor::Layout::RowStrided;
    if (s.layout == SourceTensor::Layout::Compact) s.row_stride_bytes = int64_t(s.row_bytes);
    return Status::OK();
  }
  s.layout = SourceTensor::Layout::Strided;
  return Status::OK();
}

}  // namespace

Status decode_source_tensor(const DLTensor* t, const char* kind, size_t index, SourceTensor& out) {
  Status st = decode(t, out);
  if (st.ok()) return st;
  const std::string name = format("%s[%zu]", kind, index);
  std::string message = st.message();
  for (size_t at = message.find(kName); at != std::string::npos; at = message.find(kName, at))
    message.replace(at, 1, name);
  return Status(st.code(), message);
}

kernels::StridedCopy strided_copy_of(const SourceTensor& s) {
  kernels::StridedCopy c;
  c.src = s.base;
  if (s.layout == SourceTensor::Layout::RowStrided) {
    c.ndim = 1;
    c.shape[0] = int64_t(s.rows);
    c.byte_strides[0] = s.row_stride_bytes;
    c.elem_bytes = s.row_bytes;
    return c;
  }
  // Strided: the tensor's own axes, in bytes (an axis of extent <= 1 is never stepped along:
  // its stride, arbitrary in DLPack, is not used). decode checked that all of this fits.
  const DLTensor* t = s.tensor;
  const size_t elem = size_t(t->dtype.bits / 8) * t->dtype.lanes;
  c.ndim = t->ndim;
  c.elem_bytes = elem;
  for (int d = 0; d < t->ndim; ++d) {
    c.shape[d] = t->shape[d];
    c.byte_strides[d] = t->shape[d] <= 1 ? 0 : t->strides[d] * int64_t(elem);
  }
  return c;
}

}  // namespace kstage::core
