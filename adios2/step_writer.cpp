// SPDX-License-Identifier: Apache-2.0
// kstage_adios2_write_step: a query's sealed state (or a change range of it) as one ADIOS2 step.
//
// Everything the step needs is gathered first -- the read groups, the step's paths as runs of
// explicit strings and path ranges, each attribute's positions among them -- so that a failure
// leaves no half-written step. Values are put from the read groups themselves when their rows
// are the prims in order (a dense zero-copy group, an array column whose rows lie back to
// back), else packed once; the groups are released after the step ends (ADIOS2 reads deferred
// puts at EndStep). A fixed-size column on a GPU that this ADIOS2 takes memory of is read
// compact on that GPU and put from there (MemorySpace::GPU); every other column is read to
// the host.
//
// Written by several ranks (kstage_adios2_open_mpi), a step is collective: each rank prepares
// its part, the ranks agree that every one of them could (else all fail), unite their
// attributes, learn where each rank's block of every global array starts (from every rank's
// sizes), make their indices global, and put their blocks. Alone, the same code writes a step
// of one block.
#include "adios2/bridge.hpp"
#include "adios2/checksum.hpp"
#include "adios2/test_hooks.hpp"

#include <algorithm>
#include <deque>
#include <functional>

namespace kstage::adios2_bridge {
namespace {
using namespace layout;

// A run of path ids in memory someone else owns (a read group's, or a vector of the step's), or
// a progression (`ids` null: first + i * stride).
struct PathSpan {
  const kstage_path_t* ids = nullptr;
  size_t n = 0;
  uint64_t first = 0, stride = 0;
  size_t size() const { return n; }
  kstage_path_t operator[](size_t i) const { return ids ? ids[i] : first + i * stride; }
  bool same_as(const PathSpan& o) const {
    if (n != o.n || n == 0) return n == o.n;
    if (ids == nullptr && o.ids == nullptr) return first == o.first && stride == o.stride;
    if (ids != nullptr && o.ids != nullptr)
      return ids == o.ids || std::memcmp(ids, o.ids, n * sizeof(kstage_path_t)) == 0;
    for (size_t i = 0; i < n; ++i)
      if ((*this)[i] != o[i]) return false;
    return true;
  }
  // Strictly increasing (a progression: when its stride is not 0).
  bool increasing() const {
    if (ids == nullptr) return n < 2 || stride > 0;
    return std::adjacent_find(ids, ids + n, std::greater_equal<kstage_path_t>()) == ids + n;
  }
  // The index of the first id >= `id` (the span increasing).
  size_t lower_bound(kstage_path_t id) const {
    if (ids != nullptr) return size_t(std::lower_bound(ids, ids + n, id) - ids);
    if (n == 0 || id <= first) return 0;
    return std::min<size_t>(n, size_t((id - first + stride - 1) / stride));
  }
  void append_to(std::vector<kstage_path_t>& out) const {
    if (ids != nullptr) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
    for (size_t i = 0; i < n; ++i) out.push_back(first + i * stride);
  }
};
struct AttributeStep {
  kstage_token_t token = 0;
  std::string name;
  // The step's name for this column: the attribute's name, or, for a name held in several
  // schemas, the name and the schema for every schema but the first (assign_keys).
  std::string key;
  bool several =
      false;  // this rank's stage holds the attribute in several schemas (read to the host)
  kstage_attribute_info_t info{};
  // The prims with values, in the groups' order: the group's own array when one group holds
  // them all (no copy of 8 bytes per prim), else `prims_owned`; or the group's progression (a
  // group read with prims_as_progression: a range query's, a whole stage's that is one run of
  // ids -- no array of ids at all).
  PathSpan prims;
  std::vector<kstage_path_t> prims_owned;
  std::vector<kstage_path_t> deleted;  // lost the attribute (tombstone groups)
  const void* values = nullptr;        // prims.size() rows (fixed) or `elements` (arrays)
  bool on_device = false;              // `values` is GPU memory ADIOS2 takes (a compact read)
  uint64_t elements = 0;               // arrays: the elements of every row
  std::vector<unsigned char> packed;   // the values, when the groups' memory is not in order
  std::vector<uint64_t> offsets;       // arrays: prims.size() + 1, in elements
  std::vector<uint64_t> positions;     // of prims in the step's paths (empty: all, in order)
  std::vector<uint64_t> deleted_positions;
};

// The reads (the host's, the device's) and their groups, released when the step is done (or
// abandoned).
struct Held {
  kstage_stage_t stage = 0;
  std::vector<kstage_read_t> reads;
  std::vector<kstage_group_t> groups;
  ~Held() {
    for (kstage_group_t g : groups) kstage_release_group(stage, g);
    for (kstage_read_t r : reads) kstage_release_read(stage, r);
  }
};

size_t element_bytes(const kstage_attribute_info_t& info) {
  return size_t(info.dtype.bits / 8) * info.dtype.lanes;  // one row (fixed) or one element (arrays)
}

const unsigned char* tensor_bytes(const DLTensor& t) {
  return static_cast<const unsigned char*>(t.data) + t.byte_offset;
}

uint64_t row_length(const DLTensor* t) {
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= uint64_t(t->shape[d]);
  return n;
}

// A group's prims: its array, or the progression the read left it as (prims_as_progression).
PathSpan group_span(kstage_stage_t stage, const kstage_read_group_t& g) {
  PathSpan span{g.prims, size_t(g.prim_count)};
  if (g.prims == nullptr && g.prim_count > 0)
    check(kstage_group_prim_progression(stage, g.handle, &span.first, &span.stride),
          "kstage_adios2_write_step: a group's prims");
  return span;
}

// An attribute's values from its groups (one per attribute, as the read makes them): put in
// place when the group's rows are its prims in order -- a fixed-size group without an index
// map, an array group whose rows lie back to back -- else packed once, in prim order.
void take_values(kstage_stage_t stage, AttributeStep& a,
                 const std::vector<kstage_read_group_t>& groups) {
  const size_t elem = element_bytes(a.info);
  std::vector<const DLTensor*> rows;  // arrays: prim order
  bool in_place = groups.size() == 1;
  if (groups.size() == 1) {
    a.prims = group_span(stage, groups[0]);
  } else {
    for (const kstage_read_group_t& g : groups) group_span(stage, g).append_to(a.prims_owned);
    a.prims = PathSpan{a.prims_owned.data(), a.prims_owned.size()};
  }
  for (const kstage_read_group_t& g : groups) {
    if (a.info.is_array) {
      for (uint64_t i = 0; i < g.prim_count; ++i)
        rows.push_back(&g.data.tensors[g.data.index_map ? g.data.index_map[i] : i]);
    } else if (g.data.index_map != nullptr || g.data.tensors[0].data == nullptr) {
      in_place = false;
    }
  }
  if (!a.info.is_array) {
    if (in_place) {
      a.values = tensor_bytes(groups[0].data.tensors[0]);
      return;
    }
    // (A compact device read is one group in prim order: never packed here, on the host.)
    if (a.on_device)
      fail(KSTAGE_INTERNAL, "attribute '%s': a device read of %zu groups", a.name.c_str(),
           groups.size());
    a.packed.resize(a.prims.size() * elem);
    unsigned char* out = a.packed.data();
    for (const kstage_read_group_t& g : groups) {
      const unsigned char* base = tensor_bytes(g.data.tensors[0]);
      for (uint64_t i = 0; i < g.prim_count; ++i, out += elem)
        std::memcpy(out, base + (g.data.index_map ? g.data.index_map[i] : i) * elem, elem);
    }
    return;
  }
  a.offsets.assign(1, 0);
  const unsigned char* start = rows.empty() ? nullptr : tensor_bytes(*rows[0]);
  for (const DLTensor* t : rows) {
    const uint64_t n = row_length(t);
    if (n > 0 && (t->data == nullptr || tensor_bytes(*t) != start + a.offsets.back() * elem))
      in_place = false;
    a.offsets.push_back(a.offsets.back() + n);
  }
  a.elements = a.offsets.back();
  if (in_place && start != nullptr) {
    a.values = start;
    return;
  }
  a.packed.resize(a.elements * elem);
  for (size_t i = 0; i < rows.size(); ++i)
    if (a.offsets[i + 1] > a.offsets[i])
      std::memcpy(a.packed.data() + a.offsets[i] * elem, tensor_bytes(*rows[i]),
                  (a.offsets[i + 1] - a.offsets[i]) * elem);
}

// The step's paths as runs: consecutive members of one range, or explicit strings.
struct PathRuns {
  std::vector<uint64_t> segments;       // {kind, a, b, c} per run
  StringTable strings;                  // explicit paths
  std::vector<uint64_t> range_numbers;  // {begin, count} per range
  StringTable range_strings;            // {parent, prefix} per range
};

// `paths` is strictly increasing (step_paths makes it so).
PathRuns path_runs(kstage_stage_t stage, const PathSpan& paths) {
  PathRuns out;
  std::vector<kstage_path_t> range_firsts;
  size_t explicit_start = 0, explicit_run = 0;
  auto close_explicit = [&] {
    if (explicit_run == 0) return;
    out.segments.insert(out.segments.end(), {0, explicit_start, explicit_run, 0});
    explicit_run = 0;
  };
  for (size_t i = 0; i < paths.size();) {
    kstage_path_t first = 0;
    uint64_t count = 0, index = 0;
    const kstage_status_t st = kstage_path_range_info(stage, paths[i], &first, &count, &index);
    if (st == KSTAGE_NOT_FOUND) {
      const char* s = nullptr;
      size_t n = 0;
      check(kstage_path_string(stage, paths[i], &s, &n),
            "kstage_adios2_write_step: a path's string");
      if (explicit_run == 0) explicit_start = out.strings.size();
      out.strings.add(s, n);
      ++explicit_run;
      ++i;
      continue;
    }
    check(st, "kstage_adios2_write_step: a path's range");
    close_explicit();
    // The run: the following ids that are the following members (ids are consecutive in a
    // range). The paths are strictly increasing, so paths[k] - paths[i] >= k - i, with equality
    // on a prefix: the run's end is found by bisection, not by a look at each of its ids.
    size_t lo = i + 1, hi = std::min<size_t>(paths.size(), i + (count - index));  // end in [lo, hi]
    while (lo < hi) {
      const size_t mid = lo + (hi - lo + 1) / 2;  // is paths[mid - 1] still in the run?
      if (paths[mid - 1] - paths[i] == mid - 1 - i) lo = mid;
      else hi = mid - 1;
    }
    const size_t j = lo;
    auto it = std::find(range_firsts.begin(), range_firsts.end(), first);
    const uint64_t r = uint64_t(it - range_firsts.begin());
    if (it == range_firsts.end()) {
      range_firsts.push_back(first);
      const char *parent = nullptr, *prefix = nullptr;
      size_t parent_length = 0, prefix_length = 0;
      uint64_t begin = 0;
      check(kstage_path_range_definition(stage, first, &parent, &parent_length, &prefix,
                                         &prefix_length, &begin),
            "kstage_adios2_write_step: a path range");
      out.range_numbers.insert(out.range_numbers.end(), {begin, count});
      out.range_strings.add(parent, parent_length);
      out.range_strings.add(prefix, prefix_length);
    }
    out.segments.insert(out.segments.end(), {1, r, index, uint64_t(j - i)});
    i = j;
  }
  close_explicit();
  return out;
}

// The positions of `prims` in the sorted `paths`; empty when they are all of them, in order, and
// `identity_empty` (the layout's "absent: all" for an attribute's prims).
std::vector<uint64_t> positions_of(const PathSpan& prims, const PathSpan& paths,
                                   bool identity_empty) {
  if (identity_empty && prims.same_as(paths)) return {};
  std::vector<uint64_t> out(prims.size());
  for (size_t i = 0; i < prims.size(); ++i) out[i] = uint64_t(paths.lower_bound(prims[i]));
  return out;
}

// What a step's puts point into, alive until the step ends (or, for Inline, until the next).
struct StepData {
  Held held;
  std::vector<AttributeStep> steps;
  PathRuns runs;
  StringTable names;
  std::vector<kstage_path_t> paths_owned;    // the step's paths when no attribute's prims are them
  PathSpan paths;                            // the step's paths (this rank's)
  std::deque<std::vector<uint64_t>> tables;  // the rows of the block tables this rank puts
};

// The step's paths: every prim with values or deletions, in path-id order, without duplicates.
// The common step -- every attribute held by the same prims, none deleted, in path-id order
// (a filter query; a range query) -- is one attribute's prims as they are: a check, no copy.
PathSpan step_paths(const std::vector<AttributeStep>& steps, std::vector<kstage_path_t>& owned) {
  const AttributeStep* first = nullptr;
  bool shared = true;
  for (const AttributeStep& a : steps) {
    if (!a.deleted.empty()) shared = false;
    if (a.prims.size() == 0) continue;
    if (first == nullptr) first = &a;
    else if (!a.prims.same_as(first->prims)) shared = false;
  }
  if (first == nullptr && shared) return {};
  if (shared) {
    const PathSpan p = first->prims;
    if (p.increasing()) return p;
  }
  for (const AttributeStep& a : steps) {
    a.prims.append_to(owned);
    owned.insert(owned.end(), a.deleted.begin(), a.deleted.end());
  }
  std::sort(owned.begin(), owned.end());
  owned.erase(std::unique(owned.begin(), owned.end()), owned.end());
  return PathSpan{owned.data(), owned.size()};
}

kstage_adios2_step_desc_t read_step_desc(const kstage_adios2_step_desc_t* in) {
  kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
  copy_descriptor(in, d, "kstage_adios2_step_desc_init");
  for (uint8_t r : d.reserved)
    if (r != 0) fail(KSTAGE_INVALID_ARGUMENT, "desc.reserved must be zero");
  if (d.change_range && d.range_end < d.range_begin)
    fail(KSTAGE_INVALID_ARGUMENT, "desc: range_end %llu is below range_begin %llu",
         (unsigned long long)d.range_end, (unsigned long long)d.range_begin);
  return d;
}

// This rank's part of the step, everything its puts need gathered: the attributes' values held
// in their read groups, the step's paths as runs, each attribute's positions among them.
// `device_puts`: device columns may be put from device memory (the stream's engine takes it).
void prepare(StepData& data, kstage_stage_t stage, kstage_query_t query,
             const kstage_token_t* attributes, uint64_t n, const kstage_adios2_step_desc_t& d,
             bool device_puts) {
  // The attributes and their columns.
  std::vector<kstage_token_t> tokens(attributes, attributes + n);
  if (n == 0) {
    uint64_t count = 0;
    check(kstage_list_attributes(stage, nullptr, 0, &count),
          "kstage_adios2_write_step: the stage's attributes");
    tokens.resize(count);
    check(kstage_list_attributes(stage, tokens.data(), tokens.size(), &count),
          "kstage_adios2_write_step: the stage's attributes");
    tokens.resize(std::min<uint64_t>(count, tokens.size()));
  }
  // One step entry per column: an attribute held in several schemas has one per schema.
  std::vector<AttributeStep>& steps = data.steps;
  for (const kstage_token_t token : tokens) {
    const char* name = nullptr;
    size_t length = 0;
    check(kstage_token_string(stage, token, &name, &length),
          "kstage_adios2_write_step: attributes");
    kstage_attribute_info_t all = kstage_attribute_info_init();
    check(kstage_attribute_info(stage, token, &all), "kstage_adios2_write_step");
    for (uint64_t k = 0; k < all.schema_count; ++k) {
      AttributeStep a;
      a.token = token;
      a.name.assign(name, length);
      a.key = a.name;
      a.several = all.schema_count > 1;
      a.info = kstage_attribute_info_init();
      check(kstage_attribute_schema(stage, token, k, &a.info), "kstage_adios2_write_step");
      if (!with_element_type(a.info.dtype, [](auto) {}))
        fail(KSTAGE_NOT_SUPPORTED,
             "kstage_adios2_write_step: attribute '%s' is %s, which ADIOS2 has no type for",
             a.name.c_str(), dtype_name(a.info.dtype).c_str());
      steps.push_back(std::move(a));
    }
  }

  // The sealed state. Fixed-size columns on a GPU this ADIOS2 takes memory of (with BP5; Inline's
  // reader, say, is handed the writer's buffers as host memory) are read compact, on their
  // GPU: one block per attribute, in prim order, that ADIOS2 copies itself. ADIOS2 copies on
  // the legacy default stream, which the read makes wait for the work that produces the data;
  // its copies out are done when EndStep returns, before the groups are released. Every other
  // column is read to the host (complete when the read returns).
  Held& held = data.held;
  held.stage = stage;
  std::vector<kstage_token_t> on_host, on_device;
  for (AttributeStep& a : steps) {
    // (An attribute of several schemas is read once, to the host: its groups are split by
    // schema below.)
    a.on_device =
        device_puts && !a.several && !a.info.is_array && takes_device_memory(a.info.residency);
    std::vector<kstage_token_t>& list = a.on_device ? on_device : on_host;
    if (std::find(list.begin(), list.end(), a.token) == list.end()) list.push_back(a.token);
    if (!a.on_device && a.info.residency.device_type != kDLCPU)  // the device path not taken
      note(KSTAGE_LOG_INFO,
           "kstage_adios2_write_step: attribute '%s' on %s device %d goes through host "
           "memory: %s",
           a.name.c_str(), device_type_text(a.info.residency.device_type).c_str(),
           int(a.info.residency.device_id),
           a.info.is_array       ? "an array column is always read to the host"
           : !kTakesDeviceMemory ? "this ADIOS2 was built without GPU support"
           : !device_puts        ? "the stream's engine takes no device buffers"
                                 : "this ADIOS2 takes no memory of that device");
  }
  std::vector<std::vector<kstage_read_group_t>> groups(steps.size());
  auto read = [&](const std::vector<kstage_token_t>& which, bool device) {
    if (which.empty()) return;
    kstage_read_desc_t rd = kstage_read_desc_init();
    rd.prims_as_progression = true;  // a range's prims as a progression: no array of ids made
    rd.change_range = d.change_range;
    rd.range_begin = d.range_begin;
    rd.range_end = d.range_end;
    if (device) {
      rd.compact = true;
      rd.target_device = DLDevice{DLDeviceType(0), 0};  // each column's own GPU
      rd.device_sync = kstage_device_sync_t{1, 0};      // the legacy default stream waits
    } else {
      rd.target_device = DLDevice{kDLCPU, 0};
    }
    kstage_read_t r = 0;
    check(kstage_read_attributes(stage, query, which.data(), which.size(), &rd, &r),
          device ? "kstage_adios2_write_step: the read of device columns"
                 : "kstage_adios2_write_step: the read");
    held.reads.push_back(r);
    kstage_read_group_t g;
    kstage_status_t st;
    while ((st = kstage_fetch_read_next(stage, r, KSTAGE_TIMEOUT_INFINITE, &g)) == KSTAGE_OK) {
      held.groups.push_back(g.handle);
      const Schema schema{g.is_array, g.dtype, g.semantic};
      auto it = std::find_if(steps.begin(), steps.end(), [&](const AttributeStep& a) {
        return a.token == g.attribute && Schema::of(a.info) == schema;
      });
      if (it == steps.end()) fail(KSTAGE_INTERNAL, "a group of an attribute not read");
      it->info.write_floor =
          g.ordinal;  // the floor of the snapshot read (a seal may have come since)
      if (g.is_delete) {
        group_span(stage, g).append_to(it->deleted);
      } else {
        groups[size_t(it - steps.begin())].push_back(g);
      }
    }
    if (st != KSTAGE_END_OF_ITERATION) check(st, "kstage_adios2_write_step: the read's groups");
  };
  read(on_host, false);
  read(on_device, true);
  for (size_t i = 0; i < steps.size(); ++i)
    if (!groups[i].empty()) take_values(stage, steps[i], groups[i]);

  data.paths = step_paths(steps, data.paths_owned);
  data.runs = path_runs(stage, data.paths);
  for (AttributeStep& a : steps) {
    a.positions = positions_of(a.prims, data.paths, true);
    a.deleted_positions =
        positions_of(PathSpan{a.deleted.data(), a.deleted.size()}, data.paths, false);
  }
}

// An attribute's schema as a rank sends it to the others: its name's length and bytes, kind,
// dtype and semantic.
void encode_schema(std::string& out, const AttributeStep& a) {
  const uint32_t length = uint32_t(a.name.size());
  const int32_t fields[5] = {a.info.is_array ? 1 : 0, a.info.dtype.code, a.info.dtype.bits,
                             a.info.dtype.lanes, int32_t(a.info.semantic)};
  out.append(reinterpret_cast<const char*>(&length), sizeof length);
  out += a.name;
  out.append(reinterpret_cast<const char*>(fields), sizeof fields);
}

// The step's attributes over every rank: each rank's, in rank order (a rank that has no column
// of another's attribute writes an empty block of it), checked to have one schema everywhere.
// Every rank ends with the same attributes in the same order.
void unite_attributes(Collective& ranks, std::vector<AttributeStep>& steps) {
  std::string mine;
  for (const AttributeStep& a : steps) encode_schema(mine, a);
  const std::vector<std::string> all = ranks.allgather(mine);
  std::vector<AttributeStep> united;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string& b = all[r];
    for (size_t at = 0; at < b.size();) {
      uint32_t length = 0;
      int32_t f[5] = {};
      std::memcpy(&length, b.data() + at, sizeof length);
      const std::string name = b.substr(at + sizeof length, length);
      std::memcpy(f, b.data() + at + sizeof length + length, sizeof f);
      at += sizeof length + length + sizeof f;
      kstage_attribute_info_t info = kstage_attribute_info_init();
      info.is_array = f[0] != 0;
      info.dtype = DLDataType{uint8_t(f[1]), uint8_t(f[2]), uint16_t(f[3])};
      info.semantic = kstage_semantic_t(f[4]);
      // One entry per (name, schema): ranks holding a name in different schemas (on different
      // prims) write a column of each.
      auto it = std::find_if(united.begin(), united.end(), [&](const AttributeStep& u) {
        return u.name == name && Schema::of(u.info) == Schema::of(info);
      });
      if (it != united.end()) continue;
      AttributeStep a;
      a.name = name;
      a.key = name;
      a.info = info;
      a.info.write_floor = 0;
      united.push_back(std::move(a));
    }
  }
  for (AttributeStep& u : united) {  // this rank's own, in the united order
    auto it = std::find_if(steps.begin(), steps.end(), [&](const AttributeStep& a) {
      return a.name == u.name && Schema::of(a.info) == Schema::of(u.info);
    });
    if (it != steps.end()) u = std::move(*it);
  }
  steps = std::move(united);
}

// A schema in a variable's name: "fixed.2.64x1.0" (kind, DLPack code, bits x lanes, semantic).
std::string key_suffix(const Schema& s) {
  return std::string(s.is_array ? "array." : "fixed.") + std::to_string(int(s.dtype.code)) + "." +
         std::to_string(int(s.dtype.bits)) + "x" + std::to_string(int(s.dtype.lanes)) + "." +
         std::to_string(int(s.semantic));
}

// The step's name of each column: the attribute's name for its first schema in the step's
// order (the same on every rank), "<name>#<key_suffix>" for each further one (the reader finds the
// attribute's name in kstage/attr/<key>/name). Refused if a key is another entry's.
void assign_keys(std::vector<AttributeStep>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    AttributeStep& a = steps[i];
    a.key = a.name;
    for (size_t j = 0; j < i; ++j)
      if (steps[j].name == a.name) {
        a.key = a.name + "#" + key_suffix(Schema::of(a.info));
        break;
      }
  }
  for (size_t i = 0; i < steps.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (steps[j].key == steps[i].key)
        fail(KSTAGE_NOT_SUPPORTED,
             "kstage_adios2_write_step: attribute '%s' (%s) and attribute '%s' take the same "
             "name '%s' in the step",
             steps[i].name.c_str(), Schema::of(steps[i].info).text().c_str(), steps[j].name.c_str(),
             steps[i].key.c_str());
}

// Where this rank's block of each of the step's global arrays starts (`before`) and how long
// the arrays are (`total`): kBlockColumns for the paths' tables, then kAttrBlockColumns per
// attribute; the step's ordinal and each attribute's floor (the ranks' largest), and whether an
// attribute needs its positions (some rank's prims of it are not all its paths, in order).
struct Placement {
  std::vector<uint64_t> local, before, total;
  uint64_t ordinal = 0;
  std::vector<uint64_t> floors;
  std::vector<bool> needs_positions;
  uint64_t at(const std::vector<uint64_t>& v, size_t attribute, size_t column) const {
    return v[kBlockColumns + attribute * kAttrBlockColumns + column];
  }
};

Placement place(Collective& ranks, StepData& data, const kstage_adios2_step_desc_t& d) {
  Placement p;
  const PathRuns& runs = data.runs;
  const size_t n = data.steps.size();
  p.local = {
      data.paths.size(),         runs.segments.size() / 4,      runs.strings.size(),
      runs.strings.chars.size(), runs.range_numbers.size() / 2, runs.range_strings.chars.size()};
  std::vector<uint64_t> floors, needs;
  for (const AttributeStep& a : data.steps) {
    p.local.insert(p.local.end(), {a.prims.size(), a.info.is_array ? a.elements : a.prims.size(),
                                   uint64_t(a.deleted.size())});
    floors.push_back(a.info.write_floor);
    needs.push_back(a.positions.empty() && a.prims.size() == data.paths.size() ? 0 : 1);
  }
  // One exchange of every rank's sizes, floors, needs and change range.
  std::vector<uint64_t> mine = p.local;
  mine.insert(mine.end(), floors.begin(), floors.end());
  mine.insert(mine.end(), needs.begin(), needs.end());
  mine.insert(mine.end(), {d.change_range ? 1u : 0u, d.change_range ? d.range_begin : 0,
                           d.change_range ? d.range_end : 0});
  const std::vector<std::vector<uint64_t>> all = allgather_values(ranks, mine);
  const size_t sizes = p.local.size();
  p.before.assign(sizes, 0);
  p.total.assign(sizes, 0);
  p.floors.assign(n, 0);
  p.needs_positions.assign(n, false);
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<uint64_t>& theirs = all[r];
    for (size_t k = 0; k < sizes; ++k) {
      if (int(r) < ranks.rank()) p.before[k] += theirs[k];
      p.total[k] += theirs[k];
    }
    for (size_t i = 0; i < n; ++i) {
      p.floors[i] = std::max(p.floors[i], theirs[sizes + i]);
      if (theirs[sizes + n + i] != 0) p.needs_positions[i] = true;
    }
    if (!std::equal(theirs.end() - 3, theirs.end(), mine.end() - 3))
      fail(KSTAGE_INVALID_ARGUMENT,
           "kstage_adios2_write_step: the change range differs between rank %zu and rank %d "
           "(every rank writes the same kind of step)",
           r, ranks.rank());
  }
  for (uint64_t f : p.floors) p.ordinal = std::max(p.ordinal, f);

