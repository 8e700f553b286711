// SPDX-License-Identifier: Apache-2.0
#include "core/transport.hpp"

#include "core/adopted_buffer.hpp"
#include "core/column_table.hpp"
#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/kernels/copy_ops.hpp"
#include "core/log.hpp"
#include "core/reserved_names.hpp"
#include "core/source_tensor.hpp"
#include "core/write_selection.hpp"

#include <algorithm>

namespace kstage::core {
namespace {

// Which array of `d` holds its tensors (valid once sources() is 1).
const char* source_kind(const kstage_write_data_t& d) {
  return d.tensors ? "tensors" : d.managed_tensors ? "managed_tensors" : "legacy_managed_tensors";
}

// How many of tensors / managed_tensors / legacy_managed_tensors are set.
int sources(const kstage_write_data_t& d) {
  return int(d.tensors != nullptr) + int(d.managed_tensors != nullptr) +
         int(d.legacy_managed_tensors != nullptr);
}

// Copies a strided source into a fresh compact buffer.
Result<BufferPtr> compact_copy(const SourceTensor& s, Backend& backend) {
  BufferPtr out;
  KSTAGE_ASSIGN_OR_RETURN(out, allocate_written(backend, s.rows * s.row_bytes));
  kernels::StridedCopy c = strided_copy_of(s);
  c.dst = out->data();
  backend.strided_copy(c);
  return out;
}

// Rows the stage can read where they are: compact, on a device the backend
// reads, aligned for their elements.
bool readable_in_place(const SourceTensor& s, const Backend& backend) {
  const size_t align = s.dtype.bits / 8;
  return s.rows > 0 && s.layout == SourceTensor::Layout::Compact && backend.can_access(s.device) &&
         reinterpret_cast<uintptr_t>(s.base) % align == 0;
}

// A managed tensor can be the staged buffer itself when it already is what
// staging would produce: those rows, in order, one per target.
bool adoptable(const SourceTensor& s, const Selection& sel, const Backend& backend) {
  return !sel.mask && !sel.indexed() && s.rows == sel.count && readable_in_place(s, backend);
}

// A sparse write's managed tensor can be kept as it is, its rows read by the
// seal through the selection, when the column lives on the host (the seal's
// kernel then reads the selection from host memory) and its rows are compact
// and aligned.
bool sparse_adoptable(const SourceTensor& s, const Selection& sel, const Backend& backend) {
  return (sel.mask || sel.indexed()) && sel.targets() > 0 && backend.synchronous() &&
         readable_in_place(s, backend);
}

// Fixed-size rows: one pass from the source to the staged buffer (two for a
// source whose rows are not contiguous: compacted first). A mask is resolved
// and its rows gathered in the same kernel; an index_map is validated while
// gathering, so a bad entry costs nothing until it is found.
Result<StagedRows> stage_fixed(const SourceTensor& s, Selection& sel, Backend& backend,
                               Backend& host, const DLTensor* tensor, ManagedTensors* managed) {
  static const char* const kRowsFrom = "shape[0] of the tensor";  // (check_rows counted them)
  StagedRows out;
  const size_t n = sel.targets();
  out.n = n;
  // A managed tensor is adopted when staging would only copy it (a dense write), or when the
  // seal can read it through the write's selection (a sparse write to a host column): no copy
  // at write time, the seal moves each row once. An index_map that is not a progression must
  // then be copied for the seal: for rows no wider than its 4-byte entries that costs what
  // copying the rows does, so those are staged as usual.
  bool dense = managed && adoptable(s, sel, backend);
  bool sparse = managed && !dense && sparse_adoptable(s, sel, backend);
  uint64_t first = 0, step = 0;
  const bool progression =
      sparse && sel.index_map && index_map_progression(sel.index_map, n, host, first, step);
  if (sparse && sel.index_map && !progression && s.row_bytes <= sizeof(uint32_t)) sparse = false;
  // An index_map 0, 1, ..., n - 1 over exactly n source rows selects the tensor as it is: a
  // dense write (a seal of every row in order then takes the tensor as the column).
  if (progression && first == 0 && (step == 1 || n == 1) && s.rows == n) {
    dense = true;
    sparse = false;
  }
  if (dense || sparse) {
    // Without a deleter nobody can say how long the memory lives: copy it.
    ManagedTensor m = managed->adopt_if_deletable(tensor);
    if (m.versioned || m.legacy) {
      // Owned from here on: a failure below drops it, which runs its deleter (once).
      out.data = backend.adopt(std::make_unique<AdoptedBuffer>(
          m, const_cast<std::byte*>(s.base), s.rows * s.row_bytes, backend.device()));
      if (dense) return out;
      out.indexed_source = true;
      if (sel.mask) {
        KSTAGE_RETURN_NOT_OK(select_masked(sel, host));
        out.source_index = sel.subset;  // element e's source row is row e
      } else if (progression) {
        if (first + (n - 1) * step >= s.rows) {  // its highest entry is its last
          size_t bad = 0;
          while (sel.index_map[bad] < s.rows) ++bad;
          return index_map_error(sel, bad, s.rows, kRowsFrom);
        }
        out.source_first = size_t(first);
        out.source_step = size_t(step);
      } else {
        KSTAGE_RETURN_NOT_OK(copy_index_map(sel, s.rows, kRowsFrom, host, out));
      }
      return out;
    }
  }
  if (sel.mask && !sel.on_device) {
    KSTAGE_ASSIGN_OR_RETURN(sel.subset, host.allocate(std::max<size_t>(n * sizeof(uint32_t), 1)));
  }
  // (A device mask: room for every element, since how many are selected is not known here.)
  KSTAGE_ASSIGN_OR_RETURN(out.data, backend.allocate(std::max<size_t>(n * s.row_bytes, 1)));
  if (sel.count == 0) return out;
  const std::byte* src = s.base;
  int64_t stride = s.row_stride_bytes;
  BufferPtr compact;
  if (s.layout == SourceTensor::Layout::Strided) {
    KSTAGE_ASSIGN_OR_RETURN(compact, compact_copy(s, backend));
    src = compact->data();
    stride = int64_t(s.row_bytes);
  }
  if (sel.mask) {
    kernels::MaskedGather g;
    g.mask = sel.mask;
    g.n = size_t(sel.count);
    g.dst = out.data->data();
    g.src = src;
    g.src_stride = stride;
    g.row_bytes = s.row_bytes;
    if (sel.on_device) {  // gathered on the device; the selection stays there for the seal
      KSTAGE_ASSIGN_OR_RETURN(out.device_mask, backend.masked_gather_resident(g));
      out.span = size_t(sel.count);
      return out;
    }
    g.selected = reinterpret_cast<uint32_t*>(sel.subset->data());
    backend.masked_gather(g);
    return out;
  }
  if (!sel.indexed() && stride == int64_t(s.row_bytes)) {
    backend.copy_bytes(out.data->data(), src, n * s.row_bytes);
    return out;
  }
  kernels::RowCopy c;
  c.dst = out.data->data();
  c.dst_stride = int64_t(s.row_bytes);
  c.src = src;
  c.src_stride = stride;
  c.n = n;
  c.row_bytes = s.row_bytes;
  if (!sel.indexed()) {
    backend.row_copy(c);
    return out;
  }
  c.src_index = sel.index_map;
  if (sel.on_device) {
    // Read in place (a device index_map64 as int64), checked on the device: the op reports a
    // bad entry.
    c.src_index64 = sel.index_map64;
    KSTAGE_ASSIGN_OR_RETURN(out.index_check, backend.checked_gather_resident(c, s.rows));
    out.index_rows = s.rows;
    out.index_rows_from = kRowsFrom;
    out.index_map_name = sel.map_name();
    return out;
  }
  const size_t bad = backend.checked_gather(c, s.rows);
  if (bad < n) return index_map_error(sel, bad, s.rows, kRowsFrom);
  return out;
}

// The elements of an array source, contiguous: the tensor itself, or a
// compact copy (kept alive in `keep`) when its elements are spaced out.
Result<const std::byte*> contiguous_elements(const SourceTensor& s, Backend& backend,
                                             std::vector<BufferPtr>& keep) {
  // (A strided source of one row is not contiguous when its interior axes are not.)
  if (s.layout == SourceTensor::Layout::Compact) return s.base;
  BufferPtr c;
  KSTAGE_ASSIGN_OR_RETURN(c, compact_copy(s, backend));
  keep.push_back(c);
  return static_cast<const std::byte*>(c->data());
}

// The source rows of an array write, decoded once: row i's elements start at ptr[i] (a
// compact source's own memory) and there are elems[i] of them; `strided` lists the rows whose
// tensor is not compact (rare: decoded again and compacted when the stager is known). 16 bytes
// per row, not a SourceTensor each: a ragged write of 1e6 rows touches nothing more per row.
struct ArrayRows {
  std::vector<const std::byte*> ptr;
  std::vector<uint64_t> elems;
  std::vector<uint32_t> strided;
  // A write of one tensor per row in order (no index_map, mask or packing): the staged rows'
  // lengths in bytes, offsets, total and address bits are made in the same pass as the
  // decoding (instead of `elems`), so staging only allocates and copies.
  bool in_order = false;
  std::vector<uint64_t> bytes, starts;
  uint64_t cursor = 0, align_bits = kernels::kRaggedRowAlign;
};

// The staged buffer holds every target's row: an index_map may repeat a long row many times,
// so its total is checked as it grows.
constexpr uint64_t kMaxStagedBytes = UINT64_MAX / 2;

Status staged_bytes_error(size_t element, size_t source_row, uint64_t amount, const char* unit) {
  return error(KSTAGE_INVALID_ARGUMENT,
               "the rows written add up to more than 2^63 bytes (at element %zu: source row %zu "
               "of %llu %s)",
               element, source_row, (unsigned long long)amount, unit);
}

// Row i of an in-order write, `elems` elements of `eb` bytes at `base`. `Checked`: elems * eb
// is known not to wrap (decode_compact_row's rows: below 2^62 bytes), no division.
template <bool Checked = false>
inline Status stage_in_order(ArrayRows& rows, size_t i, const std::byte* base, uint64_t elems,
                             size_t eb) {
  if (!Checked && elems > kMaxStagedBytes / eb) return staged_bytes_error(i, i, elems, "elements");
  const uint64_t len = elems * eb;
  if (kernels::ragged_align_up(len) > kMaxStagedBytes - rows.cursor)
    return staged_bytes_error(i, i, len, "bytes");
  rows.ptr.push_back(base);
  rows.bytes.push_back(len);
  rows.starts.push_back(rows.cursor);
  rows.align_bits |= reinterpret_cast<uintptr_t>(base) | rows.cursor | len;
  rows.cursor += kernels::ragged_align_up(len);
  return Status::OK();
}

// Array rows: one source row per tensor (`rows`), or one packed tensor (`first`) cut evenly
// into `packed_rows` rows.
Result<StagedRows> stage_array(const SourceTensor& first, ArrayRows& rows,
                               const WriteTensors& tensors, const char* kind, bool packed,
                               uint64_t packed_rows, const Selection& sel, Backend& backend) {
  // Source row of target i: through the index_map, the mask's selection, or i.
  const uint32_t* source_index = sel.index_map ? sel.index_map : sel.subset_index();
  const size_t eb = first.row_bytes;  // bytes per element
  std::vector<BufferPtr> keep;
  // Source rows: per tensor, or cut from the packed tensor on the fly (the
  // packed row count comes from the index_map and may be far larger than
  // the rows written: nothing is built per source row).
  const std::byte* packed_base = nullptr;
  uint64_t packed_row_bytes = 0;
  if (packed) {
    KSTAGE_ASSIGN_OR_RETURN(packed_base, contiguous_elements(first, backend, keep));
    packed_row_bytes = first.rows / packed_rows * eb;
  } else {
    for (uint32_t i : rows.strided) {
      SourceTensor s;
      KSTAGE_RETURN_NOT_OK(decode_source_tensor(tensors[i], kind, i, s));
      KSTAGE_ASSIGN_OR_RETURN(rows.ptr[i], contiguous_elements(s, backend, keep));
      rows.align_bits |= reinterpret_cast<uintptr_t>(rows.ptr[i]);
    }
  }
  StagedRows out;
  const size_t n = sel.targets();
  out.n = n;
  if (rows.in_order) {  // offsets made while decoding: allocate and copy
    out.lengths = std::move(rows.bytes);
    out.starts = std::move(rows.starts);
    KSTAGE_ASSIGN_OR_RETURN(out.data, allocate_written(backend, rows.cursor));
    kernels::RaggedCopy c{out.data->data(), out.starts.data(), rows.ptr.data(), out.lengths.data(),
                          n};
    backend.ragged_copy(c, kernels::widest_word(rows.align_bits));
    return out;
  }
  // Otherwise target i's source row (through the index_map or the mask's selection, or cut
  // from the packed tensor), its length and where it goes. Filled in order: reserved, not
  // zeroed first.
  std::vector<const std::byte*> from;
  from.reserve(n);
  out.lengths.reserve(n);
  out.starts.reserve(n);
  uint64_t cursor = 0, align_bits = kernels::kRaggedRowAlign;
  for (size_t i = 0; i < n; ++i) {
    const size_t s = source_index ? source_index[i] : i;
    const uint64_t elems = packed ? 0 : rows.elems[s];
    if (!packed && elems > kMaxStagedBytes / eb) return staged_bytes_error(i, s, elems, "elements");
    const uint64_t len = packed ? packed_row_bytes : elems * eb;
    if (len > kMaxStagedBytes || kernels::ragged_align_up(len) > kMaxStagedBytes - cursor)
      return staged_bytes_error(i, s, len, "bytes");
    const std::byte* src = packed ? (len ? packed_base + s * len : nullptr) : rows.ptr[s];
    from.push_back(src);
    out.lengths.push_back(len);
    out.starts.push_back(cursor);
    align_bits |= reinterpret_cast<uintptr_t>(src) | cursor | len;
    cursor += kernels::ragged_align_up(len);
  }
  KSTAGE_ASSIGN_OR_RETURN(out.data, allocate_written(backend, cursor));
  kernels::RaggedCopy c{out.data->data(), out.starts.data(), from.data(), out.lengths.data(), n};
  backend.ragged_copy(c, kernels::widest_word(align_bits));
  return out;
}

// --- the phases of stage_write ------------------------------------------------------------

// What one write's phases work out, each phase filling its part for the next.
struct WritePlan {
  Selection sel;  // decode_selection
  // decode_tensors: the tensors and which array of the descriptor holds them, tensor 0 (which
  // describes the write) and the last one (resolve_residency checks the memory of both), and an
  // array write's rows.
  WriteTensors tensors;
  SourceTensor first, last;
  ArrayRows rows;
  // resolve_residency: the backend that stages the rows, the column's (StagedWrite::backend)
  // or, when that one cannot read the source, the source's own.
  Backend* stager = nullptr;
  // check_rows: an array write's source row count, and whether one packed tensor holds them.
  uint64_t wanted = 0;
  bool packed = false;
};

// The write's tensors, decoded before the column is looked at: tensor 0 describes the write
// (dtype, device, rows), which the later phases resolve the column and the stager from, and an
// array write's other row tensors must agree with it. Each is decoded once, an array write's
// rows into 16 bytes each (ArrayRows): a ragged write may have a million. Hands on `tensors`,
// `kind`, `first`, `last` and `rows`.
Status decode_tensors(const WriteRequest& r, WritePlan& w) {
  const kstage_write_data_t& d = *r.data;
  const Selection& sel = w.sel;
  // One tensor per source row and no index_map: exactly one per addressed
  // prim. More than that is refused before tensor_count sizes anything.
  if (d.is_array && !sel.indexed() && d.tensor_count > std::max<uint64_t>(sel.count, 1) &&
      sources(d) == 1)
    KSTAGE_RETURN_NOT_OK(
        check_row_count(d, sel, d.tensor_count, "tensor_count, one tensor per row"));
  KSTAGE_ASSIGN_OR_RETURN(w.tensors, write_tensors(d, r.attribute_name.c_str()));
  const WriteTensors& tensors = w.tensors;

  const char* kind = source_kind(d);
  SourceTensor& first = w.first;
  KSTAGE_RETURN_NOT_OK(decode_source_tensor(tensors[0], kind, 0, first));
  const size_t n_tensors = tensors.size();
  ArrayRows& rows = w.rows;
  rows.in_order = d.is_array && !sel.indexed() && !sel.mask && !(n_tensors == 1 && sel.count > 1);
  if (d.is_array) {  // filled in order below: reserved, not zeroed first
    rows.ptr.reserve(n_tensors);
    if (rows.in_order) {
      rows.bytes.reserve(n_tensors);
      rows.starts.reserve(n_tensors);
    } else {
      rows.elems.reserve(n_tensors);
    }
  }
  const size_t eb = first.row_bytes;  // an array write's bytes per element
  for (size_t i = 0; i < n_tensors; ++i) {
    if (d.is_array && i > 0 && i + 1 < n_tensors) {  // the first and last are kept whole
      const std::byte* base;
      uint64_t elems;
      if (decode_compact_row(tensors[i], first.dtype, first.device, eb, base, elems)) {
        if (rows.in_order) {
          KSTAGE_RETURN_NOT_OK(stage_in_order<true>(rows, i, base, elems, eb));
        } else {
          rows.ptr.push_back(base);
          rows.elems.push_back(elems);
        }
        continue;
      }
    }
    SourceTensor cur;
    const SourceTensor* s = &first;
    if (i > 0) {
      KSTAGE_RETURN_NOT_OK(decode_source_tensor(tensors[i], kind, i, cur));
      s = &cur;
      if (cur.device.device_type != first.device.device_type ||
          cur.device.device_id != first.device.device_id)
        return error(KSTAGE_INVALID_ARGUMENT, "%s is on device %s:%d but %s is on %s:%d",
                     tensor_name(d, i).c_str(), device_type_name(cur.device.device_type),
                     int(cur.device.device_id), tensor_name(d, 0).c_str(),
                     device_type_name(first.device.device_type), int(first.device.device_id));
      if (!same_dtype(cur.dtype, first.dtype))
        return error(KSTAGE_INVALID_ARGUMENT, "%s has dtype %s but %s has %s",
                     tensor_name(d, i).c_str(), dtype_string(cur.dtype).c_str(),
                     tensor_name(d, 0).c_str(), dtype_string(first.dtype).c_str());
    }
    if (d.is_array) {
      if (rows.in_order) {
        KSTAGE_RETURN_NOT_OK(stage_in_order(rows, i, s->base, s->rows, eb));
      } else {
        rows.ptr.push_back(s->base);
        rows.elems.push_back(s->rows);
      }
      if (s->layout != SourceTensor::Layout::Compact) rows.strided.push_back(uint32_t(i));
    }
    if (i + 1 == n_tensors) w.last = *s;
  }
  return Status::OK();
}

// The column the write goes to and who stages for it: the write's schema against an existing
// column's, the backend the column lives on (StagedWrite::backend) and the one that can read
// the source (WritePlan::stager). The source's memory, and a device selection's, are checked
// against those devices here, before any row count is looked at.
Status resolve_residency(const WriteRequest& r, BackendSet& backends, WritePlan& w,
                         StagedWrite& out) {
  const kstage_write_data_t& d = *r.data;
  const char* attr = r.attribute_name.c_str();
  const SourceTensor& first = w.first;
  out.schema = Schema{d.is_array, first.dtype, d.semantic};
  // The column of the write's schema (a NONE semantic keeps the column's), else a new one. A
  // name holds one column per schema: prims holding it in another are the ledger's to judge.
  const std::pair<Schema, Backend*>* column = nullptr;
  KSTAGE_ASSIGN_OR_RETURN(
      column, kept_by(
                  r.existing, out.schema,
                  [](const std::pair<Schema, Backend*>& e) -> const Schema& { return e.first; },
                  [&] { return r.attribute_name; }));
  if (column) out.schema.semantic = column->first.semantic;
  KSTAGE_RETURN_NOT_OK(check_reserved_name(r.attribute_name, out.schema));
  if (column) {
    out.backend = column->second;
  } else {
    KSTAGE_RETURN_NOT_OK(validate_semantic(d.semantic, first.dtype, d.is_array));
    if (r.residency.device_type != 0) {
      KSTAGE_ASSIGN_OR_RETURN(out.backend, backends.for_device(r.residency));
    } else {
      KSTAGE_ASSIGN_OR_RETURN(out.backend, backends.residency_for(first.device));
    }
  }
  // Stage where the source can be read: on the column's backend, or on the
  // source's and then transferred (host <-> device, device <-> device).
  w.stager = out.backend;
  if (!out.backend->can_access(first.device)) {
    Result<Backend*> b = backends.residency_for(first.device);
    if (!b.ok()) return Status(b.status().code(), tensor_name(d, 0) + ": " + b.status().message());
    w.stager = b.value();
  }
  // The source's memory is where its DLDevice says, where the backend can
  // tell (a GPU runtime knows each pointer's device; never assume device 0).
  // The first and last tensors: one runtime query each, not one per row.
  // A tensor that addresses no byte (no rows, or rows of no bytes) is not checked: its
  // pointer may be null or one past an allocation, as DLPack producers make empty tensors.
  for (auto [s, i] : {std::pair{&w.first, size_t(0)}, std::pair{&w.last, w.tensors.size() - 1}})
    if (s->base && s->rows != 0 && s->row_bytes != 0)
      KSTAGE_RETURN_NOT_OK(w.stager->check_memory(s->base, s->device, tensor_name(d, i)));
  if (w.sel.on_device) return check_device_selection(d, w.sel, first.device, *out.backend, attr);
  return Status::OK();
}

// The rows the selection addresses against the rows the tensors hold (a fixed-size tensor's
// shape[0]; an array write's tensors, or its one packed tensor cut evenly), and a host
// index_map of an array write against those rows. Checks that move no data come first, so that
// a rejected write queues nothing. Hands move_rows an array write's `wanted` and `packed`.
Status check_rows(const kstage_write_data_t& d, WritePlan& w) {
  const Selection& sel = w.sel;
  const SourceTensor& first = w.first;
  // A host index_map64 entry outside [0, 2^32) is out of range of every row count below 2^32,
  // which the row checks then find; an array write's packed rows are counted from the entries.
  if (sel.first_wide != SIZE_MAX && (d.is_array || first.rows > UINT32_MAX))
    return wide_entry_error(sel);
  if (!d.is_array) {
    if (!sel.indexed())
      KSTAGE_RETURN_NOT_OK(check_row_count(d, sel, first.rows, "shape[0] of the tensor"));
    return Status::OK();
  }
  // One tensor and more than one source row: a packed tensor, cut evenly.
  const uint64_t wanted = w.wanted = sel.indexed() ? index_map_rows(sel) : sel.count;
  const bool packed = w.packed = w.tensors.size() == 1 && wanted > 1;
  const uint64_t source_rows = packed ? wanted : w.tensors.size();
  const char* rows_from = packed ? "rows of the packed tensor" : "tensor_count, one tensor per row";
  if (packed && first.rows % wanted != 0)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "packed tensor of %llu elements does not divide evenly across %llu source "
                 "row(s) (%s)",
                 (unsigned long long)first.rows, (unsigned long long)wanted,
                 sel.index_map64 ? "from the highest index_map64 entry"
                 : sel.index_map ? "from the highest index_map entry"
                                 : "from count");
  if (!sel.index_map) return check_row_count(d, sel, source_rows, rows_from);
  // A packed tensor's rows are counted from the entries: every entry is below them.
  return packed ? Status::OK() : check_index_map(sel, source_rows, rows_from);
}

// Dense host rows to a device column need no staging: copy_dense_to_device moves them in one
// copy from the caller's tensor, which stays valid until the op completes.
bool dense_host_to_device(const kstage_write_data_t& d, const WritePlan& w, const Backend& column) {
  return !d.is_array && w.stager != &column && w.stager->synchronous() && !d.mask &&
         !w.sel.indexed() && w.first.layout == SourceTensor::Layout::Compact &&
         w.first.rows == w.sel.count;
}

// Nothing may read the source before the producer's work (device_sync) is done: a stream wait
// on whichever side is a device (host work on host data takes {0, 0}, and says so), and a wait
// on the host when host code reads the source next. A `dense` copy to a device column reads it
// on the device's stream, and waits on the host only where its runtime reads at the call
// (copy_dense_to_device).
// The device path not taken: the host waits for the producer's event where the column's device
// would have (an INFO message on the "device" channel).
void log_host_wait(const std::string& attribute, const Backend& column, const char* why) {
  const DLDevice dev = column.device();
  KSTAGE_LOG_AT(Device, KSTAGE_LOG_INFO,
                "write of '%s' to %s device %d: the host waits for the producer's event "
                "(device_sync) instead of the device, because %s",
                attribute.c_str(), device_type_name(dev.device_type), int(dev.device_id), why);
}

Status order_producer(const WriteRequest& r, const WritePlan& w, Backend& column, bool dense) {
  const kstage_write_data_t& d = *r.data;
  Backend& ordered = w.stager->synchronous() ? column : *w.stager;
  KSTAGE_RETURN_NOT_OK(ordered.order_after(d.device_sync, "device_sync"));
  if (!dense && w.stager->synchronous() && !column.synchronous() && is_set(d.device_sync)) {
    // Host code reads the source next (pinned memory a device may still be
    // filling): the host has no stream to wait with, so it waits here.
    log_host_wait(r.attribute_name, column,
                  "its rows are gathered on the host first (a mask, an index map or a "
                  "strided or array source in host memory)");
    KSTAGE_RETURN_NOT_OK(wait_on_host(column));  // a failure: the producer's device failed
  }
  return Status::OK();
}

// The rows of a dense_host_to_device write: one copy from the caller's tensor, read after the
// wait on the producer.
Status copy_dense_to_device(const WriteRequest& r, const WritePlan& w, StagedWrite& out) {
  const kstage_write_data_t& d = *r.data;
  const SourceTensor& first = w.first;
  out.rows.n = size_t(w.sel.count);
  const size_t bytes = out.rows.n * first.row_bytes;
  KSTAGE_ASSIGN_OR_RETURN(out.rows.data, out.backend->allocate(std::max<size_t>(bytes, 1)));
  // A runtime may read pageable memory at the call, before the stream reaches the wait
  // on the producer: then the producer is waited for here, on the host.
  if (is_set(d.device_sync) && bytes != 0 && out.backend->reads_host_at_call(first.base)) {
    log_host_wait(r.attribute_name, *out.backend,
                  "the source is pageable host memory, which the runtime reads when the copy is "
                  "called (pinned memory would be read in stream order)");
    KSTAGE_RETURN_NOT_OK(wait_on_host(*out.backend));
  }
  out.backend->copy_from_host(out.rows.data->data(), first.base, bytes);
  return Status::OK();
}

// The rows staged on the stager in logical order (fixed-size: stage_fixed; array: stage_array)
// and, when the stager is not the column's backend, moved to the column's device.
Status stage_rows(const WriteRequest& r, BackendSet& backends, WritePlan& w, StagedWrite& out) {
  const kstage_write_data_t& d = *r.data;
  Backend* stager = w.stager;
  if (!d.is_array) {
    KSTAGE_ASSIGN_OR_RETURN(out.rows,
                            stage_fixed(w.first, w.sel, *stager, backends.host(), w.tensors[0],
                                        d.tensors || stager != out.backend ? nullptr : r.managed));
  } else {
    if (w.sel.mask) KSTAGE_RETURN_NOT_OK(select_masked(w.sel, backends.host()));
    KSTAGE_ASSIGN_OR_RETURN(out.rows, stage_array(w.first, w.rows, w.tensors, source_kind(d),
                                                  w.packed, w.wanted, w.sel, *stager));
  }
  if (stager != out.backend && out.rows.data) {
    BufferPtr moved;
    KSTAGE_ASSIGN_OR_RETURN(moved, out.backend->allocate(out.rows.data->size()));
    KSTAGE_RETURN_NOT_OK(transfer(*out.backend, moved->data(), *stager, out.rows.data->data(),
                                  out.rows.data->size()));
    if (stager->synchronous()) out.keep = out.rows.data;  // read by the device later
    out.rows.data = std::move(moved);
  }
  return Status::OK();
}

// stage_rows with its failures contained: from here on a failure may leave copies queued that
// read the caller's memory, which the caller may free once the call returns, so every failure
// waits for them. Hands stage_write the rows in `out`, with a mask's selection.
Status move_rows(const WriteRequest& r, BackendSet& backends, WritePlan& w, StagedWrite& out) {
  auto fence_both = [&] {
    if (!w.stager->synchronous()) w.stager->fence();
    if (!out.backend->synchronous()) out.backend->fence();
  };
  Status moved;
  try {
    moved = stage_rows(r, backends, w, out);
  } catch (...) {  // a device fault thrown by an enqueue: the queued copies finish first
    fence_both();
    throw;
  }
  if (!moved.ok()) {
    fence_both();
    return moved;
  }
  if (w.sel.subset) {
    out.rows.subset = std::move(w.sel.subset);
    out.rows.span = size_t(w.sel.count);
  }
  return Status::OK();
}

}  // namespace

