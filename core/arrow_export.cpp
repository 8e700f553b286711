// SPDX-License-Identifier: Apache-2.0
// A read group as an Arrow array (kstage/kstage_arrow.h).
//
// The export is built as a small tree of nodes first (type, length, buffers, children), then
// handed out as C structs. Every ArrowArray node -- the parent and each child -- has its own
// private data holding a reference to one Holder, which owns what the buffers point into: the
// group's snapshot buffer (zero-copy values), the export's own buffers (offsets, gathered
// values, path columns) and, for device groups, their uploaded copies and the event to wait on.
// So a consumer may move children out and release them in any order (the specification's
// "moving child arrays"); the data goes when the last node does. The schema is a separate tree
// with its own release.
#include "core/arrow_export.hpp"

#include "core/backend.hpp"
#include "core/column_table.hpp"
#include "core/dtype.hpp"
#include "core/kernels/copy_ops.hpp"

#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace kstage::core {
namespace {

// ---- what the buffers point into -------------------------------------------------------------

struct Holder {
  std::vector<BufferPtr> group_buffers;      // the groups' snapshots (zero-copy values)
  std::vector<std::vector<std::byte>> host;  // the export's own host buffers
  std::vector<BufferPtr> device;             // their device copies (device groups)
  CompletionPtr ready;                       // the work the consumer waits for (device)
  uintptr_t event = 0;                       // ready's event: sync_event points here
  // A device export handed out: its release waits for the device before the buffers go.
  std::shared_ptr<const StreamRelease> after_device;

  // Device buffers are Kokkos memory underneath: after Kokkos::finalize they must not be
  // released any more (as a late DLPack deleter does, the buffers are left to the process).
  // Before, a handed-out device export's memory goes only once the device has run everything
  // enqueued before the release: the consumer may release right after enqueueing its reads, on
  // streams the Arrow interface never names (kstage_arrow.h, "Releasing device arrays").
  ~Holder() {
    if (!kokkos_is_running()) {
      for (BufferPtr& b : group_buffers) leak(b);
      for (BufferPtr& b : device) leak(b);
      leak(ready);
      leak(after_device);
    } else if (after_device) {
      after_device->release_after(nullptr, KSTAGE_STREAM_UNORDERED);
    }
  }

  // Keeps `p`'s reference for the rest of the process without allocating (a destructor must
  // not throw): the moved-to pointer lives in storage whose destructor never runs.
  template <class P>
  static void leak(P& p) noexcept {
    alignas(P) unsigned char storage[sizeof(P)];
    ::new (static_cast<void*>(storage)) P(std::move(p));
  }
};

// ---- the tree before it becomes C structs ----------------------------------------------------

struct Node {
  std::string format, name;
  int64_t length = 0;
  int64_t null_count = 0;  // > 0: buffers[0] is the validity bitmap
  bool nullable = false;   // the field may hold nulls (a record batch's column)
  std::vector<const void*> buffers;
  std::vector<std::unique_ptr<Node>> children;
  std::unique_ptr<Node> dictionary;
};

const char* primitive_format(DLDataType d) {
  switch (d.code) {
    case kDLInt:
      switch (d.bits) {
        case 8: return "c";
        case 16: return "s";
        case 32: return "i";
        case 64: return "l";
      }
      break;
    case kDLUInt:
      switch (d.bits) {
        case 8: return "C";
        case 16: return "S";
        case 32: return "I";
        case 64: return "L";
      }
      break;
    case kDLFloat:
      switch (d.bits) {
        case 16: return "e";
        case 32: return "f";
        case 64: return "g";
      }
      break;
    case kDLBool:
      if (d.bits == 8) return "b";
      break;
  }
  return nullptr;
}

// Builds the nodes; `device` (null: a host group) is where the export's own buffers must go.
class Builder {
 public:
  Builder(const ReadGroup& g, Holder& h) : g_(&g), h_(h), device_(g.device) {}
  // Buffers of the export's own only (no group's column): in `device`'s memory, or the host.
  Builder(Holder& h, Backend* device) : g_(nullptr), h_(h), device_(device) {}

