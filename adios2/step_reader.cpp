// SPDX-License-Identifier: Apache-2.0
// kstage_adios2_read_step: the next ADIOS2 step into a stage.
//
// The step's tables are read and checked first -- that it is a kstage step, that its dtypes
// are known, that each attribute fits the stage's column (kind, dtype, semantic) and comes
// after its write floor, that its positions, offsets and value counts are in bounds -- before
// the stage is touched. Then its paths are interned (ranges as ranges). A fixed-size
// attribute's values are read by ADIOS2 straight into memory the stage adopts (for a new host
// column it becomes the column's storage, so a restart copies nothing); array attributes are
// read into memory and written. Only when every value is in are the deletions and writes
// committed at each attribute's recorded write floor, and
// the floors sealed: a step that fails to read (an I/O error) commits nothing, leaving at most
// its paths interned (which makes no prim).
#include "adios2/bridge.hpp"

#include <algorithm>

namespace kstage::adios2_bridge {
namespace {

// The reader's engine: Inline hands out the writer's own block (a Get does not copy it there).
struct Reader {
  adios2::IO& io;
  adios2::Engine& e;
  bool is_inline;
};

// The whole of array variable `v` into `out` (its element count).
template <class T>
void read_whole(Reader& r, adios2::Variable<T>& v, T* out, size_t count) {
  v.SetMemorySpace(adios2::MemorySpace::Host);  // `out` is host memory: stated, not detected
  if (!r.is_inline) {
    r.e.Get(v, out, adios2::Mode::Sync);
    return;
  }
  typename adios2::Variable<T>::Info info;
  v.SetBlockSelection(0);
  r.e.Get(v, info, adios2::Mode::Deferred);
  r.e.PerformGets();
  if (count > 0 && info.Data() == nullptr) fail(KSTAGE_OP_FAILED, "Inline: no data for '%s'", v.Name().c_str());
  if (count > 0) std::memcpy(out, info.Data(), count * sizeof(T));
}

template <class T>
size_t whole_count(const adios2::Variable<T>& v) {
  size_t n = 1;
  for (size_t d : v.Shape()) n *= d;
  return n;
}

template <class T>
std::vector<T> get_array(Reader& r, const std::string& name) {
  adios2::Variable<T> v = r.io.InquireVariable<T>(name);
  std::vector<T> out;
  if (!v) {
    if (!r.io.VariableType(name).empty())
      fail(KSTAGE_INVALID_ARGUMENT, "step variable '%s' is %s, not %s", name.c_str(),
           r.io.VariableType(name).c_str(), adios2::GetType<T>().c_str());
    return out;  // absent: empty
  }
  out.resize(whole_count(v));
  read_whole(r, v, out.data(), out.size());
  return out;
}

template <class T>
T get_value(Reader& r, const std::string& name) {
  adios2::Variable<T> v = r.io.InquireVariable<T>(name);
  if (!v) fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s' (%s): not a kstage step of this format", name.c_str(),
               adios2::GetType<T>().c_str());
  T out{};
  r.e.Get(v, out, adios2::Mode::Sync);
  return out;
}

StringTable get_table(Reader& r, const std::string& name) {
  StringTable t;
  t.chars = get_array<uint8_t>(r, layout::chars(name));
  t.offsets = get_array<uint64_t>(r, layout::offsets(name));
  if (t.offsets.empty()) fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s'", layout::offsets(name).c_str());
  for (size_t i = 0; i + 1 < t.offsets.size(); ++i)
    if (t.offsets[i] > t.offsets[i + 1] || t.offsets[i + 1] > t.chars.size())
      fail(KSTAGE_INVALID_ARGUMENT, "string table '%s': offset %zu is out of order or past its %zu bytes",
           name.c_str(), i + 1, t.chars.size());
  return t;
}

struct AttributeIn {
  std::string name;
  kstage_token_t token = 0;
  DLDataType dtype{};
  bool is_array = false;
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  uint64_t floor = 0, count = 0, deleted_count = 0;
  std::vector<unsigned char> values;  // arrays (fixed-size values go to AdoptedValues)
  uint64_t rows = 0;                  // fixed: rows of values; arrays: elements
  std::vector<uint64_t> offsets, prims, deleted;
};

void read_attribute(Reader& r, AttributeIn& a, uint64_t path_count) {
  adios2::IO& io = r.io;
  const char* n = a.name.c_str();
  adios2::Attribute<int32_t> dtype = io.InquireAttribute<int32_t>(layout::attr(a.name, "dtype"));
  adios2::Attribute<std::string> kind = io.InquireAttribute<std::string>(layout::attr(a.name, "kind"));
  adios2::Attribute<int32_t> semantic = io.InquireAttribute<int32_t>(layout::attr(a.name, "semantic"));
  if (!dtype || !kind || !semantic || dtype.Data().size() != 3)
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s' of the step has no schema (kstage/attr/%s/dtype, kind, semantic)", n, n);
  const std::vector<int32_t> d = dtype.Data();
  if (d[0] < 0 || d[0] > 255 || d[1] <= 0 || d[1] > 255 || d[2] <= 0 || d[2] > 65535)
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': dtype {%d, %d, %d} is not a DLPack dtype", n, d[0], d[1], d[2]);
  a.dtype = DLDataType{uint8_t(d[0]), uint8_t(d[1]), uint16_t(d[2])};
  const std::string k = kind.Data().front();
  if (k != "fixed" && k != "array") fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': kind '%s' is neither fixed nor array", n, k.c_str());
  a.is_array = k == "array";
  a.semantic = semantic.Data().front();
  a.floor = get_value<uint64_t>(r, layout::attr(a.name, "floor"));
  a.count = get_value<uint64_t>(r, layout::attr(a.name, "count"));
  a.deleted_count = get_value<uint64_t>(r, layout::attr(a.name, "deleted_count"));
  bool known = with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::string vn = layout::attr(a.name, "values");
    adios2::Variable<T> v = io.InquireVariable<T>(vn);
    if (!v) {
      if (!io.VariableType(vn).empty())
        fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': its values are %s, its schema says %s", n,
             io.VariableType(vn).c_str(), dtype_name(a.dtype).c_str());
      return;
    }
    const uint64_t total = whole_count(v);
    if (total % a.dtype.lanes != 0)
      fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %llu values are not whole rows of %u lanes", n,
           (unsigned long long)total, unsigned(a.dtype.lanes));
    a.rows = total / a.dtype.lanes;
    if (a.is_array) {  // fixed-size values are read later, where they go
      a.values.resize(total * sizeof(T));
      read_whole(r, v, reinterpret_cast<T*>(a.values.data()), total);
    }
  });
  if (!known)
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': dtype %s (code %u) is not one kstage_adios2 knows", n,
         dtype_name(a.dtype).c_str(), unsigned(a.dtype.code));
  a.prims = get_array<uint64_t>(r, layout::attr(a.name, "prims"));
  a.deleted = get_array<uint64_t>(r, layout::attr(a.name, "deleted"));
  const uint64_t rows = a.rows;
  if (a.is_array) {
    a.offsets = get_array<uint64_t>(r, layout::attr(a.name, "offsets"));
    if (a.count > 0 && a.offsets.size() != a.count + 1)
      fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %zu offsets for %llu rows", n, a.offsets.size(), (unsigned long long)a.count);
    for (size_t i = 0; i + 1 < a.offsets.size(); ++i)
      if (a.offsets[i] > a.offsets[i + 1])
        fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': offsets[%zu] is below offsets[%zu]", n, i + 1, i);
    if (a.count > 0 && (a.offsets.front() != 0 || a.offsets.back() != rows))
      fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': offsets end at %llu, the values hold %llu elements", n,
           (unsigned long long)a.offsets.back(), (unsigned long long)rows);
  } else if (rows != a.count) {
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %llu rows of values for %llu prims", n, (unsigned long long)rows,
         (unsigned long long)a.count);
  }
  if (a.prims.empty() && a.count > 0) {
    if (a.count != path_count)
      fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %llu prims but no positions among the step's %llu paths", n,
           (unsigned long long)a.count, (unsigned long long)path_count);
  } else if (a.prims.size() != a.count) {
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %zu positions for %llu prims", n, a.prims.size(), (unsigned long long)a.count);
  }
  if (a.deleted.size() != a.deleted_count)
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': %zu deleted positions, %llu deleted prims", n, a.deleted.size(),
         (unsigned long long)a.deleted_count);
  for (const std::vector<uint64_t>* v : {&a.prims, &a.deleted})
    for (uint64_t p : *v)
      if (p >= path_count)
        fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': position %llu is past the step's %llu paths", n,
             (unsigned long long)p, (unsigned long long)path_count);
}