  // An attribute whose prims are not all the paths, in order, on some rank has its positions on
  // every rank.
  for (size_t i = 0; i < n; ++i) {
    AttributeStep& a = data.steps[i];
    if (p.needs_positions[i] && a.positions.empty() && a.prims.size() > 0)
      a.positions = positions_of(a.prims, data.paths, false);
  }
  // Every index this rank's blocks hold becomes global: its strings and ranges, positions and
  // offsets count from where its blocks start. (Rank 0's, and a serial step's, start at 0.)
  if (ranks.rank() == 0) return p;
  const std::vector<uint64_t>& b = p.before;
  std::vector<uint64_t>& segments = data.runs.segments;
  for (size_t i = 0; i < segments.size(); i += 4)
    segments[i + 1] += segments[i] == 0 ? b[kBlockStrings] : b[kBlockRanges];
  for (uint64_t& o : data.runs.strings.offsets) o += b[kBlockStringBytes];
  for (uint64_t& o : data.runs.range_strings.offsets) o += b[kBlockRangeBytes];
  for (size_t i = 0; i < n; ++i) {
    AttributeStep& a = data.steps[i];
    for (uint64_t& x : a.positions) x += b[kBlockPaths];
    for (uint64_t& x : a.deleted_positions) x += b[kBlockPaths];
    for (uint64_t& x : a.offsets) x += p.at(b, i, kAttrElements);
  }
  return p;
}