  // A buffer of the export's own, in the group's memory: `bytes` host bytes, kept by the holder,
  // or uploaded for a device group (Backend::upload copies its source: nothing kept on the
  // host). Empty buffers point at a static zero (never NULL where Arrow needs one).
  Result<const void*> own(std::vector<std::byte> bytes) {
    static const uint64_t zero = 0;
    if (bytes.empty()) return static_cast<const void*>(&zero);
    if (device_ == nullptr) {
      h_.host.push_back(std::move(bytes));
      return static_cast<const void*>(h_.host.back().data());
    }
    BufferPtr up;
    KSTAGE_ASSIGN_OR_RETURN(up, device_->upload(bytes.data(), bytes.size()));
    h_.device.push_back(up);
    uploaded_ = true;
    return static_cast<const void*>(up->data());
  }
  template <class T>
  Result<const void*> own_values(const std::vector<T>& v) {
    std::vector<std::byte> bytes(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
    return own(std::move(bytes));
  }
  bool uploaded() const { return uploaded_; }

  // The column (named `name`).
  Result<std::unique_ptr<Node>> column(const std::string& name) {
    const kstage_read_group_t& d = g_->desc;
    const DLDataType dt = d.dtype;
    const char* prim = primitive_format(dt);
    if (prim == nullptr)
      return error(KSTAGE_NOT_SUPPORTED, "attribute '%s' is %s, which has no Arrow type",
                   name.c_str(), dtype_string(dt).c_str());
    const bool is_bool = dt.code == kDLBool;
    if (is_bool && device_)
      return error(
          KSTAGE_NOT_SUPPORTED,
          "attribute '%s' is bool on a device: Arrow's boolean is bit-packed, and the export "
          "packs bits on the host only (read it with target_device kDLCPU)",
          name.c_str());
    return d.is_array ? ragged(name, prim, is_bool) : fixed(name, prim, is_bool);
  }

  // The prims ids[0, n) as uint64 path ids, or dictionary-encoded path strings.
  Result<std::unique_ptr<Node>> paths(const uint64_t* ids, uint64_t n, bool strings,
                                      const ArrowNames& names) {
    auto node = std::make_unique<Node>();
    node->name = "path";
    node->length = int64_t(n);
    if (!strings) {
      node->format = "L";
      std::vector<std::byte> bytes(n * sizeof(uint64_t));
      if (n != 0) std::memcpy(bytes.data(), ids, bytes.size());
      const void* p;
      KSTAGE_ASSIGN_OR_RETURN(p, own(std::move(bytes)));
      node->buffers = {nullptr, p};
      return node;
    }
    // Every prim of a group is distinct: indices 0 .. n-1 into a dictionary of their strings.
    if (n > uint64_t(INT32_MAX))
      return error(KSTAGE_NOT_SUPPORTED, "%llu prims do not fit int32 dictionary indices",
                   (unsigned long long)n);
    std::vector<int32_t> index(n);
    std::vector<int64_t> offsets(n + 1, 0);
    std::vector<std::byte> chars;
    for (uint64_t i = 0; i < n; ++i) {
      index[i] = int32_t(i);
      const std::string s = names.path(ids[i]);
      const auto* b = reinterpret_cast<const std::byte*>(s.data());
      chars.insert(chars.end(), b, b + s.size());
      offsets[i + 1] = int64_t(chars.size());
    }
    node->format = "i";
    const void* p;
    KSTAGE_ASSIGN_OR_RETURN(p, own_values(index));
    node->buffers = {nullptr, p};
    auto dict = std::make_unique<Node>();
    dict->format = "U";
    dict->length = int64_t(n);
    const void *o, *c;
    KSTAGE_ASSIGN_OR_RETURN(o, own_values(offsets));
    KSTAGE_ASSIGN_OR_RETURN(c, own(std::move(chars)));
    dict->buffers = {nullptr, o, c};
    node->dictionary = std::move(dict);
    return node;
  }

  static const std::byte* bytes_of(const DLTensor& t) {
    return static_cast<const std::byte*>(t.data) + t.byte_offset;
  }
  // `count` elements of `lanes` values each as a primitive node (in a FixedSizeList when
  // lanes > 1): the values are `*owned`, taken into the export, or else lie at `data`; bool is
  // packed into bits here (host data).
  Result<std::unique_ptr<Node>> elements(const std::string& name, const char* prim, bool is_bool,
                                         const std::byte* data, std::vector<std::byte>* owned,
                                         uint64_t count, uint64_t lanes) {
    auto leaf = std::make_unique<Node>();
    leaf->format = prim;
    leaf->length = int64_t(count * lanes);
    const std::byte* source = owned ? owned->data() : data;
    const void* values = source;
    if (is_bool) {
      std::vector<std::byte> bits((count * lanes + 7) / 8, std::byte{0});
      for (uint64_t i = 0; i < count * lanes; ++i)
        if (source[i] != std::byte{0}) bits[i / 8] |= std::byte(1u << (i % 8));
      KSTAGE_ASSIGN_OR_RETURN(values, own(std::move(bits)));
    } else if (owned) {
      KSTAGE_ASSIGN_OR_RETURN(values, own(std::move(*owned)));
    } else if (count * lanes == 0) {
      static const uint64_t zero = 0;
      values = &zero;
    }
    leaf->buffers = {nullptr, values};
    if (lanes == 1) {
      leaf->name = name;
      return leaf;
    }
    leaf->name = "item";
    auto list = std::make_unique<Node>();
    list->format = "+w:" + std::to_string(lanes);
    list->name = name;
    list->length = int64_t(count);
    list->buffers = {nullptr};
    list->children.push_back(std::move(leaf));
    return list;
  }

  Result<std::unique_ptr<Node>> fixed(const std::string& name, const char* prim, bool is_bool) {
    const kstage_read_group_t& d = g_->desc;
    const uint64_t n = d.prim_count, lanes = d.dtype.lanes;
    const size_t row = size_t(d.dtype.bits / 8) * lanes;
    const std::byte* base = n > 0 ? bytes_of(g_->tensors[0]) : nullptr;
    if (d.data.index_map == nullptr) return elements(name, prim, is_bool, base, nullptr, n, lanes);
    if (device_) {  // prim i's row gathered on the device (one kernel, the host map uploaded)
      BufferPtr out;
      KSTAGE_ASSIGN_OR_RETURN(out, device_->allocate(std::max<size_t>(n * row, 1)));
      kernels::RowCopy c;
      c.dst = out->data();
      c.dst_stride = int64_t(row);
      c.src = base;
      c.src_stride = int64_t(row);
      c.src_index = g_->index_map->data() + g_->from;  // the host map (desc's may be the device's)
      c.n = n;
      c.row_bytes = row;
      device_->row_copy(c);
      h_.device.push_back(out);
      uploaded_ = true;
      return elements(name, prim, false, out->data(), nullptr, n, lanes);
    }
    std::vector<std::byte> gathered(n * row);  // prim i's row, in prim order
    for (uint64_t i = 0; i < n; ++i)
      std::memcpy(gathered.data() + i * row, base + uint64_t(d.data.index_map[i]) * row, row);
    return elements(name, prim, is_bool, nullptr, &gathered, n, lanes);
  }

  Result<std::unique_ptr<Node>> ragged(const std::string& name, const char* prim, bool is_bool) {
    const kstage_read_group_t& d = g_->desc;
    const uint64_t n = d.prim_count, lanes = d.dtype.lanes;
    const size_t elem = size_t(d.dtype.bits / 8) * lanes;
    std::vector<int64_t> offsets(n + 1, 0);
    const std::byte* start = nullptr;
    bool in_place = true;  // rows back to back, in prim order
    std::vector<const DLTensor*> rows(n);
    for (uint64_t i = 0; i < n; ++i) {
      const DLTensor* t = &g_->tensors[d.data.index_map ? d.data.index_map[i] : i];
      rows[i] = t;
      const int64_t len = t->ndim > 0 ? t->shape[0] : 1;
      if (len > 0) {
        if (start == nullptr) start = bytes_of(*t) - offsets[i] * int64_t(elem);
        if (bytes_of(*t) != start + offsets[i] * int64_t(elem)) in_place = false;
      }
      offsets[i + 1] = offsets[i] + len;
    }
    const uint64_t total = uint64_t(offsets[n]);
    std::vector<std::byte> packed;
    const std::byte* data = in_place ? start : nullptr;
    if (!in_place && device_) {
      // kstage starts ragged rows on 8-byte boundaries, Arrow's lists have none between rows:
      // packed once on the device (one kernel, as a compact read packs).
      std::vector<const std::byte*> from(n);
      std::vector<uint64_t> at(n), bytes(n);
      uint64_t bits = kernels::kRaggedRowAlign;
      for (uint64_t i = 0; i < n; ++i) {
        bytes[i] = uint64_t(offsets[i + 1] - offsets[i]) * elem;
        from[i] = bytes[i] ? bytes_of(*rows[i]) : nullptr;
        at[i] = uint64_t(offsets[i]) * elem;
        bits |= reinterpret_cast<uintptr_t>(from[i]) | at[i] | bytes[i];
      }
      BufferPtr out;
      KSTAGE_ASSIGN_OR_RETURN(out, device_->allocate(std::max<uint64_t>(total * elem, 1)));
      kernels::RaggedCopy k{out->data(), at.data(), from.data(), bytes.data(), size_t(n)};
      device_->ragged_copy(k, kernels::widest_word(bits));
      h_.device.push_back(out);
      uploaded_ = true;
      data = out->data();
      in_place = true;  // the packed rows are the values now
    } else if (!in_place) {
      packed.resize(total * elem);
      for (uint64_t i = 0; i < n; ++i)
        if (offsets[i + 1] > offsets[i])
          std::memcpy(packed.data() + offsets[i] * int64_t(elem), bytes_of(*rows[i]),
                      size_t(offsets[i + 1] - offsets[i]) * elem);
      data = packed.data();
    }
    return list(name, prim, is_bool, d.semantic == KSTAGE_SEMANTIC_STRING, offsets, lanes, data,
                in_place ? nullptr : &packed);
  }

  // A ragged column of offsets.size() - 1 rows: LargeString for STRING bytes, else a LargeList
  // of the elements; the values are `*packed`, taken into the export, or else lie at `data`.
  Result<std::unique_ptr<Node>> list(const std::string& name, const char* prim, bool is_bool,
                                     bool string, const std::vector<int64_t>& offsets,
                                     uint64_t lanes, const std::byte* data,
                                     std::vector<std::byte>* packed) {
    const uint64_t total = uint64_t(offsets.back());
    const void* offs;
    KSTAGE_ASSIGN_OR_RETURN(offs, own_values(offsets));
    auto node = std::make_unique<Node>();
    node->name = name;
    node->length = int64_t(offsets.size() - 1);
    const bool bytes = (prim[0] == 'C' || prim[0] == 'c') && prim[1] == '\0';  // 8-bit integers
    if (string && lanes == 1 && bytes) {  // the UTF-8 bytes themselves
      node->format = "U";
      static const uint64_t zero = 0;
      const void* chars = total == 0 ? static_cast<const void*>(&zero) : data;
      if (packed) {
        KSTAGE_ASSIGN_OR_RETURN(chars, own(std::move(*packed)));
      }
      node->buffers = {nullptr, offs, chars};
      return node;
    }
    node->format = "+L";
    node->buffers = {nullptr, offs};
    std::unique_ptr<Node> items;
    KSTAGE_ASSIGN_OR_RETURN(items, elements("item", prim, is_bool, data, packed, total, lanes));
    node->children.push_back(std::move(items));
    return node;
  }

 private:
  const ReadGroup* g_;  // null: a Builder of the export's own buffers only
  Holder& h_;
  Backend* device_;
  bool uploaded_ = false;
};

// ---- the C structs ---------------------------------------------------------------------------

// An ArrowArray or ArrowSchema node's children and dictionary: made from the tree's nodes by
// `fill` (all or none: on a throw part way, those made are released), and released with it.
template <class T>
struct OwnedNodes {
  std::vector<T*> children;
  T* dictionary = nullptr;