// Checks that `a` fits the stage's column (if it has one) and comes after its write floor.
void check_fits(kstage_stage_t stage, AttributeIn& a) {
  check(kstage_intern_token(stage, a.name.data(), a.name.size(), &a.token), "kstage_adios2_read_step: an attribute's name");
  kstage_attribute_info_t info = kstage_attribute_info_init();
  const kstage_status_t st = kstage_attribute_info(stage, a.token, &info);
  if (st == KSTAGE_OK) {
    const bool same_dtype = info.dtype.code == a.dtype.code && info.dtype.bits == a.dtype.bits &&
                            info.dtype.lanes == a.dtype.lanes;
    if (info.is_array != a.is_array || !same_dtype || info.semantic != a.semantic)
      fail(KSTAGE_INVALID_ARGUMENT,
           "attribute '%s' of the step is %s %s (semantic %d), the stage's column is %s %s (semantic %d)",
           a.name.c_str(), a.is_array ? "array" : "fixed", dtype_name(a.dtype).c_str(), int(a.semantic),
           info.is_array ? "array" : "fixed", dtype_name(info.dtype).c_str(), int(info.semantic));
  } else if (st != KSTAGE_NOT_FOUND) {
    check(st, "kstage_adios2_read_step");
  }
  uint64_t floor = 0;
  check(kstage_get_write_floor(stage, a.token, &floor), "kstage_adios2_read_step");
  if ((a.count > 0 || a.deleted_count > 0) && a.floor <= floor)
    fail(KSTAGE_INVALID_ARGUMENT,
         "attribute '%s' of the step is at ordinal %llu, not above the stage's write floor %llu (steps out of order?)",
         a.name.c_str(), (unsigned long long)a.floor, (unsigned long long)floor);
}