// This rank's block of a global array of `total` rows of `width` (1: a 1-D array), from row
// `before`, `rows` of them; nothing when it has none.
template <class T>
void put_block(adios2::IO& io, adios2::Engine& e, const std::string& name, const T* data,
               uint64_t before, uint64_t rows, uint64_t total, uint64_t width = 1,
               Space space = Space::Host) {
  if (rows == 0) return;
  adios2::Variable<T> v =
      width > 1 ? array_variable<T>(io, name, {total, width}, {before, 0}, {rows, width}, space)
                : array_variable<T>(io, name, {total}, {before}, {rows}, space);
  e.Put(v, data);
}

// An offsets array of `total` + 1 entries (a string table's, an array attribute's): this rank's
// `n` + 1 entries overlap the next rank's first, so rank 0 puts all of its entries and every
// other rank all but its first.
void put_offsets(adios2::IO& io, adios2::Engine& e, const std::string& name,
                 const std::vector<uint64_t>& offsets, uint64_t before, uint64_t total,
                 bool first_rank) {
  const uint64_t n = offsets.size() - 1;
  if (first_rank) put_block(io, e, name, offsets.data(), 0, n + 1, total + 1);
  else put_block(io, e, name, offsets.data() + 1, before + 1, n, total + 1);
}

void put_table(adios2::IO& io, adios2::Engine& e, const std::string& name, const StringTable& t,
               uint64_t before, uint64_t total, uint64_t before_bytes, uint64_t total_bytes,
               bool first_rank) {
  put_block(io, e, layout::chars(name), t.chars.data(), before_bytes, t.chars.size(), total_bytes);
  put_offsets(io, e, layout::offsets(name), t.offsets, before, total, first_rank);
}