  template <class Fill>
  void make(const Node& n, Fill fill) {
    children.reserve(n.children.size());
    try {
      for (const auto& c : n.children) {
        auto child = std::make_unique<T>();
        fill(*c, child.get());
        children.push_back(child.release());
      }
      if (n.dictionary) {
        auto dict = std::make_unique<T>();
        fill(*n.dictionary, dict.get());
        dictionary = dict.release();
      }
    } catch (...) {  // out of memory part way: what was made is released, nothing leaks
      release();
      throw;
    }
  }
  // Each node not moved out by the consumer (release still set) is released, then freed.
  void release() {
    for (T* c : children) {
      if (c->release) c->release(c);
      delete c;
    }
    children.clear();
    if (dictionary) {
      if (dictionary->release) dictionary->release(dictionary);
      delete dictionary;
      dictionary = nullptr;
    }
  }
};

struct ArrayPrivate {
  std::shared_ptr<Holder> holder;
  std::vector<const void*> buffers;
  OwnedNodes<ArrowArray> nodes;
};

void release_array(ArrowArray* a) {
  if (a == nullptr || a->release == nullptr) return;
  auto* p = static_cast<ArrayPrivate*>(a->private_data);
  p->nodes.release();
  delete p;
  a->release = nullptr;  // released: the specification's mark
}

void fill_array(const Node& n, const std::shared_ptr<Holder>& holder, ArrowArray* out) {
  auto p = std::make_unique<ArrayPrivate>();
  p->holder = holder;
  p->buffers = n.buffers;
  p->nodes.make(n, [&](const Node& c, ArrowArray* a) { fill_array(c, holder, a); });
  out->length = n.length;
  out->null_count = n.null_count;
  out->offset = 0;
  out->n_buffers = int64_t(p->buffers.size());
  out->n_children = int64_t(p->nodes.children.size());
  out->buffers = p->buffers.data();
  out->children = p->nodes.children.empty() ? nullptr : p->nodes.children.data();
  out->dictionary = p->nodes.dictionary;
  out->release = &release_array;
  out->private_data = p.release();
}

struct SchemaPrivate {
  std::string format, name;
  OwnedNodes<ArrowSchema> nodes;
};

void release_schema(ArrowSchema* s) {
  if (s == nullptr || s->release == nullptr) return;
  auto* p = static_cast<SchemaPrivate*>(s->private_data);
  p->nodes.release();
  delete p;
  s->release = nullptr;
}

void fill_schema(const Node& n, ArrowSchema* out) {
  auto p = std::make_unique<SchemaPrivate>();
  p->format = n.format;
  p->name = n.name;
  p->nodes.make(n, [](const Node& c, ArrowSchema* sc) { fill_schema(c, sc); });
  out->format = p->format.c_str();
  out->name = p->name.c_str();
  out->metadata = nullptr;
  out->flags = n.nullable ? ARROW_FLAG_NULLABLE : 0;
  out->n_children = int64_t(p->nodes.children.size());
  out->children = p->nodes.children.empty() ? nullptr : p->nodes.children.data();
  out->dictionary = p->nodes.dictionary;
  out->release = &release_schema;
  out->private_data = p.release();
}

// A struct ("+s") node of `length` rows; the caller adds its fields.
std::unique_ptr<Node> struct_node(uint64_t length) {
  auto node = std::make_unique<Node>();
  node->format = "+s";
  node->length = int64_t(length);
  node->buffers = {nullptr};
  return node;
}

// The tree as C structs, filled into `schema` and `array` only when all of it is made. A device
// export's consumer waits for `ready` (the group's own event) or, when the export did device
// work of its own (uploads, gathers), for an event recorded now, after it.
Status hand_out(const Node& root, const std::shared_ptr<Holder>& holder, Backend* device,
                DLDevice where, const CompletionPtr* ready, ArrowSchema* schema,
                ArrowDeviceArray* array) {
  if (device) {
    if (where.device_type == 0) where = device->device();
    holder->ready = ready ? *ready : device->record();
    if (holder->ready) holder->event = holder->ready->sync().event;
  } else {
    where = DLDevice{kDLCPU, 0};
  }
  // Made before anything is handed out (it allocates), kept by the holder once all is.
  std::shared_ptr<const StreamRelease> after_device = device ? device->stream_release() : nullptr;
  ArrowSchema s{};
  ArrowDeviceArray a{};
  fill_schema(root, &s);
  try {
    fill_array(root, holder, &a.array);
  } catch (...) {
    release_schema(&s);
    throw;
  }
  a.device_type = ArrowDeviceType(where.device_type);
  a.device_id = where.device_id;
  a.sync_event = holder->event != 0 ? static_cast<void*>(&holder->event) : nullptr;
  holder->after_device = std::move(after_device);
  *schema = s;
  *array = a;
  return Status::OK();
}

// A record batch's column of attribute `name` from its groups `gs` (host data): row p is query
// prim p, null where no group holds it. Built in memory of the export's own.
Result<std::unique_ptr<Node>> gathered_column(Builder& b, const std::string& name,
                                              const std::vector<const ReadGroup*>& gs,
                                              const std::unordered_map<uint64_t, uint64_t>& row_of,
                                              uint64_t n) {
  const kstage_read_group_t& d0 = gs.front()->desc;
  const DLDataType dt = d0.dtype;
  const char* prim = primitive_format(dt);
  if (prim == nullptr)
    return error(KSTAGE_NOT_SUPPORTED, "attribute '%s' is %s, which has no Arrow type",
                 name.c_str(), dtype_string(dt).c_str());
  const bool is_bool = dt.code == kDLBool;
  const uint64_t lanes = dt.lanes;
  const size_t elem = size_t(dt.bits / 8) * lanes;  // a fixed row, or one element of a ragged row
  std::vector<std::byte> validity((n + 7) / 8, std::byte{0});
  uint64_t filled = 0;
  auto row_for = [&](uint64_t prim_id) {
    const uint64_t p = row_of.at(prim_id);
    validity[p / 8] |= std::byte(1u << (p % 8));
    ++filled;
    return p;
  };
  std::unique_ptr<Node> node;
  if (!d0.is_array) {
    std::vector<std::byte> values(n * elem, std::byte{0});
    for (const ReadGroup* g : gs) {
      const std::byte* base = g->desc.prim_count ? Builder::bytes_of(g->tensors[0]) : nullptr;
      for (uint64_t i = 0; i < g->desc.prim_count; ++i) {
        const uint64_t r = g->desc.data.index_map ? g->desc.data.index_map[i] : i;
        std::memcpy(values.data() + row_for(g->desc.prims[i]) * elem, base + r * elem, elem);
      }
    }
    KSTAGE_ASSIGN_OR_RETURN(node, b.elements(name, prim, is_bool, nullptr, &values, n, lanes));
  } else {
    std::vector<const std::byte*> from(n, nullptr);
    std::vector<uint64_t> length(n, 0);
    for (const ReadGroup* g : gs)
      for (uint64_t i = 0; i < g->desc.prim_count; ++i) {
        const DLTensor& t = g->tensors[g->desc.data.index_map ? g->desc.data.index_map[i] : i];
        const uint64_t p = row_for(g->desc.prims[i]);
        length[p] = t.ndim > 0 ? uint64_t(t.shape[0]) : 1;
        from[p] = Builder::bytes_of(t);
      }
    std::vector<int64_t> offsets(n + 1, 0);
    for (uint64_t p = 0; p < n; ++p) offsets[p + 1] = offsets[p] + int64_t(length[p]);
    std::vector<std::byte> packed(size_t(offsets[n]) * elem);
    for (uint64_t p = 0; p < n; ++p)
      if (length[p])
        std::memcpy(packed.data() + offsets[p] * int64_t(elem), from[p], length[p] * elem);
    KSTAGE_ASSIGN_OR_RETURN(node, b.list(name, prim, is_bool, d0.semantic == KSTAGE_SEMANTIC_STRING,
                                         offsets, lanes, nullptr, &packed));
  }
  node->nullable = true;
  node->null_count = int64_t(n - filled);
  if (node->null_count > 0) {
    KSTAGE_ASSIGN_OR_RETURN(node->buffers[0], b.own(std::move(validity)));
  }
  return node;
}

Status check_flags(uint64_t flags) {
  const uint64_t known = KSTAGE_ARROW_PATH_IDS | KSTAGE_ARROW_PATH_STRINGS;
  if (flags & ~known)
    return error(
        KSTAGE_INVALID_ARGUMENT,
        "flags 0x%llx has unknown bits (only KSTAGE_ARROW_PATH_IDS and KSTAGE_ARROW_PATH_STRINGS)",
        (unsigned long long)flags);
  if ((flags & KSTAGE_ARROW_PATH_IDS) && (flags & KSTAGE_ARROW_PATH_STRINGS))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "flags: KSTAGE_ARROW_PATH_IDS or KSTAGE_ARROW_PATH_STRINGS, not both");
  return Status::OK();
}

}  // namespace

