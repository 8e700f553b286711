// SPDX-License-Identifier: Apache-2.0
// kstage_adios2_read_step: the next ADIOS2 step into a stage.
//
// The step's tables are read and checked first -- that it is a kstage step, that its dtypes
// are known, that each attribute fits the stage's column (kind, dtype, semantic) and comes
// after its write floor, that its positions, offsets and value counts are in bounds -- before
// the stage is touched. Then its paths are interned (ranges as ranges). A fixed-size
// attribute's values are read by ADIOS2 straight into memory the stage adopts (for a new host
// column it becomes the column's storage, so a restart copies nothing) -- or, for a column on
// a GPU this ADIOS2 takes memory of, by ADIOS2 into the GPU buffer of a map of the stage's
// (MemorySpace::GPU); array attributes are read into host memory and written. Only when every
// value is in are the deletions and writes committed at each attribute's recorded write floor,
// and the floors sealed: a step that fails to read (an I/O error) commits nothing, leaving at most
// its paths interned (which makes no prim).
//
// A step is one block per writer of each global array (kstage/blocks says where each starts).
// A reader alone reads all of them; each of Q reading ranks (kstage_adios2_open_mpi) reads the
// blocks of writers [W q / Q, W (q + 1) / Q) -- contiguous rows of every array -- into its own
// stage, and the ranks agree that each could before any commits.
#include "adios2/bridge.hpp"
#include "adios2/checksum.hpp"
#include "adios2/manifest.hpp"
#include "adios2/test_hooks.hpp"

#include <algorithm>

namespace kstage::adios2_bridge {
namespace {
using namespace layout;

// The reader's engine: Inline hands out the writer's own block (a Get does not copy it there); a
// BP engine gets into GPU memory (device_memory).
struct Reader {
  adios2::IO& io;
  adios2::Engine& e;
  bool is_inline;
  bool device_memory;
  // Buffers of Gets that threw (a file shorter than its metadata says): ADIOS2 2.12's BP5 reader
  // keeps such a Get queued and performs it again at EndStep (or Close), writing into its
  // buffer -- which is therefore kept, until the stream closes (Stream::parked_reads).
  std::vector<std::shared_ptr<void>>& parked;
};

// `buffer` kept alive (moved: the same memory) until the stream closes, for a Get into it that
// threw and that ADIOS2 may still perform.
template <class T>
void park(Reader& r, std::vector<T>& buffer) noexcept {
  try {
    r.parked.push_back(std::make_shared<std::vector<T>>(std::move(buffer)));
  } catch (...) {  // no memory to keep it: leaked rather than freed under ADIOS2's pending read
    new (std::nothrow) std::vector<T>(std::move(buffer));
  }
}

// The elements in one row of `v` (its shape past the first dimension).
template <class T>
uint64_t row_width(const adios2::Variable<T>& v) {
  const adios2::Dims shape = v.Shape();
  uint64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}
template <class T>
uint64_t row_count(const adios2::Variable<T>& v) {
  const adios2::Dims shape = v.Shape();
  return shape.empty() ? 0 : shape[0];
}

// Rows [start, start + rows) of global array `v` into `out`, memory in `space` (Device: a BP
// engine's).
template <class T>
void read_rows(Reader& r, adios2::Variable<T>& v, uint64_t start, uint64_t rows, T* out,
               Space space = Space::Host) {
  if (rows == 0) return;
  const uint64_t width = row_width(v);
  if (v.Shape().empty() || start > row_count(v) || rows > row_count(v) - start)
    fail(KSTAGE_INVALID_ARGUMENT,
         "step variable '%s' has %llu rows; its tables place rows %llu .. %llu in it",
         v.Name().c_str(), (unsigned long long)row_count(v), (unsigned long long)start,
         (unsigned long long)(start + rows - 1));
  set_space(v, space);  // stated, never detected
  if (r.is_inline) {    // one writer, whose one block is the whole array
    if (space == Space::Device) fail(KSTAGE_INTERNAL, "an Inline read into device memory");
    typename adios2::Variable<T>::Info info;
    v.SetBlockSelection(0);
    r.e.Get(v, info, adios2::Mode::Deferred);
    r.e.PerformGets();
    if (info.Data() == nullptr)
      fail(KSTAGE_OP_FAILED, "Inline: no data for '%s'", v.Name().c_str());
    std::memcpy(out, info.Data() + start * width, rows * width * sizeof(T));
    return;
  }
  adios2::Dims first(v.Shape().size(), 0), count = v.Shape();
  first[0] = start;
  count[0] = rows;
  v.SetSelection({first, count});
  r.e.Get(v, out, adios2::Mode::Sync);
}

// Variable `name` of type T; absent: false. Present with another type: an error.
template <class T>
adios2::Variable<T> find_variable(Reader& r, const std::string& name) {
  adios2::Variable<T> v = r.io.InquireVariable<T>(name);
  if (!v && !r.io.VariableType(name).empty())
    fail(KSTAGE_INVALID_ARGUMENT, "step variable '%s' is %s, not %s", name.c_str(),
         r.io.VariableType(name).c_str(), adios2::GetType<T>().c_str());
  return v;
}

// Rows [start, start + rows) of `name`, each of `width` elements; none: an empty vector (the
// layout writes no block of an empty table).
template <class T>
std::vector<T> get_rows(Reader& r, const std::string& name, uint64_t start, uint64_t rows,
                        uint64_t width = 1) {
  std::vector<T> out;
  if (rows == 0) return out;
  adios2::Variable<T> v = find_variable<T>(r, name);
  if (!v)
    fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s', which its tables say holds %llu rows",
         name.c_str(), (unsigned long long)(start + rows));
  if (row_width(v) != width)
    fail(KSTAGE_INVALID_ARGUMENT, "step variable '%s' has rows of %llu, not %llu", name.c_str(),
         (unsigned long long)row_width(v), (unsigned long long)width);
  out.resize(rows * width);
  try {
    read_rows(r, v, start, rows, out.data());
  } catch (...) {
    park(r, out);
    throw;
  }
  return out;
}

template <class T>
T get_value(Reader& r, const std::string& name) {
  adios2::Variable<T> v = r.io.InquireVariable<T>(name);
  if (!v)
    fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s' (%s): not a kstage step of this format",
         name.c_str(), adios2::GetType<T>().c_str());
  std::vector<T> out(1);  // (on the heap: parked if the Get throws)
  try {
    r.e.Get(v, out[0], adios2::Mode::Sync);
  } catch (...) {
    park(r, out);
    throw;
  }
  return out[0];
}