// A single value of the step, the same on every rank: put by the first (copied at the call).
template <class T>
void put_value(adios2::IO& io, adios2::Engine& e, const std::string& name, T value,
               bool first_rank) {
  if (first_rank) e.Put(value_variable<T>(io, name), value, adios2::Mode::Sync);
}

// The rows of a block table {writers + 1, columns} this rank puts: its own (its blocks'
// starts), and the last rank the totals after them. `kept` holds them until the step ends.
void put_block_table(adios2::IO& io, adios2::Engine& e, const std::string& name,
                     const uint64_t* before, const uint64_t* total, uint64_t columns,
                     const Collective& ranks, std::deque<std::vector<uint64_t>>& kept) {
  std::vector<uint64_t>& rows = kept.emplace_back(before, before + columns);
  const bool last = ranks.rank() == ranks.size() - 1;
  if (last) rows.insert(rows.end(), total, total + columns);
  put_block(io, e, name, rows.data(), uint64_t(ranks.rank()), last ? 2 : 1,
            uint64_t(ranks.size()) + 1, columns);
}

// The step's variables and attributes: this rank's blocks of them (between BeginStep and EndStep).
void put_blocks(Stream& s, StepData& data, const Placement& p, const kstage_adios2_step_desc_t& d) {
  adios2::IO& io = s.io;
  adios2::Engine& e = s.engine;
  const Collective& ranks = *s.ranks;
  const bool first = ranks.rank() == 0;
  const std::vector<uint64_t>& b = p.before;
  const std::vector<uint64_t>& t = p.total;
  const PathRuns& runs = data.runs;
  put_value<uint64_t>(io, e, kOrdinal, p.ordinal, first);
  put_value<uint8_t>(io, e, kIncremental, d.change_range ? 1 : 0, first);
  put_value<uint64_t>(io, e, kRangeBegin, d.range_begin, first);
  put_value<uint64_t>(io, e, kRangeEnd, d.range_end, first);
  put_value<uint64_t>(io, e, kPathCount, t[kBlockPaths], first);
  put_block_table(io, e, kBlocks, b.data(), t.data(), kBlockColumns, ranks, data.tables);
  put_block(io, e, kPathSegments, runs.segments.data(), b[kBlockRuns], p.local[kBlockRuns],
            t[kBlockRuns], 4);
  put_table(io, e, kPathStrings, runs.strings, b[kBlockStrings], t[kBlockStrings],
            b[kBlockStringBytes], t[kBlockStringBytes], first);
  put_block(io, e, kRangeNumbers, runs.range_numbers.data(), b[kBlockRanges], p.local[kBlockRanges],
            t[kBlockRanges], 2);
  put_table(io, e, kRangeStrings, runs.range_strings, 2 * b[kBlockRanges], 2 * t[kBlockRanges],
            b[kBlockRangeBytes], t[kBlockRangeBytes], first);
  if (first)
    put_table(io, e, kStepAttributes, data.names, 0, data.names.size(), 0, data.names.chars.size(),
              true);
  for (size_t i = 0; i < data.steps.size(); ++i) {
    AttributeStep& a = data.steps[i];
    if (!io.InquireAttribute<std::string>(attr(a.key, "kind"))) {
      const int32_t dtype[3] = {a.info.dtype.code, a.info.dtype.bits, a.info.dtype.lanes};
      io.DefineAttribute<int32_t>(attr(a.key, "dtype"), dtype, 3);
      io.DefineAttribute<std::string>(attr(a.key, "kind"), a.info.is_array ? "array" : "fixed");
      io.DefineAttribute<int32_t>(attr(a.key, "semantic"), a.info.semantic);
      if (a.key != a.name) io.DefineAttribute<std::string>(attr(a.key, "name"), a.name);
    }
    const uint64_t prims = p.at(t, i, kAttrPrims), elements = p.at(t, i, kAttrElements);
    put_value<uint64_t>(io, e, attr(a.key, "floor"), p.floors[i], first);
    put_value<uint64_t>(io, e, attr(a.key, "count"), prims, first);
    put_value<uint64_t>(io, e, attr(a.key, "deleted_count"), p.at(t, i, kAttrDeleted), first);
    put_block_table(io, e, attr(a.key, "blocks"), &b[kBlockColumns + i * kAttrBlockColumns],
                    &t[kBlockColumns + i * kAttrBlockColumns], kAttrBlockColumns, ranks,
                    data.tables);
    put_block(io, e, attr(a.key, "floors"), &a.info.write_floor, uint64_t(ranks.rank()), 1,
              uint64_t(ranks.size()));
    test_hook_fail_put(a.name);  // (tests: a step that fails half-way)
    const uint64_t rows = a.info.is_array ? a.elements : a.prims.size();
    const void* values = a.values ? a.values : a.packed.data();
    const uint64_t lanes = a.info.dtype.lanes;
    with_element_type(a.info.dtype, [&](auto tag) {
      using T = decltype(tag);
      put_block(io, e, attr(a.key, "values"), static_cast<const T*>(values),
                p.at(b, i, kAttrElements), rows, elements, lanes,
                a.on_device ? Space::Device : Space::Host);
    });
    // This rank's block of the values' checksums {present, XXH3-64 of its values' bytes}, for
    // the reader to check before anything is written into its stage (a flipped value is refused
    // naming the attribute). Values put from device memory are not hashed here (not present):
    // the file's manifest covers them.
    std::vector<uint64_t>& sum = data.tables.emplace_back(2, 0);
    if (!a.on_device) {
      sum[0] = 1;
      sum[1] = xxh3(values, size_t(rows * lanes * ((a.info.dtype.bits + 7) / 8)));
    }
    put_block(io, e, attr(a.key, "checksums"), sum.data(), uint64_t(ranks.rank()), 1,
              uint64_t(ranks.size()), 2);
    if (a.info.is_array && prims > 0) {
      if (a.offsets.empty()) a.offsets.assign(1, p.at(b, i, kAttrElements));  // no rows here
      put_offsets(io, e, attr(a.key, "offsets"), a.offsets, p.at(b, i, kAttrPrims), prims, first);
    }
    put_block(io, e, attr(a.key, "prims"), a.positions.data(), p.at(b, i, kAttrPrims),
              a.positions.size(), prims);
    put_block(io, e, attr(a.key, "deleted"), a.deleted_positions.data(), p.at(b, i, kAttrDeleted),
              a.deleted_positions.size(), p.at(t, i, kAttrDeleted));
  }
}