Status export_group_arrow(const ReadGroup& g, const ArrowNames& names, uint64_t flags,
                          ArrowSchema* schema, ArrowDeviceArray* array) {
  const uint64_t known = KSTAGE_ARROW_PATH_IDS | KSTAGE_ARROW_PATH_STRINGS;
  KSTAGE_RETURN_NOT_OK(check_flags(flags));
  if (g.desc.is_delete)
    return error(KSTAGE_INVALID_ARGUMENT, "a tombstone group has no values to export");
  try {
    auto holder = std::make_shared<Holder>();
    holder->group_buffers.push_back(g.pinned);
    Builder b(g, *holder);
    std::unique_ptr<Node> root;
    KSTAGE_ASSIGN_OR_RETURN(root, b.column(names.attribute));
    if (flags & known) {
      std::unique_ptr<Node> path;
      // (A group read with prims_as_progression has no list: its prims make one here.)
      std::vector<uint64_t> scratch;
      const uint64_t* ids = g.desc.prims || g.desc.prim_count == 0
                                ? g.desc.prims
                                : g.prims->ids(g.from, g.desc.prim_count, scratch);
      KSTAGE_ASSIGN_OR_RETURN(
          path, b.paths(ids, g.desc.prim_count, (flags & KSTAGE_ARROW_PATH_STRINGS) != 0, names));
      std::unique_ptr<Node> record = struct_node(g.desc.prim_count);
      record->children.push_back(std::move(path));
      record->children.push_back(std::move(root));
      root = std::move(record);
    }
    return hand_out(*root, holder, g.device, g.tensors.empty() ? DLDevice{} : g.tensors[0].device,
                    b.uploaded() ? nullptr : &g.ready, schema, array);
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory for an Arrow export of %llu prims",
                         (unsigned long long)g.desc.prim_count);
  }
}