// A block table {writers + 1, columns} (kstage/blocks, kstage/attr/<name>/blocks), checked:
// from a row of zeros, each column's sums never decrease.
std::vector<uint64_t> get_block_table(Reader& r, const std::string& name, size_t columns,
                                      uint64_t writers) {
  adios2::Variable<uint64_t> v = find_variable<uint64_t>(r, name);
  if (!v)
    fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s': not a kstage step of this format",
         name.c_str());
  if (v.Shape().size() != 2 || v.Shape()[1] != columns || v.Shape()[0] < 2 ||
      (writers != 0 && v.Shape()[0] != writers + 1))
    fail(KSTAGE_INVALID_ARGUMENT,
         "step variable '%s' is not a table of %zu columns for %llu writers", name.c_str(), columns,
         (unsigned long long)writers);
  std::vector<uint64_t> t(row_count(v) * columns);
  try {
    read_rows(r, v, 0, row_count(v), t.data());
  } catch (...) {
    park(r, t);
    throw;
  }
  for (size_t c = 0; c < columns; ++c) {
    if (t[c] != 0)
      fail(KSTAGE_INVALID_ARGUMENT, "block table '%s' does not start at 0", name.c_str());
    for (size_t w = 1; w < row_count(v); ++w)
      if (t[w * columns + c] < t[(w - 1) * columns + c])
        fail(KSTAGE_INVALID_ARGUMENT, "block table '%s': row %zu is below row %zu", name.c_str(), w,
             w - 1);
  }
  return t;
}

// The rows of a block table that the blocks [b0, b1) span: where they start, and how many.
struct Span {
  uint64_t start = 0, count = 0;
};
Span span(const std::vector<uint64_t>& table, size_t columns, size_t column, uint64_t b0,
          uint64_t b1) {
  const uint64_t lo = table[b0 * columns + column];
  return Span{lo, table[b1 * columns + column] - lo};
}

// Entries [entries.start, +count) of string table `name`, whose bytes are `bytes`: its offsets
// made to count from the first entry's bytes (an offsets array has one entry more than its
// table: each block's last is the next one's first).
StringTable get_table(Reader& r, const std::string& name, Span entries, Span bytes) {
  StringTable t;
  t.offsets = get_rows<uint64_t>(r, offsets(name), entries.start, entries.count + 1);
  t.chars = get_rows<uint8_t>(r, chars(name), bytes.start, bytes.count);
  if (t.offsets.front() != bytes.start || t.offsets.back() != bytes.start + bytes.count)
    fail(KSTAGE_INVALID_ARGUMENT,
         "string table '%s': its offsets do not span its blocks' %llu bytes", name.c_str(),
         (unsigned long long)bytes.count);
  for (uint64_t& o : t.offsets) o -= bytes.start;
  for (size_t i = 0; i + 1 < t.offsets.size(); ++i)
    if (t.offsets[i] > t.offsets[i + 1])
      fail(KSTAGE_INVALID_ARGUMENT, "string table '%s': offset %zu is out of order", name.c_str(),
           i + 1);
  return t;
}
// The whole of string table `name` (one every writer shares).
StringTable get_whole_table(Reader& r, const std::string& name) {
  adios2::Variable<uint64_t> v = find_variable<uint64_t>(r, offsets(name));
  if (!v || row_count(v) == 0)
    fail(KSTAGE_INVALID_ARGUMENT, "the step has no '%s'", offsets(name).c_str());
  adios2::Variable<uint8_t> c = find_variable<uint8_t>(r, chars(name));
  return get_table(r, name, Span{0, row_count(v) - 1}, Span{0, c ? row_count(c) : 0});
}

// Positions among the step's paths (`prims`, `deleted`), made to count from this reader's first
// path, each checked to be one of its `paths`.
void rebase_positions(std::vector<uint64_t>& positions, Span paths, const char* attribute,
                      const char* what) {
  for (uint64_t& p : positions) {
    if (p < paths.start || p - paths.start >= paths.count)
      fail(KSTAGE_INVALID_ARGUMENT,
           "attribute '%s': %s position %llu is not among its blocks' paths [%llu, %llu)",
           attribute, what, (unsigned long long)p, (unsigned long long)paths.start,
           (unsigned long long)(paths.start + paths.count));
    p -= paths.start;
  }
}

struct AttributeIn {
  std::string name;       // the step's name of the column (its variables' kstage/attr/<name>/)
  std::string attribute;  // the attribute's: kstage/attr/<name>/name, else `name`
  kstage_token_t token = 0;
  DLDataType dtype{};
  bool is_array = false;
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  uint64_t floor = 0, count = 0, deleted_count = 0;  // this reader's blocks'
  std::vector<unsigned char> values;  // arrays (fixed-size values go to AdoptedValues or a map)
  bool column_exists = false;         // the stage has a column of it (check_fits)
  DLDevice residency{};               // ... on this device
  uint64_t rows = 0;                  // fixed: rows of values; arrays: elements
  uint64_t first_row = 0;             // of the values, in the global array
  std::vector<uint64_t> offsets, prims, deleted;
  // Per writer block this reader reads: its rows of values, and {present, XXH3-64} of their
  // bytes (empty: a step written before value checksums).
  std::vector<uint64_t> block_rows, checksums;
};