// A stream records each attribute's schema once, at its first step: a later step of another
// schema (its column made again) is refused before the step begins. (The same on every rank:
// the ranks record the same schemas.)
void check_recorded_schemas(adios2::IO& io, const std::vector<AttributeStep>& steps) {
  for (const AttributeStep& a : steps) {
    adios2::Attribute<std::string> kind = io.InquireAttribute<std::string>(attr(a.key, "kind"));
    adios2::Attribute<int32_t> dtype = io.InquireAttribute<int32_t>(attr(a.key, "dtype"));
    adios2::Attribute<int32_t> semantic = io.InquireAttribute<int32_t>(attr(a.key, "semantic"));
    if (!kind || !dtype || !semantic || dtype.Data().size() != 3) continue;
    const std::vector<int32_t> d3 = dtype.Data();
    const Schema recorded{kind.Data().front() == "array",
                          DLDataType{uint8_t(d3[0]), uint8_t(d3[1]), uint16_t(d3[2])},
                          kstage_semantic_t(semantic.Data().front())};
    if (recorded != Schema::of(a.info))
      fail(KSTAGE_INVALID_ARGUMENT,
           "kstage_adios2_write_step: attribute '%s' is %s, but this stream's earlier steps "
           "recorded it as %s (a stream records an attribute's schema once: open a new stream)",
           a.name.c_str(), Schema::of(a.info).text().c_str(), recorded.text().c_str());
  }
}