struct Query {
  kstage_stage_t stage;
  kstage_query_t q = 0;
  Query(kstage_stage_t s, kstage_query_t query) : stage(s), q(query) {}
  Query(kstage_stage_t s, const std::vector<kstage_path_t>& paths) : stage(s) {
    // Consecutive members of one range (a checkpoint of a range's prims): a range query, O(1),
    // instead of a list of every id.
    kstage_path_t first = 0;
    uint64_t count = 0, index = 0;
    if (paths.size() > 1 && paths.back() - paths.front() == paths.size() - 1 &&
        kstage_path_range_info(stage, paths.front(), &first, &count, &index) == KSTAGE_OK &&
        index + paths.size() <= count && std::is_sorted(paths.begin(), paths.end()) &&
        std::adjacent_find(paths.begin(), paths.end()) == paths.end()) {
      check(kstage_query_range(stage, first, index, paths.size(), 1, &q), "kstage_adios2_read_step: a query");
      return;
    }
    check(kstage_query_paths(stage, paths.data(), paths.size(), &q), "kstage_adios2_read_step: a query");
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  kstage_query_t release() {  // the caller owns it now
    const kstage_query_t out = q;
    q = 0;
    return out;
  }
  ~Query() {
    if (q) kstage_query_release(stage, q);
  }
};

// The step's paths, interned: its runs, and their ids in a list only when an attribute needs
// them (positions, deletions, explicit strings) -- a step of one range's members, all of them
// holding each attribute, is a range query per attribute and no list of ids.
struct StepPaths {
  kstage_stage_t stage = 0;
  std::vector<uint64_t> segments;          // {kind, a, b, c} per run
  std::vector<kstage_path_t> range_firsts;  // per range of the step
  std::vector<kstage_path_t> explicit_ids;  // per explicit string
  uint64_t count = 0;
  std::vector<kstage_path_t> ids;  // every path, made on first use