// The values read (`data`, this reader's rows in host memory) against the step's checksums of
// each writer's block: OP_FAILED naming the attribute on a mismatch, before any is committed.
void check_values(const AttributeIn& a, const void* data) {
  if (a.checksums.empty()) return;
  const size_t row_bytes = size_t(a.dtype.lanes) * ((a.dtype.bits + 7) / 8);
  const auto* at = static_cast<const unsigned char*>(data);
  for (size_t w = 0; w < a.block_rows.size(); ++w) {
    const size_t bytes = size_t(a.block_rows[w]) * row_bytes;
    if (a.checksums[2 * w] == 1) {
      const uint64_t got = xxh3(at, bytes);
      if (got != a.checksums[2 * w + 1])
        fail(KSTAGE_OP_FAILED,
             "attribute '%s': its values (block %zu of the step) do not match their checksum "
             "(XXH3-64 %s, the step says %s): damaged in the file or on the way",
             a.attribute.c_str(), w, hex64(got).c_str(), hex64(a.checksums[2 * w + 1]).c_str());
    }
    at += bytes;
  }
}

// The blocks [b0, b1) of the step's `writers` this reader reads, and their paths.
struct Blocks {
  uint64_t writers = 1, b0 = 0, b1 = 1;
  Span paths;
};

void read_attribute(Reader& r, AttributeIn& a, const Blocks& blocks) {
  adios2::IO& io = r.io;
  const char* n = a.name.c_str();
  adios2::Attribute<int32_t> dtype = io.InquireAttribute<int32_t>(attr(a.name, "dtype"));
  adios2::Attribute<std::string> kind = io.InquireAttribute<std::string>(attr(a.name, "kind"));
  adios2::Attribute<int32_t> semantic = io.InquireAttribute<int32_t>(attr(a.name, "semantic"));
  if (!dtype || !kind || !semantic || dtype.Data().size() != 3)
    fail(KSTAGE_INVALID_ARGUMENT,
         "attribute '%s' of the step has no schema (kstage/attr/%s/dtype, kind, semantic)", n, n);
  const std::vector<int32_t> d = dtype.Data();
  if (d[0] < 0 || d[0] > 255 || d[1] <= 0 || d[1] > 255 || d[2] <= 0 || d[2] > 65535)
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': dtype {%d, %d, %d} is not a DLPack dtype", n,
         d[0], d[1], d[2]);
  a.dtype = DLDataType{uint8_t(d[0]), uint8_t(d[1]), uint16_t(d[2])};
  const std::string k = kind.Data().front();
  if (k != "fixed" && k != "array")
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': kind '%s' is neither fixed nor array", n,
         k.c_str());
  a.is_array = k == "array";
  a.semantic = semantic.Data().front();
  // A further schema of an attribute held in several is recorded under "<name>#<schema>", with
  // the attribute's name beside it.
  adios2::Attribute<std::string> named = io.InquireAttribute<std::string>(attr(a.name, "name"));
  a.attribute = named && !named.Data().empty() ? named.Data().front() : a.name;
  if (!with_element_type(a.dtype, [](auto) {}))
    fail(KSTAGE_INVALID_ARGUMENT,
         "attribute '%s': dtype %s (code %u) is not one kstage_adios2 knows", n,
         dtype_name(a.dtype).c_str(), unsigned(a.dtype.code));

  // This reader's blocks of it, and their write floor: the largest of its writers' (a reader
  // of no blocks: the step's).
  const std::vector<uint64_t> table =
      get_block_table(r, attr(a.name, "blocks"), kAttrBlockColumns, blocks.writers);
  const Span prims = span(table, kAttrBlockColumns, kAttrPrims, blocks.b0, blocks.b1);
  const Span elements = span(table, kAttrBlockColumns, kAttrElements, blocks.b0, blocks.b1);
  const Span deleted = span(table, kAttrBlockColumns, kAttrDeleted, blocks.b0, blocks.b1);
  const uint64_t total_prims = table[blocks.writers * kAttrBlockColumns + kAttrPrims];
  const uint64_t total_elements = table[blocks.writers * kAttrBlockColumns + kAttrElements];
  if (get_value<uint64_t>(r, attr(a.name, "count")) != total_prims ||
      get_value<uint64_t>(r, attr(a.name, "deleted_count")) !=
          table[blocks.writers * kAttrBlockColumns + kAttrDeleted] ||
      (!a.is_array && (elements.start != prims.start || elements.count != prims.count)))
    fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': its counts and its block table differ", n);
  a.count = prims.count;
  a.deleted_count = deleted.count;
  if (blocks.b1 > blocks.b0) {
    const std::vector<uint64_t> floors =
        get_rows<uint64_t>(r, attr(a.name, "floors"), blocks.b0, blocks.b1 - blocks.b0);
    a.floor = *std::max_element(floors.begin(), floors.end());
  } else {
    a.floor = get_value<uint64_t>(r, attr(a.name, "floor"));
  }

  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::string vn = attr(a.name, "values");
    adios2::Variable<T> v = io.InquireVariable<T>(vn);
    if (!v && !io.VariableType(vn).empty())
      fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': its values are %s, its schema says %s", n,
           io.VariableType(vn).c_str(), dtype_name(a.dtype).c_str());
    const uint64_t held = v ? row_count(v) * row_width(v) : 0;
    if (held != total_elements * a.dtype.lanes || (v && row_width(v) != a.dtype.lanes))
      fail(KSTAGE_INVALID_ARGUMENT,
           "attribute '%s': %llu values are not the %llu rows of %u lanes its blocks hold", n,
           (unsigned long long)held, (unsigned long long)total_elements, unsigned(a.dtype.lanes));
    a.rows = elements.count;
    a.first_row = elements.start;
    // The values' checksums of this reader's writer blocks, where the step has them.
    if (!io.VariableType(attr(a.name, "checksums")).empty() && blocks.b1 > blocks.b0) {
      a.checksums =
          get_rows<uint64_t>(r, attr(a.name, "checksums"), blocks.b0, blocks.b1 - blocks.b0, 2);
      for (uint64_t w = blocks.b0; w < blocks.b1; ++w)
        a.block_rows.push_back(span(table, kAttrBlockColumns, kAttrElements, w, w + 1).count);
    }
    if (a.is_array && a.rows > 0) {  // fixed-size values are read later, where they go
      a.values.resize(a.rows * a.dtype.lanes * sizeof(T));
      try {
        read_rows(r, v, a.first_row, a.rows, reinterpret_cast<T*>(a.values.data()));
      } catch (...) {
        park(r, a.values);
        throw;
      }
      check_values(a, a.values.data());
    }
  });
  if (!io.VariableType(attr(a.name, "prims")).empty()) {
    a.prims = get_rows<uint64_t>(r, attr(a.name, "prims"), prims.start, prims.count);
    rebase_positions(a.prims, blocks.paths, n, "a");
  } else if (a.count > 0 && a.count != blocks.paths.count) {
    fail(KSTAGE_INVALID_ARGUMENT,
         "attribute '%s': %llu prims but no positions among the step's %llu paths", n,
         (unsigned long long)a.count, (unsigned long long)blocks.paths.count);
  }
  a.deleted = get_rows<uint64_t>(r, attr(a.name, "deleted"), deleted.start, deleted.count);
  rebase_positions(a.deleted, blocks.paths, n, "a deleted");
  if (a.is_array && a.count > 0) {
    a.offsets = get_rows<uint64_t>(r, attr(a.name, "offsets"), prims.start, prims.count + 1);
    if (a.offsets.front() != elements.start || a.offsets.back() != elements.start + elements.count)
      fail(KSTAGE_INVALID_ARGUMENT,
           "attribute '%s': its offsets do not span its blocks' %llu elements", n,
           (unsigned long long)elements.count);
    for (size_t i = 0; i + 1 < a.offsets.size(); ++i)
      if (a.offsets[i] > a.offsets[i + 1])
        fail(KSTAGE_INVALID_ARGUMENT, "attribute '%s': offsets[%zu] is below offsets[%zu]", n,
             i + 1, i);
    for (uint64_t& o : a.offsets) o -= elements.start;
  }
}