void put_step(Stream& s, StepData& data, const Placement& p, const kstage_adios2_step_desc_t& d) {
  check_recorded_schemas(s.io, data.steps);
  s.engine.BeginStep();
  try {
    put_blocks(s, data, p, d);
  } catch (...) {  // the step is ended (what it holds of this rank is incomplete), not left open
    s.incomplete_step = true;  // never sealed: the folder gets no manifest at close
    try {
      s.engine.EndStep();
    } catch (...) {
      note_swallowed("kstage_adios2_write_step: ending the step after a failed put");
    }
    throw;
  }
  try {
    s.engine.EndStep();  // the deferred puts are read here
  } catch (...) {
    s.incomplete_step = true;  // (a full disk): what the step holds is not to be trusted
    throw;
  }
  // ADIOS2 copied the device columns' blocks out of GPU memory itself, and does not check its
  // copies' errors (#52, defect 7): each device is synchronised and checked through the stage,
  // so that a fault fails the step, naming it, instead of leaving a garbage step that says OK.
  std::vector<DLDevice> checked;
  for (const AttributeStep& a : data.steps) {
    if (!a.on_device) continue;
    const DLDevice dev = a.info.residency;
    if (std::any_of(checked.begin(), checked.end(), [&](const DLDevice& c) {
          return c.device_type == dev.device_type && c.device_id == dev.device_id;
        }))
      continue;
    checked.push_back(dev);
    const kstage_status_t st = kstage_device_check(data.held.stage, dev);
    if (st != KSTAGE_OK) {
      s.incomplete_step = true;  // the step's values from this device are not to be trusted
      fail(st,
           "kstage_adios2_write_step: step %llu of '%s' (ordinal %llu): %s device %d faulted "
           "around ADIOS2's copies of its columns (attribute '%s'); the step written is not "
           "to be trusted: %s",
           (unsigned long long)s.steps_written, s.name.c_str(), (unsigned long long)p.ordinal,
           device_type_text(dev.device_type).c_str(), int(dev.device_id), a.name.c_str(),
           kstage_last_error());
    }
  }
}

}  // namespace
}  // namespace kstage::adios2_bridge