  const std::vector<kstage_path_t>& all() {
    if (ids.size() == count) return ids;
    ids.reserve(count);
    for (size_t i = 0; i < segments.size(); i += 4) {
      const uint64_t a = segments[i + 1], b = segments[i + 2], c = segments[i + 3];
      if (segments[i] == 0) {
        ids.insert(ids.end(), explicit_ids.begin() + a, explicit_ids.begin() + a + b);
      } else {
        for (uint64_t k = 0; k < c; ++k) ids.push_back(range_firsts[a] + b + k);
      }
    }
    return ids;
  }
  // A query over the paths at `positions` (empty: all of them, in order).
  kstage_query_t query(const std::vector<uint64_t>& positions) {
    kstage_query_t q = 0;
    if (positions.empty() && segments.size() == 4 && segments[0] == 1) {
      check(kstage_query_range(stage, range_firsts[segments[1]], segments[2], segments[3], 1, &q),
            "kstage_adios2_read_step: a query");
      return q;
    }
    const std::vector<kstage_path_t>& every = all();
    if (positions.empty()) return Query(stage, every).release();
    std::vector<kstage_path_t> chosen(positions.size());
    for (size_t i = 0; i < chosen.size(); ++i) chosen[i] = every[positions[i]];
    return Query(stage, chosen).release();
  }
};

void finish(kstage_stage_t stage, kstage_op_t op, const char* what) {
  const kstage_status_t st = kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE);
  const char* message = nullptr;
  if (st != KSTAGE_OK && kstage_op_error(stage, op, &message) == KSTAGE_OK && message && *message) {
    const std::string m = message;
    kstage_release_op(stage, op);
    fail(st, "%s: %s", what, m.c_str());
  }
  kstage_release_op(stage, op);
  check(st, what);
}

// A fixed-size attribute's values, read by ADIOS2 straight into memory the stage then adopts
// (kstage_write_data_t.managed_tensors): a write of every row of a new column makes it the
// column's storage, so a restart copies nothing and publishes no list of prims. Uninitialised
// (ADIOS2 writes every byte), 64-byte aligned, freed by its deleter -- once, by the stage, or
// by the owner if it is never handed over.
struct AdoptedValues {
  DLManagedTensorVersioned managed{};
  int64_t shape[1] = {0};
  void* block = nullptr;
  static void deleter(DLManagedTensorVersioned* m) {
    auto* self = static_cast<AdoptedValues*>(m->manager_ctx);
    ::operator delete(self->block, std::align_val_t(64));
    delete self;
  }
  static AdoptedValues* make(DLDataType dtype, uint64_t rows) {
    auto* v = new AdoptedValues();
    const size_t bytes = std::max<size_t>(size_t(rows) * (dtype.bits / 8) * dtype.lanes, 1);
    try {
      v->block = ::operator new(bytes, std::align_val_t(64));
    } catch (...) {
      delete v;
      throw;
    }
    v->shape[0] = int64_t(rows);
    v->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    v->managed.manager_ctx = v;
    v->managed.deleter = &AdoptedValues::deleter;
    v->managed.dl_tensor = DLTensor{v->block, DLDevice{kDLCPU, 0}, 1, dtype, v->shape, nullptr, 0};
    return v;
  }
};