// The stage's column of `token` in exactly `schema` (its info in `*out`), if it has one.
bool find_column(kstage_stage_t stage, kstage_token_t token, const Schema& schema,
                 kstage_attribute_info_t* out) {
  kstage_attribute_info_t info = kstage_attribute_info_init();
  const kstage_status_t st = kstage_attribute_info(stage, token, &info);
  if (st == KSTAGE_NOT_FOUND) return false;
  check(st, "kstage_adios2_read_step");
  for (uint64_t k = 0; k < info.schema_count; ++k) {
    kstage_attribute_info_t one = kstage_attribute_info_init();
    check(kstage_attribute_schema(stage, token, k, &one), "kstage_adios2_read_step");
    if (Schema::of(one) == schema) {
      if (out) *out = one;
      return true;
    }
  }
  return false;
}

// Finds the stage's column of `a`'s schema (if it has one; another schema of the attribute is
// another column, and a prim holding it in one is the stage's to refuse at the write) and
// checks that `a` comes after the attribute's write floor.
void check_fits(kstage_stage_t stage, AttributeIn& a) {
  check(kstage_intern_token(stage, a.attribute.data(), a.attribute.size(), &a.token),
        "kstage_adios2_read_step: an attribute's name");
  kstage_attribute_info_t info = kstage_attribute_info_init();
  a.column_exists = find_column(stage, a.token, Schema{a.is_array, a.dtype, a.semantic}, &info);
  if (a.column_exists) a.residency = info.residency;
  uint64_t floor = 0;
  check(kstage_get_write_floor(stage, a.token, &floor), "kstage_adios2_read_step");
  if ((a.count > 0 || a.deleted_count > 0) && a.floor <= floor)
    fail(KSTAGE_INVALID_ARGUMENT,
         "attribute '%s' of the step is at ordinal %llu, not above the stage's write floor %llu "
         "(steps out of order?)",
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
      check(kstage_query_range(stage, first, index, paths.size(), 1, &q),
            "kstage_adios2_read_step: a query");
      return;
    }
    check(kstage_query_paths(stage, paths.data(), paths.size(), &q),
          "kstage_adios2_read_step: a query");
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
  std::vector<uint64_t> segments;           // {kind, a, b, c} per run
  std::vector<kstage_path_t> range_firsts;  // per range of the step
  std::vector<kstage_path_t> explicit_ids;  // per explicit string
  uint64_t count = 0;
  std::vector<kstage_path_t> ids;  // every path, made on first use

  // Interns the step's paths: its ranges as ranges, its explicit strings. A range the stage
  // cannot make as a range -- it overlaps one the stage has, as ranges of the same paths that
  // different writers made do when one reader reads their blocks -- has the members this step
  // names interned by their strings (the same string is always the same path), and its runs
  // become runs of those.
  void intern(const StringTable& strings, const std::vector<uint64_t>& range_numbers,
              const StringTable& range_strings) {
    std::vector<bool> by_strings(range_numbers.size() / 2, false);
    range_firsts.assign(range_numbers.size() / 2, 0);
    for (size_t r = 0; r < range_firsts.size(); ++r) {
      const std::string parent = range_strings.at(2 * r), prefix = range_strings.at(2 * r + 1);
      const kstage_status_t st = kstage_intern_path_range(
          stage, parent.data(), parent.size(), prefix.data(), prefix.size(), range_numbers[2 * r],
          range_numbers[2 * r + 1], &range_firsts[r]);
      if (st == KSTAGE_ALREADY_EXISTS) by_strings[r] = true;
      else check(st, "kstage_adios2_read_step: a path range");
    }
    std::vector<std::string> members;  // of the ranges made by their strings
    std::vector<const char*> texts(strings.size());
    std::vector<size_t> lengths(strings.size());
    for (size_t i = 0; i < strings.size(); ++i) {
      texts[i] = reinterpret_cast<const char*>(strings.chars.data()) + strings.offsets[i];
      lengths[i] = strings.offsets[i + 1] - strings.offsets[i];
    }
    for (size_t i = 0; i < segments.size(); i += 4) {
      const uint64_t r = segments[i + 1], b = segments[i + 2], c = segments[i + 3];
      if (segments[i] != 1 || !by_strings[r]) continue;
      const std::string parent = range_strings.at(2 * r), prefix = range_strings.at(2 * r + 1);
      const std::string head = (parent == "/" ? "" : parent) + "/" + prefix;
      segments[i] = 0;  // explicit strings from here on
      segments[i + 1] = texts.size() + members.size();
      segments[i + 2] = c;
      segments[i + 3] = 0;
      for (uint64_t k = 0; k < c; ++k)
        members.push_back(head + std::to_string(range_numbers[2 * r] + b + k));
    }
    for (const std::string& m : members) {
      texts.push_back(m.data());
      lengths.push_back(m.size());
    }
    explicit_ids.resize(texts.size());
    if (!texts.empty())
      check(kstage_intern_paths(stage, texts.data(), lengths.data(), texts.size(),
                                explicit_ids.data()),
            "kstage_adios2_read_step: the step's paths");
  }

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
  // The paths at `positions`.
  std::vector<kstage_path_t> at(const std::vector<uint64_t>& positions) {
    const std::vector<kstage_path_t>& every = all();
    std::vector<kstage_path_t> chosen(positions.size());
    for (size_t i = 0; i < chosen.size(); ++i) chosen[i] = every[positions[i]];
    return chosen;
  }
  // A query over the paths at `positions` (empty: all of them, in order).
  kstage_query_t query(const std::vector<uint64_t>& positions) {
    kstage_query_t q = 0;
    if (positions.empty() && segments.size() == 4 && segments[0] == 1) {
      check(kstage_query_range(stage, range_firsts[segments[1]], segments[2], segments[3], 1, &q),
            "kstage_adios2_read_step: a query");
      return q;
    }
    if (positions.empty()) return Query(stage, all()).release();
    return Query(stage, at(positions)).release();
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
  kstage_query_t deletions = 0;     // the prims that lost it
  AdoptedValues* values = nullptr;  // fixed-size: the values, until handed to the stage
  kstage_map_t map = 0;   // ... or a map of a GPU column, filled by ADIOS2, until unmapped
  DLDevice map_device{};  // ... the GPU of that map's buffer
  ~Incoming() {
    if (values) AdoptedValues::deleter(&values->managed);  // never handed over
    // Never committed: nothing written. ADIOS2's copies into the map's buffer may still be in
    // flight on the legacy default stream (a copy from pageable memory returns once staged):
    // the buffer is freed after them.
    if (map && kstage_release_map_after(stage, map, kstage_device_sync_t{1, 0}) != KSTAGE_OK)
      kstage_release_map(stage, map);
    if (query) kstage_query_release(stage, query);
    if (deletions) kstage_query_release(stage, deletions);
  }
};

// A query of no prims (the caller's to release: a Query).
kstage_query_t empty_query(kstage_stage_t stage) {
  static const kstage_path_t none = 0;
  kstage_query_t q = 0;
  check(kstage_query_paths(stage, &none, 0, &q), "kstage_adios2_read_step: an empty query");
  return q;
}

// A map of the attribute's prims at its floor (a new column: where the stage makes it).
kstage_map_t map_values(kstage_stage_t stage, kstage_query_t query, const AttributeIn& a,
                        const char* what = "kstage_adios2_read_step: a map") {
  kstage_map_desc_t md = kstage_map_desc_init();
  md.attribute = a.token;
  md.dtype = a.dtype;
  md.semantic = a.semantic;
  md.is_array = a.is_array;
  md.prim_mode = KSTAGE_PRIM_MODE_UPSERT;
  kstage_map_t map = 0;
  check(kstage_map_attribute(stage, query, &md, a.floor, nullptr, 0, &map), what);
  return map;
}

// The device a fixed-size attribute's column is on: the existing column's, or -- asked with a
// map of no prims, never committed -- where the stage makes a new one.
DLDevice column_device(kstage_stage_t stage, const AttributeIn& a) {
  if (a.column_exists) return a.residency;
  const Query q(stage, empty_query(stage));
  const kstage_map_t map = map_values(stage, q.q, a);
  kstage_map_group_info_t g{};
  const kstage_status_t st = kstage_fetch_map_next(stage, map, KSTAGE_TIMEOUT_INFINITE, &g);
  const DLDevice device =
      st == KSTAGE_OK && g.data.tensor_count > 0 ? g.data.tensors[0].device : DLDevice{kDLCPU, 0};
  kstage_release_map(stage, map);
  return device;
}

// A fixed-size attribute's values read by ADIOS2 into the one GPU buffer of a map -- in prim
// order, so no index map -- of a column on a GPU this ADIOS2 takes memory of; false (nothing
// read, the map released) when the column is elsewhere or its map's rows are not in prim order.
bool read_fixed_values_to_device(Reader& r, Incoming& in) {
  AttributeIn& a = *in.a;
  if (!r.device_memory || !takes_device_memory(column_device(in.stage, a))) {
    if (a.column_exists && a.residency.device_type != kDLCPU)  // the device path not taken
      note(KSTAGE_LOG_INFO,
           "kstage_adios2_read_step: attribute '%s' on %s device %d comes through host memory: "
           "%s",
           a.name.c_str(), device_type_text(a.residency.device_type).c_str(),
           int(a.residency.device_id),
           !kTakesDeviceMemory ? "this ADIOS2 was built without GPU support"
           : !r.device_memory  ? "the stream's engine takes no device buffers"
                               : "this ADIOS2 takes no memory of that device");
    return false;
  }
  in.map = map_values(in.stage, in.query, a);
  kstage_map_group_info_t g{};
  check(kstage_fetch_map_next(in.stage, in.map, KSTAGE_TIMEOUT_INFINITE, &g),
        "kstage_adios2_read_step: a map's group");
  if (g.data.index_map != nullptr || g.data.tensor_count != 1 || g.prim_count != a.rows ||
      !takes_device_memory(g.data.tensors[0].device)) {  // a whole column's rows in another order
    kstage_release_map(in.stage, in.map);
    in.map = 0;
    return false;
  }
  in.map_device = g.data.tensors[0].device;
  void* out = static_cast<unsigned char*>(g.data.tensors[0].data) + g.data.tensors[0].byte_offset;
  try {
    with_element_type(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      adios2::Variable<T> v = r.io.InquireVariable<T>(layout::attr(a.name, "values"));
      read_rows(r, v, a.first_row, a.rows, static_cast<T*>(out), Space::Device);
    });
  } catch (...) {  // the map's buffer kept until the stream closes (Reader::parked)
    const kstage_stage_t stage = in.stage;
    const kstage_map_t map = in.map;
    in.map = 0;
    try {
      r.parked.push_back(std::shared_ptr<void>(nullptr, [stage, map](void*) {
        if (kstage_release_map_after(stage, map, kstage_device_sync_t{1, 0}) != KSTAGE_OK)
          kstage_release_map(stage, map);
      }));
    } catch (...) {  // no memory to keep it: left open rather than freed under ADIOS2's read
    }
    throw;
  }
  return true;
}