using namespace kstage::adios2_bridge;

extern "C" kstage_status_t kstage_adios2_write_step(kstage_adios2_stream_t stream,
                                                    kstage_stage_t stage, kstage_query_t query,
                                                    const kstage_token_t* attributes, uint64_t n,
                                                    const kstage_adios2_step_desc_t* desc) {
  return guard([&] {
    std::shared_ptr<Stream> s = find_stream(stream);
    std::lock_guard lock(s->mutex);
    Collective& ranks = *s->ranks;
    auto data = std::make_shared<StepData>();
    kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
    // This rank's part; then, every rank ready, the step's attributes over all of them, where
    // each rank's blocks go, and the puts.
    agree(ranks, "kstage_adios2_write_step", [&] {
      if (s->mode != KSTAGE_ADIOS2_WRITE)
        fail(KSTAGE_INVALID_ARGUMENT, "stream %llu is a reader", (unsigned long long)stream);
      d = read_step_desc(desc);
      if (n > 0 && attributes == nullptr)
        fail(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but n is %llu", (unsigned long long)n);
      prepare(*data, stage, query, attributes, n, d, s->device_memory);
    });
    if (ranks.size() > 1) unite_attributes(ranks, data->steps);
    assign_keys(data->steps);
    for (const AttributeStep& a : data->steps) data->names.add(a.key.data(), a.key.size());
    const Placement p = place(ranks, *data, d);
    put_step(*s, *data, p, d);  // `data` releases the groups after
    ++s->steps_written;         // for the manifest that seals a BP5 folder (kstage_adios2_close)
    s->last_ordinal = p.ordinal;
    if (s->keeps_step_data) s->last_step_data = std::move(data);  // Inline: the reader reads them
  });
}