std::string tensor_name(const kstage_write_data_t& d, size_t i) {
  return format("%s[%zu]", source_kind(d), i);
}

Result<WriteTensors> write_tensors(const kstage_write_data_t& d, const char* attr) {
  if (sources(d) != 1) {
    std::string got;
    for (auto [set, name] :
         {std::pair{d.tensors != nullptr, "tensors"},
          std::pair{d.managed_tensors != nullptr, "managed_tensors"},
          std::pair{d.legacy_managed_tensors != nullptr, "legacy_managed_tensors"}})
      if (set) got += std::string(got.empty() ? "" : " and ") + name;
    return error(KSTAGE_INVALID_ARGUMENT,
                 "exactly one of tensors, managed_tensors and legacy_managed_tensors must be "
                 "non-NULL (got %s)",
                 got.empty() ? "none" : got.c_str());
  }
  // tensor_count is checked before anything is sized by it or read through it.
  if (d.tensor_count == 0)
    return error(KSTAGE_INVALID_ARGUMENT, "tensor_count is 0; a write needs at least one tensor");
  if (!d.is_array && d.tensor_count != 1)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "'%s' is fixed-size (is_array = false): it takes exactly 1 tensor, got "
                 "tensor_count %llu",
                 attr, (unsigned long long)d.tensor_count);
  if (d.tensor_count > UINT32_MAX)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "tensor_count %llu exceeds 2^32-1: an array write takes one tensor per source "
                 "row, and source rows are indexed by uint32",
                 (unsigned long long)d.tensor_count);
  // Managed entries are checked here, once: afterwards every index is a tensor.
  for (uint64_t i = 0; i < d.tensor_count && !d.tensors; ++i) {
    if (d.managed_tensors && d.managed_tensors[i] == nullptr)
      return error(KSTAGE_INVALID_ARGUMENT, "managed_tensors[%llu] is NULL", (unsigned long long)i);
    if (d.legacy_managed_tensors && d.legacy_managed_tensors[i] == nullptr)
      return error(KSTAGE_INVALID_ARGUMENT, "legacy_managed_tensors[%llu] is NULL",
                   (unsigned long long)i);
  }
  return WriteTensors{&d, size_t(d.tensor_count)};
}

// The phases in the order of their checks (tests assert which error wins), each handing the
// next what it worked out (WritePlan). Nothing reads the source's rows before order_producer.
Result<StagedWrite> stage_write(const WriteRequest& r, BackendSet& backends) {
  const kstage_write_data_t& d = *r.data;
  WritePlan w;
  KSTAGE_ASSIGN_OR_RETURN(w.sel, decode_selection(d, r.prims->size(), backends.host()));
  KSTAGE_RETURN_NOT_OK(decode_tensors(r, w));
  StagedWrite out;
  KSTAGE_RETURN_NOT_OK(resolve_residency(r, backends, w, out));
  KSTAGE_RETURN_NOT_OK(check_rows(d, w));
  const bool dense = dense_host_to_device(d, w, *out.backend);
  KSTAGE_RETURN_NOT_OK(order_producer(r, w, *out.backend, dense));
  KSTAGE_RETURN_NOT_OK(dense ? copy_dense_to_device(r, w, out) : move_rows(r, backends, w, out));
  out.rows.prims = r.prims;
  return out;
}

}  // namespace kstage::core