void read_fixed_values(Reader& r, Incoming& in) {
  if (read_fixed_values_to_device(r, in)) return;
  AttributeIn& a = *in.a;
  in.values = AdoptedValues::make(a.dtype, a.rows);
  try {
    with_element_type(a.dtype, [&](auto tag) {
      using T = decltype(tag);
      adios2::Variable<T> v = r.io.InquireVariable<T>(layout::attr(a.name, "values"));
      read_rows(r, v, a.first_row, a.rows, static_cast<T*>(in.values->block));
    });
  } catch (...) {  // the values kept until the stream closes (Reader::parked)
    AdoptedValues* values = in.values;
    in.values = nullptr;
    try {
      r.parked.push_back(std::shared_ptr<void>(values, [](void* v) {
        AdoptedValues::deleter(&static_cast<AdoptedValues*>(v)->managed);
      }));
    } catch (...) {  // no memory to keep them: leaked rather than freed under ADIOS2's read
    }
    throw;
  }
  check_values(a, in.values->block);
}

// A column the step records with no prim holding it (its prims deleted, or never sealed any):
// made with its schema by a map of no prims at its floor, where the stage has no such column --
// a restored stage accepts and refuses what the original did. (A floor of 0 has nothing sealed
// to write at.)
void make_empty_column(kstage_stage_t stage, const AttributeIn& a) {
  if (a.floor == 0 || find_column(stage, a.token, Schema{a.is_array, a.dtype, a.semantic}, nullptr))
    return;
  // A map of no prims, its one (empty) group fetched and committed: a write of no rows, which
  // a kstage_write_attribute of an array attribute cannot express (it takes a tensor per row).
  const Query q(stage, empty_query(stage));
  const kstage_map_t map = map_values(stage, q.q, a, "kstage_adios2_read_step: an empty column");
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

// The path ids of a query's prims.
std::vector<kstage_path_t> ids_of(kstage_stage_t stage, kstage_query_t query) {
  kstage_path_list_t list = 0;
  check(kstage_query_get_paths(stage, query, &list), "kstage_adios2_read_step: a query's paths");
  const kstage_path_t* ids = nullptr;
  uint64_t n = 0;
  const kstage_status_t st = kstage_path_list_get(stage, list, &ids, &n);
  std::vector<kstage_path_t> out;
  if (st == KSTAGE_OK) out.assign(ids, ids + n);
  kstage_path_list_release(stage, list);
  check(st, "kstage_adios2_read_step: a query's paths");
  return out;
}

// Before anything is committed: no prim the step writes in one schema holds the attribute
// (sealed) in another, unless the step deletes it there -- the step's commits would otherwise
// stop half-way at the stage's refusal. Free for an attribute whose only column is the step's.
void check_schema_moves(kstage_stage_t stage, const std::vector<Incoming>& incoming) {
  for (const Incoming& in : incoming) {
    const AttributeIn& a = *in.a;
    if (a.count == 0 || !in.query) continue;
    kstage_attribute_info_t info = kstage_attribute_info_init();
    const kstage_status_t st = kstage_attribute_info(stage, a.token, &info);
    if (st == KSTAGE_NOT_FOUND) continue;
    check(st, "kstage_adios2_read_step");
    const Schema mine{a.is_array, a.dtype, a.semantic};
    if (info.schema_count == 1 && a.column_exists) continue;
    // The prims this step deletes the attribute from, in any schema.
    std::vector<kstage_path_t> deleted;
    for (const Incoming& other : incoming)
      if (other.a->token == a.token && other.deletions) {
        const std::vector<kstage_path_t> d = ids_of(stage, other.deletions);
        deleted.insert(deleted.end(), d.begin(), d.end());
      }
    std::sort(deleted.begin(), deleted.end());
    kstage_read_desc_t rd = kstage_read_desc_init();
    rd.target_device = DLDevice{kDLCPU, 0};
    kstage_read_t r = 0;
    check(kstage_read_attributes(stage, in.query, &a.token, 1, &rd, &r),
          "kstage_adios2_read_step: the stage's schemas");
    kstage_read_group_t g{};
    std::string clash;
    while (clash.empty() && kstage_fetch_read_next(stage, r, 0, &g) == KSTAGE_OK) {
      const Schema held{g.is_array, g.dtype, g.semantic};
      if (held != mine)
        for (uint64_t i = 0; i < g.prim_count && clash.empty(); ++i)
          if (!std::binary_search(deleted.begin(), deleted.end(), g.prims[i])) {
            const char* path = nullptr;
            size_t length = 0;
            kstage_path_string(stage, g.prims[i], &path, &length);
            clash =
                std::string(path ? path : "?", path ? length : 1) + "' holds it as " + held.text();
          }
      kstage_release_group(stage, g.handle);
    }
    kstage_release_read(stage, r);
    if (!clash.empty())
      fail(KSTAGE_INVALID_ARGUMENT,
           "attribute '%s' of the step is %s, but prim '%s, which the step does not delete: a "
           "prim holds one value per attribute",
           a.attribute.c_str(), mine.text().c_str(), clash.c_str());
  }
}

// The attribute's deletions at its recorded floor. Every deletion of the step is committed
// before any value: read from several writers' blocks, a prim that moved between them in this
// step is deleted in one block and written in another, and a prim that moved to another schema
// is deleted in the old one's column and written in the new one's -- the write, submitted after
// the deletion at the same ordinal, wins.
void commit_deletions(Incoming& in) {
  const AttributeIn& a = *in.a;
  if (!in.deletions) return;
  kstage_op_t op = 0;
  check(kstage_delete_attributes(in.stage, in.deletions, &a.token, 1, a.floor, &op),
        "kstage_adios2_read_step: a deletion");
  finish(in.stage, op, "kstage_adios2_read_step: a deletion");
}

// The attribute's values at its recorded floor (after every deletion of the step).
void commit_values(Incoming& in) {
  const kstage_stage_t stage = in.stage;
  const AttributeIn& a = *in.a;
  if (a.count == 0) {
    make_empty_column(stage, a);
    return;
  }
  if (in.map) {
    // ADIOS2 copied into the map's buffer on the legacy default stream: the stage's seal of it
    // waits for that stream.
    kstage_op_t op = 0;
    check(kstage_unmap_attribute(stage, in.map, kstage_device_sync_t{1, 0}, &op),
          "kstage_adios2_read_step: a write");
    in.map = 0;  // committed (on failure the map stays open: released with `in`)
    finish(stage, op, "kstage_adios2_read_step: a write");
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
    check(
        kstage_write_attribute(stage, in.query, a.token, a.floor, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
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
    tensors[i] = DLTensor{const_cast<unsigned char*>(a.values.data()) + a.offsets[i] * elem,
                          DLDevice{kDLCPU, 0},
                          1,
                          a.dtype,
                          &shapes[i],
                          nullptr,
                          0};
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

extern "C" kstage_status_t kstage_adios2_read_step(kstage_adios2_stream_t stream,
                                                   kstage_stage_t stage, uint64_t timeout_ns,
                                                   uint64_t* ordinal) {
  return guard([&] {
    std::shared_ptr<Stream> s = find_stream(stream);
    std::lock_guard lock(s->mutex);
    Collective& ranks = *s->ranks;
    adios2::IO& io = s->io;
    adios2::Engine& e = s->engine;
    uint64_t step_ordinal = 0;
    Blocks blocks;
    StepPaths paths;
    paths.stage = stage;
    std::vector<AttributeIn> attrs;
    std::vector<Incoming> incoming;
    // The arguments, on every rank before ADIOS2's collective BeginStep; then this rank's part,
    // up to every value read and every query made; then, every rank ready, the commits.
    agree(ranks, "kstage_adios2_read_step", [&] {
      if (s->mode != KSTAGE_ADIOS2_READ)
        fail(KSTAGE_INVALID_ARGUMENT, "stream %llu is a writer", (unsigned long long)stream);
      if (ordinal == nullptr) fail(KSTAGE_INVALID_ARGUMENT, "ordinal is NULL");
      // A folder checked against its manifest at open: each file still at its size then (a
      // file cut since is refused here, not waited for inside ADIOS2's read).
      if (!s->verified_sizes.empty())
        check_extents(s->verified_folder, s->verified_sizes, "kstage_adios2_read_step");
    });
    agree(ranks, "kstage_adios2_read_step", [&] {
      const float timeout =
          timeout_ns == KSTAGE_TIMEOUT_INFINITE ? -1.0f : float(double(timeout_ns) * 1e-9);
      const adios2::StepStatus status = e.BeginStep(adios2::StepMode::Read, timeout);
      if (status == adios2::StepStatus::EndOfStream)
        fail(KSTAGE_END_OF_ITERATION, "the stream has no more steps");
      if (status == adios2::StepStatus::NotReady)
        fail(KSTAGE_TIMEOUT, "the stream's next step is not ready");
      if (status != adios2::StepStatus::OK)
        fail(KSTAGE_OP_FAILED, "ADIOS2 could not begin the step");
      s->step_open = true;
      test_hook_cut_before_read();  // (tests: a file cut past every check made before the step)
      struct EndStep {              // every step begun is ended, also when it does not fit
        Stream& s;
        ~EndStep() {
          if (s.step_open) {
            s.step_open = false;
            try {
              s.engine.EndStep();
            } catch (...) {
              note_swallowed("kstage_adios2_read_step: ending the step after a failure");
            }
          }
        }
      } end{*s};

      // The format, the step's ordinal, the blocks this rank reads, their paths.
      adios2::Attribute<std::string> format = io.InquireAttribute<std::string>(kFormat);
      if (!format || format.Data().empty() || format.Data().front() != "kstage")
        fail(KSTAGE_INVALID_ARGUMENT,
             "not a kstage step: it has no '%s' attribute saying \"kstage\"", kFormat);
      adios2::Attribute<uint32_t> version = io.InquireAttribute<uint32_t>(kFormatVersion);
      if (!version || version.Data().empty() || version.Data().front() != kVersion)
        fail(KSTAGE_INVALID_ARGUMENT,
             "a kstage step of format version %u; this kstage_adios2 reads version %u",
             version && !version.Data().empty() ? unsigned(version.Data().front()) : 0u,
             unsigned(kVersion));
      Reader reader{io, e, s->keeps_step_data, s->device_memory, s->parked_reads};
      step_ordinal = get_value<uint64_t>(reader, kOrdinal);
      const std::vector<uint64_t> table = get_block_table(reader, kBlocks, kBlockColumns, 0);
      blocks.writers = table.size() / kBlockColumns - 1;
      const uint64_t q = uint64_t(ranks.rank()), readers = uint64_t(ranks.size());
      blocks.b0 = blocks.writers * q / readers;
      blocks.b1 = blocks.writers * (q + 1) / readers;
      auto part = [&](BlockColumn c) {
        return span(table, kBlockColumns, c, blocks.b0, blocks.b1);
      };
      blocks.paths = part(kBlockPaths);
      if (get_value<uint64_t>(reader, kPathCount) !=
          table[blocks.writers * kBlockColumns + kBlockPaths])
        fail(KSTAGE_INVALID_ARGUMENT, "the step's path count and its block table differ");
      const Span runs = part(kBlockRuns), strings_in = part(kBlockStrings),
                 ranges = part(kBlockRanges);
      std::vector<uint64_t> segments =
          get_rows<uint64_t>(reader, kPathSegments, runs.start, runs.count, 4);
      const StringTable strings =
          get_table(reader, kPathStrings, strings_in, part(kBlockStringBytes));
      const std::vector<uint64_t> range_numbers =
          get_rows<uint64_t>(reader, kRangeNumbers, ranges.start, ranges.count, 2);
      const StringTable range_strings = get_table(
          reader, kRangeStrings, Span{2 * ranges.start, 2 * ranges.count}, part(kBlockRangeBytes));
      const StringTable names = get_whole_table(reader, kStepAttributes);
      // Every run is checked, and made to count from this rank's first string and range,
      // before anything is interned.
      uint64_t listed = 0;
      for (size_t i = 0; i < segments.size(); i += 4) {
        uint64_t& a = segments[i + 1];
        const uint64_t kind = segments[i], b = segments[i + 2], c = segments[i + 3];
        const Span& own = kind == 0 ? strings_in : ranges;
        if (kind > 1 || a < own.start)
          fail(KSTAGE_INVALID_ARGUMENT, "path run %zu of the step is out of its tables' bounds",
               i / 4);
        a -= own.start;
        if (kind == 0 ? (a > strings.size() || b > strings.size() - a)
                      : a >= range_numbers.size() / 2 || b > range_numbers[2 * a + 1] ||
                            c > range_numbers[2 * a + 1] - b)
          fail(KSTAGE_INVALID_ARGUMENT, "path run %zu of the step is out of its tables' bounds",
               i / 4);
        listed += kind == 0 ? b : c;
      }
      if (listed != blocks.paths.count)
        fail(KSTAGE_INVALID_ARGUMENT,
             "the step's path runs hold %llu paths, its block table says %llu",
             (unsigned long long)listed, (unsigned long long)blocks.paths.count);
      attrs.resize(names.size());
      for (size_t i = 0; i < attrs.size(); ++i) {
        attrs[i].name = names.at(i);
        read_attribute(reader, attrs[i], blocks);
      }
      for (AttributeIn& a : attrs) check_fits(stage, a);

      // The paths (ranges as ranges), then each attribute's values read where they go.
      paths.segments = std::move(segments);
      paths.count = blocks.paths.count;
      paths.intern(strings, range_numbers, range_strings);
      incoming.resize(attrs.size());
      for (size_t i = 0; i < attrs.size(); ++i) {
        Incoming& in = incoming[i];
        in.stage = stage;
        in.a = &attrs[i];
        if (attrs[i].deleted_count > 0) in.deletions = paths.query(attrs[i].deleted);
        if (attrs[i].count == 0) continue;
        in.query = paths.query(attrs[i].prims);
        if (!attrs[i].is_array) read_fixed_values(reader, in);
      }
      check_schema_moves(stage, incoming);  // (every rank agrees before any commits)
      s->step_open = false;
      e.EndStep();  // every value is in
      // ADIOS2 copied values into GPU maps itself and does not check its copies' errors (#52,
      // defect 7): each such device is synchronised and checked through the stage before
      // anything is committed, naming the step.
      for (const Incoming& in : incoming) {
        if (in.map == 0) continue;
        const DLDevice dev = in.map_device;
        const kstage_status_t st = kstage_device_check(stage, dev);
        if (st != KSTAGE_OK)
          fail(st,
               "kstage_adios2_read_step: the step of ordinal %llu: %s device %d faulted around "
               "ADIOS2's copies into attribute '%s'; nothing of the step is committed: %s",
               (unsigned long long)step_ordinal, device_type_text(dev.device_type).c_str(),
               int(dev.device_id), in.a->attribute.c_str(), kstage_last_error());
      }
    });
    // Every rank's values in: the deletions and values committed, then the floors.
    for (Incoming& in : incoming) commit_deletions(in);
    for (Incoming& in : incoming) commit_values(in);
    for (const AttributeIn& a : attrs)  // (floor 0: none of this rank's writers had a column of it)
      if (a.floor > 0)
        check(kstage_advance_write_floor(stage, a.floor, &a.token, 1),
              "kstage_adios2_read_step: sealing");
    *ordinal = step_ordinal;
  });
}