Status export_read_arrow(const PrimSeq& query, const std::vector<const ReadGroup*>& groups,
                         const std::vector<uint64_t>& attributes,
                         const std::vector<std::string>& attribute_names, const ArrowNames& names,
                         uint64_t flags, ArrowSchema* schema, ArrowDeviceArray* array) {
  KSTAGE_RETURN_NOT_OK(check_flags(flags));
  const uint64_t n = query.size();
  // One device for the whole batch (an ArrowDeviceArray has one).
  Backend* device = nullptr;
  DLDevice where{};
  bool seen = false;
  for (const ReadGroup* g : groups) {
    if (g->desc.is_delete || g->desc.prim_count == 0) continue;
    const DLDevice d = g->tensors.empty() ? DLDevice{kDLCPU, 0} : g->tensors[0].device;
    if (seen && (g->device != device || d.device_type != where.device_type ||
                 d.device_id != where.device_id))
      return error(KSTAGE_NOT_SUPPORTED,
                   "the attributes' columns are on different devices (%d:%d and %d:%d): an Arrow "
                   "record batch "
                   "is on one; read them to one (kstage_read_desc_t.target_device)",
                   int(where.device_type), int(where.device_id), int(d.device_type),
                   int(d.device_id));
    device = g->device;
    where = d;
    seen = true;
  }
  try {
    auto holder = std::make_shared<Holder>();
    Builder own(*holder, device);
    std::vector<uint64_t> ids(n);
    for (uint64_t i = 0; i < n; ++i) ids[i] = query[i];
    std::unordered_map<uint64_t, uint64_t> row_of;  // made when a column has nulls or another order
    std::unique_ptr<Node> batch = struct_node(n);
    if (flags & (KSTAGE_ARROW_PATH_IDS | KSTAGE_ARROW_PATH_STRINGS)) {
      std::unique_ptr<Node> path;
      KSTAGE_ASSIGN_OR_RETURN(
          path, own.paths(ids.data(), n, (flags & KSTAGE_ARROW_PATH_STRINGS) != 0, names));
      batch->children.push_back(std::move(path));
    }
    bool device_work = own.uploaded();
    int readies = 0;
    const CompletionPtr* ready = nullptr;
    for (size_t k = 0; k < attributes.size(); ++k) {
      std::vector<const ReadGroup*> gs;
      for (const ReadGroup* g : groups)
        if (g->desc.attribute == attributes[k] && !g->desc.is_delete && g->desc.prim_count > 0)
          gs.push_back(g);
      // An Arrow column has one type: a name the query's prims hold in several schemas is
      // exported group by group (kstage_group_export_arrow), not as one column.
      for (const ReadGroup* g : gs)
        if (g->desc.is_array != gs[0]->desc.is_array || g->desc.semantic != gs[0]->desc.semantic ||
            !same_dtype(g->desc.dtype, gs[0]->desc.dtype))
          return error(
              KSTAGE_NOT_SUPPORTED,
              "attribute '%s' is held in several schemas by the query's prims (%s and %s): "
              "an Arrow column has one type; export its groups one by one "
              "(kstage_group_export_arrow)",
              attribute_names[k].c_str(),
              schema_string({gs[0]->desc.is_array, gs[0]->desc.dtype, gs[0]->desc.semantic})
                  .c_str(),
              schema_string({g->desc.is_array, g->desc.dtype, g->desc.semantic}).c_str());
      for (const ReadGroup* g : gs) {
        holder->group_buffers.push_back(g->pinned);
        if (g->ready) {
          ++readies;
          ready = &g->ready;
        }
      }
      // The group's own column when it is the query's prims, in order: zero-copy as a group's.
      const bool whole =
          gs.size() == 1 && gs[0]->desc.prim_count == n &&
          (n == 0 || std::memcmp(gs[0]->desc.prims, ids.data(), n * sizeof(uint64_t)) == 0);
      std::unique_ptr<Node> column;
      if (whole) {
        Builder b(*gs[0], *holder);
        KSTAGE_ASSIGN_OR_RETURN(column, b.column(attribute_names[k]));
        device_work = device_work || b.uploaded();
      } else if (device) {
        return error(KSTAGE_NOT_SUPPORTED,
                     "attribute '%s' is held by %s of the query's prims: a record batch with nulls "
                     "is made on "
                     "the host; read to the host (kstage_read_desc_t.target_device kDLCPU)",
                     attribute_names[k].c_str(), gs.empty() ? "none" : "only some");
      } else if (gs.empty()) {  // no prim holds it: a column of nulls (its type unknown: Arrow's
                                // null)
        column = std::make_unique<Node>();
        column->format = "n";
        column->name = attribute_names[k];
        column->length = int64_t(n);
        column->null_count = int64_t(n);
        column->nullable = true;
      } else {
        if (row_of.empty())
          for (uint64_t i = 0; i < n; ++i) row_of.emplace(ids[i], i);
        KSTAGE_ASSIGN_OR_RETURN(column, gathered_column(own, attribute_names[k], gs, row_of, n));
      }
      batch->children.push_back(std::move(column));
    }
    device_work = device_work || own.uploaded();
    return hand_out(*batch, holder, device, where, device_work || readies > 1 ? nullptr : ready,
                    schema, array);
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory for an Arrow record batch of %llu prims",
                         (unsigned long long)n);
  } catch (const std::out_of_range&) {
    return error(KSTAGE_INTERNAL, "a read group holds a prim that is not in its query");
  }
}

}  // namespace kstage::core