// An attribute of the step on its way into the stage: its values read, nothing committed until
// commit().
struct Incoming {
  kstage_stage_t stage = 0;
  AttributeIn* a = nullptr;
  kstage_query_t query = 0;         // its prims with values
  AdoptedValues* values = nullptr;  // fixed-size: the values, until handed to the stage
  ~Incoming() {
    if (values) AdoptedValues::deleter(&values->managed);  // never handed over
    if (query) kstage_query_release(stage, query);
  }
};

void read_fixed_values(Reader& r, Incoming& in) {
  AttributeIn& a = *in.a;
  in.values = AdoptedValues::make(a.dtype, a.rows);
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    adios2::Variable<T> v = r.io.InquireVariable<T>(layout::attr(a.name, "values"));
    read_whole(r, v, static_cast<T*>(in.values->block), a.rows * a.dtype.lanes);
  });
}

// A column the step records with no prim holding it (its prims deleted, or never sealed any):
// made with its schema by a map of no prims at its floor, where the stage has no such column --
// a restored stage accepts and refuses what the original did. (A floor of 0 has nothing sealed
// to write at.)
void make_empty_column(kstage_stage_t stage, const AttributeIn& a) {
  kstage_attribute_info_t info = kstage_attribute_info_init();
  const kstage_status_t st = kstage_attribute_info(stage, a.token, &info);
  if (st == KSTAGE_OK || a.floor == 0) return;
  if (st != KSTAGE_NOT_FOUND) check(st, "kstage_adios2_read_step");
  // A map of no prims, its one (empty) group fetched and committed: a write of no rows, which
  // a kstage_write_attribute of an array attribute cannot express (it takes a tensor per row).
  static const kstage_path_t none = 0;
  Query q(stage, kstage_query_t(0));
  check(kstage_query_paths(stage, &none, 0, &q.q), "kstage_adios2_read_step: an empty query");
  kstage_map_desc_t md = kstage_map_desc_init();
  md.attribute = a.token;
  md.dtype = a.dtype;
  md.semantic = a.semantic;
  md.is_array = a.is_array;
  md.prim_mode = KSTAGE_PRIM_MODE_UPSERT;
  kstage_map_t map = 0;
  check(kstage_map_attribute(stage, q.q, &md, a.floor, nullptr, 0, &map), "kstage_adios2_read_step: an empty column");
  kstage_map_group_info_t g{};
  kstage_op_t op = 0;
  kstage_status_t st2 = kstage_fetch_map_next(stage, map, KSTAGE_TIMEOUT_INFINITE, &g);
  if (st2 == KSTAGE_OK) st2 = kstage_unmap_attribute(stage, map, kstage_device_sync_t{0, 0}, &op);
  if (st2 != KSTAGE_OK) {
    const std::string m = kstage_last_error();
    kstage_release_map(stage, map);
    fail(st2, "kstage_adios2_read_step: an empty column: %s", m.c_str());
  }
  finish(stage, op, "kstage_adios2_read_step: an empty column");
}

// The attribute's deletions, then its values, at its recorded floor.
void commit(Incoming& in, StepPaths& paths) {
  const kstage_stage_t stage = in.stage;
  const AttributeIn& a = *in.a;
  if (a.deleted_count > 0) {
    Query q(stage, paths.query(a.deleted));
    kstage_op_t op = 0;
    check(kstage_delete_attributes(stage, q.q, &a.token, 1, a.floor, &op), "kstage_adios2_read_step: a deletion");
    finish(stage, op, "kstage_adios2_read_step: a deletion");
  }
  if (a.count == 0) {
    make_empty_column(stage, a);
    return;
  }
  if (in.values) {
    kstage_write_data_t w = kstage_write_data_init();
    w.semantic = a.semantic;
    DLManagedTensorVersioned* managed = &in.values->managed;
    in.values = nullptr;  // the stage's now, also if the write is refused
    w.managed_tensors = &managed;
    w.tensor_count = 1;
    kstage_op_t op = 0;
    check(kstage_write_attribute(stage, in.query, a.token, a.floor, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
          "kstage_adios2_read_step: a write");
    finish(stage, op, "kstage_adios2_read_step: a write");
    return;
  }
  // An array attribute (fixed-size ones went to the stage above): one tensor per row, in place.
  const size_t elem = size_t(a.dtype.bits / 8) * a.dtype.lanes;
  std::vector<DLTensor> tensors(a.count);
  std::vector<int64_t> shapes(a.count);
  for (uint64_t i = 0; i < a.count; ++i) {
    shapes[i] = int64_t(a.offsets[i + 1] - a.offsets[i]);
    tensors[i] = DLTensor{const_cast<unsigned char*>(a.values.data()) + a.offsets[i] * elem, DLDevice{kDLCPU, 0}, 1,
                          a.dtype, &shapes[i], nullptr, 0};
  }
  kstage_write_data_t w = kstage_write_data_init();
  w.semantic = a.semantic;
  w.tensors = tensors.data();
  w.tensor_count = tensors.size();
  w.is_array = true;
  kstage_op_t op = 0;
  check(kstage_write_attribute(stage, in.query, a.token, a.floor, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
        "kstage_adios2_read_step: a write");
  finish(stage, op, "kstage_adios2_read_step: a write");
}

}  // namespace
}  // namespace kstage::adios2_bridge

using namespace kstage::adios2_bridge;

extern "C" kstage_status_t kstage_adios2_read_step(kstage_adios2_stream_t stream, kstage_stage_t stage,
                                                   uint64_t timeout_ns, uint64_t* ordinal) {
  return guard([&] {
    std::shared_ptr<Stream> s = find_stream(stream);
    std::lock_guard lock(s->mutex);
    if (s->mode != KSTAGE_ADIOS2_READ) fail(KSTAGE_INVALID_ARGUMENT, "stream %llu is a writer", (unsigned long long)stream);
    if (ordinal == nullptr) fail(KSTAGE_INVALID_ARGUMENT, "ordinal is NULL");
    adios2::IO& io = s->io;
    adios2::Engine& e = s->engine;
    const float timeout = timeout_ns == KSTAGE_TIMEOUT_INFINITE ? -1.0f : float(double(timeout_ns) * 1e-9);
    const adios2::StepStatus status = e.BeginStep(adios2::StepMode::Read, timeout);
    if (status == adios2::StepStatus::EndOfStream) fail(KSTAGE_END_OF_ITERATION, "the stream has no more steps");
    if (status == adios2::StepStatus::NotReady) fail(KSTAGE_TIMEOUT, "the stream's next step is not ready");
    if (status != adios2::StepStatus::OK) fail(KSTAGE_OP_FAILED, "ADIOS2 could not begin the step");
    s->step_open = true;
    struct EndStep {  // every step begun is ended, also when it does not fit
      Stream& s;
      ~EndStep() {
        if (s.step_open) {
          s.step_open = false;
          try { s.engine.EndStep(); } catch (...) {}
        }
      }
    } end{*s};

    // The format, the step's ordinal and paths.
    adios2::Attribute<std::string> format = io.InquireAttribute<std::string>(layout::kFormat);
    if (!format || format.Data().empty() || format.Data().front() != "kstage")
      fail(KSTAGE_INVALID_ARGUMENT, "not a kstage step: it has no '%s' attribute saying \"kstage\"", layout::kFormat);
    adios2::Attribute<uint32_t> version = io.InquireAttribute<uint32_t>(layout::kFormatVersion);
    if (!version || version.Data().empty() || version.Data().front() != layout::kVersion)
      fail(KSTAGE_INVALID_ARGUMENT, "a kstage step of format version %u; this kstage_adios2 reads version %u",
           version && !version.Data().empty() ? unsigned(version.Data().front()) : 0u, unsigned(layout::kVersion));
    Reader reader{io, e, s->keeps_step_data};
    const uint64_t step_ordinal = get_value<uint64_t>(reader, layout::kOrdinal);
    const uint64_t path_count = get_value<uint64_t>(reader, layout::kPathCount);
    const std::vector<uint64_t> segments = get_array<uint64_t>(reader, layout::kPathSegments);
    const StringTable strings = get_table(reader, layout::kPathStrings);
    const std::vector<uint64_t> range_numbers = get_array<uint64_t>(reader, layout::kRangeNumbers);
    const StringTable range_strings = get_table(reader, layout::kRangeStrings);
    const StringTable names = get_table(reader, layout::kStepAttributes);
    if (segments.size() % 4 != 0 || range_numbers.size() % 2 != 0 ||
        range_strings.size() != range_numbers.size())
      fail(KSTAGE_INVALID_ARGUMENT, "the step's path tables do not fit together");
    // Every run is checked before anything is interned.
    uint64_t listed = 0;
    for (size_t i = 0; i < segments.size(); i += 4) {
      const uint64_t kind = segments[i], a = segments[i + 1], b = segments[i + 2], c = segments[i + 3];
      if (kind == 0 ? (a > strings.size() || b > strings.size() - a)
                    : kind != 1 || a >= range_numbers.size() / 2 || b > range_numbers[2 * a + 1] ||
                          c > range_numbers[2 * a + 1] - b)
        fail(KSTAGE_INVALID_ARGUMENT, "path run %zu of the step is out of its tables' bounds", i / 4);
      listed += kind == 0 ? b : c;
    }
    if (listed != path_count)
      fail(KSTAGE_INVALID_ARGUMENT, "the step's path runs hold %llu paths, its count says %llu",
           (unsigned long long)listed, (unsigned long long)path_count);
    std::vector<AttributeIn> attrs(names.size());
    for (size_t i = 0; i < attrs.size(); ++i) {
      attrs[i].name = names.at(i);
      read_attribute(reader, attrs[i], path_count);
    }
    for (AttributeIn& a : attrs) check_fits(stage, a);

    // The paths (ranges as ranges), then each attribute's values read where they go, then --
    // every value in -- the deletions and values committed, then the floors.
    StepPaths paths;
    paths.stage = stage;
    paths.segments = segments;
    paths.count = path_count;
    paths.range_firsts.resize(range_numbers.size() / 2);
    for (size_t r = 0; r < paths.range_firsts.size(); ++r) {
      const std::string parent = range_strings.at(2 * r), prefix = range_strings.at(2 * r + 1);
      check(kstage_intern_path_range(stage, parent.data(), parent.size(), prefix.data(), prefix.size(),
                                     range_numbers[2 * r], range_numbers[2 * r + 1], &paths.range_firsts[r]),
            "kstage_adios2_read_step: a path range");
    }
    std::vector<const char*> explicit_strings(strings.size());
    std::vector<size_t> lengths(strings.size());
    for (size_t i = 0; i < strings.size(); ++i) {
      explicit_strings[i] = reinterpret_cast<const char*>(strings.chars.data()) + strings.offsets[i];
      lengths[i] = strings.offsets[i + 1] - strings.offsets[i];
    }
    paths.explicit_ids.resize(strings.size());
    if (strings.size() > 0)
      check(kstage_intern_paths(stage, explicit_strings.data(), lengths.data(), strings.size(), paths.explicit_ids.data()),
            "kstage_adios2_read_step: the step's paths");
    std::vector<Incoming> incoming(attrs.size());
    for (size_t i = 0; i < attrs.size(); ++i) {
      Incoming& in = incoming[i];
      in.stage = stage;
      in.a = &attrs[i];
      if (attrs[i].count == 0) continue;
      in.query = paths.query(attrs[i].prims);
      if (!attrs[i].is_array) read_fixed_values(reader, in);
    }
    s->step_open = false;
    e.EndStep();  // every value is in
    for (Incoming& in : incoming) commit(in, paths);
    for (const AttributeIn& a : attrs)
      check(kstage_advance_write_floor(stage, a.floor, &a.token, 1), "kstage_adios2_read_step: sealing");
    *ordinal = step_ordinal;
  });
}
