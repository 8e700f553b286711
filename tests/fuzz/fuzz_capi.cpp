// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the kstage C API (include/kstage/kstage.h).
//
// The input bytes are decoded (FuzzedDataProvider) into a sequence of C API calls on one
// stage "A": interning odd/long/invalid strings, path lists, queries (paths and filters),
// writes with arbitrary DLTensor descriptors (ndim, shapes, strides incl. huge/negative,
// byte_offset, dtypes incl. invalid, devices), index maps, masks, counts, prim modes,
// ordinals (0, UINT64_MAX), batched writes, managed (DLManagedTensorVersioned) writes,
// deletes, seals, every kind of read, group fetch/release/export (versioned and legacy),
// map/fetch/unmap/release with element counts, map group exports, bad struct_size values,
// stale/garbage/foreign/double-released handles, destroy.
//
// Memory handed to kstage is always as large as the descriptor claims wherever the header
// says kstage reads it, except in cases kstage must reject before reading (overflowing
// layouts, tensor_count != 1 on a fixed-size write, ...): those get a minimal buffer, so an
// out-of-bounds read there is kstage's bug.
//
// Oracles (abort() with "ORACLE FAILURE" on stderr), beyond ASan/UBSan/LSan:
//  1. A rejected call leaves the stage unchanged: every call accepted by A is replayed on a
//     twin stage "B" (ids match because both intern the same strings in the same order);
//     the sealed state of A and B (floors, existing prims, every attribute of every prim via
//     a compact read) is compared at checkpoints and at the end (before and after sealing
//     everything). B rejecting a call A accepted is a divergence too.
//  2. Each deleter runs exactly once: managed tensors handed in (counted per tensor, and
//     ASan-poisoned once deleted so later use is caught); exports handed out are deleted
//     exactly once by the fuzzer (some after the group's release, later seals or destroy),
//     and their data must be intact until then.
//  3. kstage_last_error() is set by every failing call (status not OK / END_OF_ITERATION),
//     and no call returns KSTAGE_INTERNAL or an unknown status; out-parameters are written
//     only on success; a handle known to be dead (released, of another kind, of the twin
//     stage, of a destroyed stage) is never accepted.
//  Plus: read groups keep their bytes until released (whatever is sealed meanwhile), group
//  layouts are consistent (index_map within the rows), a zero-copy group exports READ_ONLY,
//  map groups never claim more memory than could have been allocated.
//
// KSTAGE_FUZZ_TRACE=1 in the environment prints every call (use it on a minimised input).
#include <kstage/kstage.h>
#include <kstage/kstage_arrow.h>

#include <fuzzer/FuzzedDataProvider.h>
#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

// Huge allocations return NULL (kstage must turn them into KSTAGE_OUT_OF_MEMORY) instead of
// aborting; nothing legitimate here allocates more than 2 GiB.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Oracle failures and tracing

bool g_trace = false;

[[noreturn]] __attribute__((format(printf, 1, 2))) void oracle(const char* fmt, ...) {
  std::fprintf(stderr, "\n==kstage-fuzz== ORACLE FAILURE: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::abort();
}

__attribute__((format(printf, 1, 2))) void trace(const char* fmt, ...) {
  if (!g_trace) return;
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "[fuzz] ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
}

constexpr uint64_t kU64Max = UINT64_MAX;

// The last error is only written by failing calls, so a stale message from an earlier
// failure could hide a call that fails without one. Before each checked call on A, a failure
// with a unique message is provoked; after a failure, the message must have changed.
uint64_t g_marker_counter = 0;
std::string g_marker;

void arm_marker() {
  // A stage handle no stage ever has (never issued: the top bits name no handle kind in use).
  const uint64_t bogus = 0x7e00000000000000ull | (++g_marker_counter & 0xffffffffffull);
  const char* s = nullptr;
  kstage_status_t st = kstage_token_string(bogus, 1, &s, nullptr);
  if (st == KSTAGE_OK)
    oracle("kstage_token_string accepted the never-issued stage handle %llu",
           (unsigned long long)bogus);
  g_marker = kstage_last_error();
}

// Checks a status returned by kstage. `fn` names the call for messages.
kstage_status_t check_status(kstage_status_t st, const char* fn, bool armed) {
  if (st < KSTAGE_OK || st > KSTAGE_INTERNAL)
    oracle("%s returned %d, not a kstage_status_t", fn, int(st));
  if (st == KSTAGE_INTERNAL) oracle("%s returned KSTAGE_INTERNAL: %s", fn, kstage_last_error());
  if (st != KSTAGE_OK && st != KSTAGE_END_OF_ITERATION) {
    const char* e = kstage_last_error();
    if (e == nullptr || e[0] == '\0')
      oracle("%s failed with %s but kstage_last_error() is empty", fn, kstage_status_string(st));
    if (armed && g_marker == e)
      oracle("%s failed with %s but did not set kstage_last_error() (still '%s')", fn,
             kstage_status_string(st), e);
  }
  trace("%s -> %s%s%s", fn, kstage_status_string(st), st == KSTAGE_OK ? "" : ": ",
        st == KSTAGE_OK ? "" : kstage_last_error());
  return st;
}

#define CALL_A(fn, ...) (arm_marker(), check_status(fn(__VA_ARGS__), #fn, true))
#define CALL_B(fn, ...) check_status(fn(__VA_ARGS__), #fn " (twin)", false)

// A call A accepted must be accepted by the twin too.
void twin_ok(kstage_status_t b, const char* what) {
  if (b != KSTAGE_OK)
    oracle("divergence: %s was accepted by the stage but rejected by its twin (%s: %s)", what,
           kstage_status_string(b), kstage_last_error());
}

// ---------------------------------------------------------------------------------------------
// Byte helpers

uint64_t g_sink = 0;

// Reads every byte (ASan checks the memory is alive) and returns a checksum.
uint64_t touch(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  g_sink += h;
  return h;
}

void fill_pattern(void* p, size_t n, uint32_t seed) {
  unsigned char* b = static_cast<unsigned char*>(p);
  uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = static_cast<unsigned char>(x);
  }
}

size_t tuple_bytes(DLDataType t) { return size_t(t.bits / 8) * t.lanes; }

// ---------------------------------------------------------------------------------------------
// Managed tensors handed to kstage, and exports handed out by kstage

struct Managed {
  DLManagedTensorVersioned m{};
  DLManagedTensor l{};  // the legacy struct, when handed over as legacy_managed_tensors
  bool legacy = false;
  uint64_t handed_checksum = 0;  // legacy: the producer's bytes, which must never change
  std::vector<int64_t> shape, strides;
  std::vector<unsigned char> storage;
  int deleted = 0;
  bool has_deleter = false;  // (m is poisoned once deleted: never read it then)
  bool expect_once = true;   // false when the hand-over is ambiguous (must-reject descriptors)
  bool handed = false;
};

void managed_deleter(DLManagedTensorVersioned* self) {
  Managed* box = static_cast<Managed*>(self->manager_ctx);
  if (box == nullptr || &box->m != self) oracle("a managed deleter got a tensor it did not make");
  if (++box->deleted > 1)
    oracle("the deleter of managed tensor %p ran %d times", (void*)self, box->deleted);
  trace("managed deleter %p", (void*)self);
  // From now on kstage must not touch the tensor, its shape/strides or its memory.
  if (!box->storage.empty()) ASAN_POISON_MEMORY_REGION(box->storage.data(), box->storage.size());
  if (!box->shape.empty()) ASAN_POISON_MEMORY_REGION(box->shape.data(), box->shape.size() * 8);
  if (!box->strides.empty())
    ASAN_POISON_MEMORY_REGION(box->strides.data(), box->strides.size() * 8);
  ASAN_POISON_MEMORY_REGION(&box->m, sizeof(box->m));
}

// Legacy producers may consider their memory immutable (JAX does): the stage
// must never have written into it by the time it lets go.
void legacy_deleter(DLManagedTensor* self) {
  Managed* box = static_cast<Managed*>(self->manager_ctx);
  if (box == nullptr || &box->l != self) oracle("a legacy deleter got a tensor it did not make");
  if (++box->deleted > 1)
    oracle("the deleter of legacy tensor %p ran %d times", (void*)self, box->deleted);
  trace("legacy deleter %p", (void*)self);
  uint64_t h = 0;
  for (unsigned char c : box->storage) h = h * 31 + c;
  if (h != box->handed_checksum) oracle("the stage wrote into a legacy producer's memory");
  if (!box->storage.empty()) ASAN_POISON_MEMORY_REGION(box->storage.data(), box->storage.size());
  if (!box->shape.empty()) ASAN_POISON_MEMORY_REGION(box->shape.data(), box->shape.size() * 8);
  if (!box->strides.empty())
    ASAN_POISON_MEMORY_REGION(box->strides.data(), box->strides.size() * 8);
  ASAN_POISON_MEMORY_REGION(&box->l, sizeof(box->l));
}

void unpoison(Managed& box) {
  if (!box.storage.empty()) ASAN_UNPOISON_MEMORY_REGION(box.storage.data(), box.storage.size());
  if (!box.shape.empty()) ASAN_UNPOISON_MEMORY_REGION(box.shape.data(), box.shape.size() * 8);
  if (!box.strides.empty()) ASAN_UNPOISON_MEMORY_REGION(box.strides.data(), box.strides.size() * 8);
  ASAN_UNPOISON_MEMORY_REGION(&box.m, sizeof(box.m));
  ASAN_UNPOISON_MEMORY_REGION(&box.l, sizeof(box.l));
}

// Reads every element of an exported tensor (through shape and strides).
uint64_t touch_dl(const DLTensor& t) {
  if (t.ndim < 1 || t.ndim > 4 || t.shape == nullptr)
    oracle("an export has ndim %d / shape %p", int(t.ndim), (const void*)t.shape);
  const size_t elem = tuple_bytes(t.dtype);
  int64_t total = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > (1 << 20))
      oracle("an export has shape[%d] = %lld", d, (long long)t.shape[d]);
    total *= t.shape[d];
  }
  if (total == 0) return 0;
  if (t.data == nullptr) oracle("an export of %lld elements has data NULL", (long long)total);
  if (total > (1 << 22)) oracle("an export of %lld elements", (long long)total);
  uint64_t h = 0;
  std::vector<int64_t> idx(size_t(t.ndim), 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[size_t(d)] * (t.strides ? t.strides[d] : 1);
    if (!t.strides) off = k;
    const unsigned char* p =
        static_cast<const unsigned char*>(t.data) + t.byte_offset + off * int64_t(elem);
    h = h * 31 + touch(p, elem);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.shape[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  return h;
}

struct Export {
  DLManagedTensorVersioned* v = nullptr;
  DLManagedTensor* legacy = nullptr;
  uint64_t checksum = 0;
  bool written = false;   // the fuzzer wrote through it: its bytes changed on purpose
  bool promised = false;  // legacy, under KSTAGE_EXPORT_CONSUMER_READS_ONLY: never written
};

const DLTensor& export_tensor(const Export& e) {
  return e.v ? e.v->dl_tensor : e.legacy->dl_tensor;
}

void drop_export(Export& e) {
  const uint64_t now = touch_dl(export_tensor(e));
  if (!e.written && now != e.checksum) oracle("an export's data changed before its deleter ran");
  trace("export deleter %p", e.v ? (void*)e.v : (void*)e.legacy);
  if (e.v) {
    if (e.v->deleter == nullptr) oracle("kstage_group_export gave a tensor without deleter");
    e.v->deleter(e.v);
  } else {
    if (e.legacy->deleter == nullptr)
      oracle("kstage_group_export_legacy gave a tensor without deleter");
    e.legacy->deleter(e.legacy);
  }
  e.v = nullptr;
  e.legacy = nullptr;
}

// ---------------------------------------------------------------------------------------------
// Write descriptors: decoded once, materialised per stage

struct TensorSpec {
  int32_t ndim = 1;
  std::vector<int64_t> shape;
  bool has_strides = false;
  std::vector<int64_t> strides;
  DLDataType dtype{kDLFloat, 32, 1};
  DLDevice device{kDLCPU, 0};
  uint64_t byte_offset = 0;
  bool null_data = false, null_shape = false;
  bool tiny = false;  // layout overflows: kstage must reject it, so it gets a minimal buffer
  uint32_t seed = 0;
  // managed only
  uint64_t flags = 0;
  uint32_t version_major = DLPACK_MAJOR_VERSION;
  bool no_deleter = false;
  bool null_entry = false;  // managed_tensors[i] = NULL
};

struct DescSpec {
  uint32_t struct_size = sizeof(kstage_write_data_t);
  size_t nonzero_extra = 0;  // 1-based byte past sizeof set to non-zero (0: none)
  int reserved_index = -1;
  uint8_t attribute_mode = 0;  // REJECT; now and then FORCE, or a value that is neither
  kstage_semantic_t semantic = 0;
  bool managed = false, set_both = false, set_neither = false;
  bool legacy = false;  // managed, through legacy_managed_tensors
  std::vector<TensorSpec> tensors;
  uint64_t tensor_count = 1;  // as claimed (may exceed tensors.size() only for must-reject)
  uint64_t count = 0;
  bool use_index_map = false, use_mask = false, null_index_map = false;
  std::vector<uint32_t> index_map;
  std::vector<uint64_t> mask;
  bool is_array = false;
  uint32_t duplicate_managed = 0;  // managed_tensors[1] = managed_tensors[0] when possible
};

struct WriteSpec {
  std::vector<DescSpec> descs;
  uint64_t n = 1;
  bool null_data = false;
  uint32_t stride_size = sizeof(kstage_write_data_t);  // how the array is laid out
};

// kstage's first write-descriptor layout had 80 bytes (no legacy_managed_tensors).
constexpr uint32_t kFirstWriteDataSize = 80;
// A struct_size kstage.h accepts, which kstage reads the descriptor by (and strides an array
// by): from the first layout to KSTAGE_MAX_STRUCT_SIZE, aligned or not.
bool valid_write_struct_size(uint32_t s) {
  return s >= kFirstWriteDataSize && s <= KSTAGE_MAX_STRUCT_SIZE;
}
// Where the 0.2 layout's legacy_managed_tensors ends: a caller whose struct reaches it has the
// field.
constexpr size_t kLegacyFieldEnd =
    offsetof(kstage_write_data_t, legacy_managed_tensors) + sizeof(void*);

// Everything one materialised call owns.
struct Materialised {
  std::vector<std::vector<unsigned char>> buffers;
  std::vector<std::vector<DLTensor>> tensors;                        // per descriptor
  std::vector<std::vector<DLManagedTensorVersioned*>> managed_ptrs;  // per descriptor
  std::vector<std::vector<DLManagedTensor*>> legacy_ptrs;            // per descriptor
  std::vector<std::vector<int64_t>> shapes;
  std::vector<unsigned char> raw;  // the descriptor array
  std::vector<Managed*> boxes;     // handed over by this call
};

enum class Span { Fits, Overflow, TooBig };

// The bytes a tensor descriptor covers, relative to data + byte_offset: [lo, lo + span).
// Overflow: no memory can back it (kstage must reject it); TooBig: valid but over 1 MiB.
Span layout_span(int32_t ndim, const std::vector<int64_t>& shape, const int64_t* strides,
                 size_t elem, int64_t& lo, size_t& span) {
  lo = 0;
  span = 0;
  if (ndim < 1 || ndim > 8 || size_t(ndim) > shape.size()) return Span::Overflow;
  uint64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    if (shape[size_t(d)] < 0) return Span::Overflow;
    if (__builtin_mul_overflow(total, uint64_t(shape[size_t(d)]), &total)) return Span::Overflow;
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(total, uint64_t(elem), &bytes)) return Span::Overflow;
  if (total == 0) return Span::Fits;
  int64_t hi = 0;
  for (int d = 0; d < ndim; ++d) {
    int64_t st = 1;
    if (strides) st = strides[d];
    else
      for (int e = d + 1; e < ndim; ++e)
        if (__builtin_mul_overflow(st, shape[size_t(e)], &st)) return Span::Overflow;
    int64_t off;
    if (__builtin_mul_overflow(shape[size_t(d)] - 1, st, &off) ||
        __builtin_mul_overflow(off, int64_t(elem), &off))
      return Span::Overflow;
    if (off < 0 ? __builtin_add_overflow(lo, off, &lo) : __builtin_add_overflow(hi, off, &hi))
      return Span::Overflow;
  }
  int64_t width;
  if (__builtin_sub_overflow(hi, lo, &width) || width > (1 << 20) || bytes > (1u << 20))
    return Span::TooBig;
  span = size_t(width) + elem;
  return Span::Fits;
}

void materialise_tensor(const TensorSpec& ts, DLTensor& t, std::vector<unsigned char>& storage,
                        std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
  shape = ts.shape;
  strides = ts.strides;
  t = DLTensor{};
  t.ndim = ts.ndim;
  t.dtype = ts.dtype;
  t.device = ts.device;
  t.shape = ts.null_shape ? nullptr : shape.data();
  t.strides = ts.has_strides ? strides.data() : nullptr;
  t.byte_offset = ts.byte_offset;
  const size_t elem = std::max<size_t>(tuple_bytes(ts.dtype), 1);
  int64_t lo = 0;
  size_t span = 64;  // must-reject layouts: anything kstage reads past this is its bug
  if (!ts.tiny) {
    if (layout_span(ts.ndim, shape, t.strides, elem, lo, span) != Span::Fits)
      oracle("fuzzer bug: a tensor layout that is not backed by memory");
  }
  storage.assign(span + 16, 0);
  fill_pattern(storage.data(), storage.size(), ts.seed);
  if (ts.null_data) {
    t.data = nullptr;
  } else {
    // data + byte_offset + lo == storage start.
    uintptr_t base = reinterpret_cast<uintptr_t>(storage.data()) - uintptr_t(lo) - ts.byte_offset;
    t.data = reinterpret_cast<void*>(base);
  }
}

// ---------------------------------------------------------------------------------------------
// Fuzzer state (one per input)

struct Pair {
  uint64_t h[2] = {0, 0};
  bool live = false;
  uint64_t prims = 0;  // queries: prim count; lists: length
};

struct MapGroupRec {
  uint64_t h[2] = {0, 0};
  kstage_map_group_info_t info[2]{};
  bool mapped = true;
};

struct MapRec {
  uint64_t h[2] = {0, 0};
  bool live = false;
  std::vector<MapGroupRec> groups;
};

struct GroupRec {
  kstage_group_t h = 0;
  kstage_read_group_t g{};
  bool live = false;
  bool zero_copy = false;
  bool dirty = false;  // written through a writable export
  uint64_t checksum = 0;
};

struct ReadRec {
  kstage_read_t h = 0;
  bool live = false;
  bool zero_copy = false;
  bool progression = false;  // read with prims_as_progression: a group's prims may be NULL
};

struct Schema {
  bool known = false;
  bool is_array = false;
  DLDataType dtype{kDLFloat, 32, 1};
  kstage_semantic_t semantic = 0;
};

struct State {
  FuzzedDataProvider& in;
  kstage_stage_t stage[2] = {0, 0};
  bool alive = false;
  std::vector<kstage_stage_t> dead_stages;
  std::vector<kstage_token_t> tokens;
  std::vector<Schema> schemas;  // per tokens[i]
  std::vector<kstage_path_t> paths;
  std::vector<Pair> lists, queries, ops;
  std::vector<MapRec> maps;
  std::vector<ReadRec> reads;
  std::vector<GroupRec> groups;
  std::vector<uint64_t> dead_handles;  // released or of a destroyed stage (A side)
  std::vector<Export> exports;
  std::vector<std::unique_ptr<Managed>> boxes;
  uint64_t ord = 0;  // highest ordinal sealed by the fuzzer
  uint32_t seed = 1;

  explicit State(FuzzedDataProvider& p) : in(p) {}

  // -- picking ---------------------------------------------------------------------------------
  bool chance(unsigned percent) { return in.ConsumeIntegralInRange<unsigned>(0, 99) < percent; }

  uint64_t ordinal() {
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: return 0;
      case 1: return kU64Max;
      case 2: return kU64Max - 1;
      case 3: return ord;  // at the floor: a violation when sealed
      case 4: return in.ConsumeIntegral<uint64_t>();
      default: return ord + in.ConsumeIntegralInRange<uint64_t>(1, 4);
    }
  }

  uint64_t token_id() {
    if (!tokens.empty() && !chance(8))
      return tokens[in.ConsumeIntegralInRange<size_t>(0, tokens.size() - 1)];
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: return 0;
      case 1: return kU64Max;
      case 2: return paths.empty() ? 7 : paths[0];  // a path id used as a token
      default: return in.ConsumeIntegralInRange<uint64_t>(0, 64);
    }
  }
  int token_index_or_minus() {
    return tokens.empty() ? -1 : int(in.ConsumeIntegralInRange<size_t>(0, tokens.size() - 1));
  }
  uint64_t path_id() {
    if (!paths.empty() && !chance(8))
      return paths[in.ConsumeIntegralInRange<size_t>(0, paths.size() - 1)];
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: return 0;
      case 1: return kU64Max;
      default: return in.ConsumeIntegralInRange<uint64_t>(0, 64);
    }
  }

  // A handle known not to be live for any table of kind `mine` (`for_read`: nor a read).
  uint64_t garbage(const std::vector<Pair>* mine, bool for_read = false) {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: return 0;
      case 1: return kU64Max;
      case 2:
        if (!dead_handles.empty())
          return dead_handles[in.ConsumeIntegralInRange<size_t>(0, dead_handles.size() - 1)];
        return 0;
      case 3: {  // the twin's handle of a live entry (foreign stage)
        if (mine && !mine->empty()) {
          const Pair& p = (*mine)[in.ConsumeIntegralInRange<size_t>(0, mine->size() - 1)];
          if (p.h[1]) return p.h[1];
        }
        return stage[1];
      }
      case 4: {  // a live handle of another kind
        const std::vector<Pair>* tables[3] = {&lists, &queries, &ops};
        const std::vector<Pair>* t = tables[in.ConsumeIntegralInRange<int>(0, 2)];
        if (t != mine && !t->empty()) {
          const Pair& p = (*t)[in.ConsumeIntegralInRange<size_t>(0, t->size() - 1)];
          if (p.live) return p.h[0];
        }
        if (!for_read && !reads.empty() && reads.back().live) return reads.back().h;
        return stage[0];  // a stage is not a query/list/op/read/...
      }
      default: return dead_stages.empty() ? 0 : dead_stages.back();
    }
  }

  // Picks an entry of `table` (index, live or released), or -1 with `g` a garbage handle.
  int pick(std::vector<Pair>& table, uint64_t& g) {
    if (table.empty() || chance(6)) {
      g = garbage(&table);
      return -1;
    }
    return int(in.ConsumeIntegralInRange<size_t>(0, table.size() - 1));
  }

  void retire(uint64_t h) {
    if (h && dead_handles.size() < 256) dead_handles.push_back(h);
  }

  // -- stages ------------------------------------------------------------------------------------
  void create_stages() {
    kstage_config_t c = kstage_config_init();
    c.host_execution = in.ConsumeIntegralInRange<int>(0, 2);
    const bool null_config = chance(20);
    kstage_stage_t s = 0;
    kstage_status_t st = CALL_A(kstage_create, null_config ? nullptr : &c, &s);
    if (st != KSTAGE_OK)
      oracle("kstage_create failed with a valid config: %s", kstage_last_error());
    kstage_stage_t t = 0;
    twin_ok(CALL_B(kstage_create, null_config ? nullptr : &c, &t), "kstage_create");
    stage[0] = s;
    stage[1] = t;
    alive = true;
    trace("stages %llu / twin %llu", (unsigned long long)s, (unsigned long long)t);
  }

  void destroy_stages() {
    if (!alive) return;
    compare("before destroy");
    for (int side = 0; side < 2; ++side) {
      kstage_status_t st =
          side == 0 ? CALL_A(kstage_destroy, stage[0]) : CALL_B(kstage_destroy, stage[1]);
      if (st != KSTAGE_OK) oracle("kstage_destroy of a live stage failed: %s", kstage_last_error());
    }
    // Everything of these stages is dead now: remember the handles as garbage.
    for (auto& p : lists) retire(p.h[0]);
    for (auto& p : queries) retire(p.h[0]);
    for (auto& p : ops) retire(p.h[0]);
    for (auto& m : maps) retire(m.h[0]);
    for (auto& r : reads) retire(r.h);
    for (auto& g : groups) retire(g.h);
    lists.clear();
    queries.clear();
    ops.clear();
    maps.clear();
    reads.clear();
    groups.clear();
    tokens.clear();
    schemas.clear();
    paths.clear();
    dead_stages.push_back(stage[0]);
    dead_stages.push_back(stage[1]);
    alive = false;
    ord = 0;
    // A destroyed stage's handle stays dead.
    if (CALL_A(kstage_destroy, stage[0]) == KSTAGE_OK)
      oracle("kstage_destroy accepted a destroyed stage");
  }

  // -- oracle 1: the sealed state of both stages ----------------------------------------------
  std::string state_of(int side) {
    const kstage_stage_t s = stage[side];
    std::string out;
    auto num = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
    uint64_t f = 0;
    if (kstage_get_write_floor(s, 0, &f) != KSTAGE_OK)
      oracle("get_write_floor(0) failed: %s", kstage_last_error());
    num(f);
    for (kstage_token_t t : tokens) {
      if (kstage_get_write_floor(s, t, &f) != KSTAGE_OK)
        oracle("get_write_floor failed: %s", kstage_last_error());
      num(f);
    }
    kstage_filter_t all{};
    kstage_query_t q = 0;
    if (kstage_query_filter(s, &all, &q) != KSTAGE_OK)
      oracle("query_filter(all) failed: %s", kstage_last_error());
    kstage_path_list_t list = 0;
    const kstage_path_t* ids = nullptr;
    uint64_t n = 0;
    if (kstage_query_get_paths(s, q, &list) != KSTAGE_OK ||
        kstage_path_list_get(s, list, &ids, &n) != KSTAGE_OK)
      oracle("listing the prims failed: %s", kstage_last_error());
    out += "prims";
    num(n);
    for (uint64_t i = 0; i < n; ++i) num(ids[i]);
    kstage_path_list_release(s, list);
    if (!tokens.empty()) {
      kstage_read_desc_t d = kstage_read_desc_init();
      d.compact = true;
      kstage_read_t r = 0;
      kstage_status_t st = kstage_read_attributes(s, q, tokens.data(), tokens.size(), &d, &r);
      if (st != KSTAGE_OK)
        oracle("the compact read of every attribute failed: %s", kstage_last_error());
      for (;;) {
        kstage_read_group_t g{};
        st = kstage_fetch_read_next(s, r, 0, &g);
        if (st == KSTAGE_END_OF_ITERATION) break;
        if (st != KSTAGE_OK) oracle("fetch of the compact read failed: %s", kstage_last_error());
        out += "group";
        num(g.attribute);
        num(g.ordinal);
        num(g.prim_count);
        num(uint64_t(g.is_delete) | uint64_t(g.is_array) << 1 |
            uint64_t(uint32_t(g.semantic)) << 8);
        num(uint64_t(g.dtype.code) | uint64_t(g.dtype.bits) << 8 | uint64_t(g.dtype.lanes) << 16);
        if (g.prim_count && !g.prims) oracle("a group of a plain read with prims NULL");
        for (uint64_t i = 0; i < g.prim_count; ++i) num(g.prims[i]);
        check_group_layout(g, true);
        const size_t tb = tuple_bytes(g.dtype);
        if (!g.is_delete) {
          for (uint64_t i = 0; i < g.prim_count; ++i) {
            const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
            const DLTensor& t = g.is_array ? g.data.tensors[row] : g.data.tensors[0];
            const unsigned char* p = static_cast<const unsigned char*>(t.data) + t.byte_offset;
            size_t len = tb;
            if (g.is_array) len = size_t(t.shape[0]) * tb;
            else p += row * tb;
            num(len);
            if (len) out.append(reinterpret_cast<const char*>(p), len);
          }
        }
        kstage_release_group(s, g.handle);
      }
      kstage_release_read(s, r);
    }
    kstage_query_release(s, q);
    return out;
  }

  void compare(const char* when) {
    if (!alive) return;
    const std::string a = state_of(0), b = state_of(1);
    if (a != b)
      oracle(
          "the stage and its twin differ %s: a rejected call changed the stage (or an "
          "accepted one did not replay identically); %zu vs %zu state bytes",
          when, a.size(), b.size());
  }

  // Validates a read group's layout; with `read_bytes`, reads every value.
  void check_group_layout(const kstage_read_group_t& g, bool read_bytes) {
    if (g.prim_count != g.data.count)
      oracle("group prim_count %llu != data.count %llu", (unsigned long long)g.prim_count,
             (unsigned long long)g.data.count);
    // (A group read with prims_as_progression may have prims NULL: fetch_read checked it.)
    if (g.is_delete) {
      if (g.data.tensor_count != 0)
        oracle("tombstone group with %llu tensors", (unsigned long long)g.data.tensor_count);
      return;
    }
    if (g.data.mask) oracle("a read group has a mask");
    const size_t tb = tuple_bytes(g.dtype);
    if (!g.is_array) {
      if (g.data.tensor_count != 1 || !g.data.tensors)
        oracle("fixed-size group with %llu tensors", (unsigned long long)g.data.tensor_count);
      const DLTensor& t = g.data.tensors[0];
      if (t.ndim != 1 || !t.shape || t.dtype.lanes != g.dtype.lanes)
        oracle("fixed-size group tensor not canonical");
      for (uint64_t i = 0; i < g.prim_count; ++i) {
        const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
        if (int64_t(row) >= t.shape[0])
          oracle("group row %llu of prim %llu outside %lld rows", (unsigned long long)row,
                 (unsigned long long)i, (long long)t.shape[0]);
      }
      if (read_bytes && t.shape[0] > 0) {
        if (!t.data) oracle("group tensor data NULL");
        touch(static_cast<const unsigned char*>(t.data) + t.byte_offset, size_t(t.shape[0]) * tb);
      }
    } else {
      for (uint64_t i = 0; i < g.prim_count; ++i) {
        const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
        if (row >= g.data.tensor_count)
          oracle("array group row %llu outside %llu tensors", (unsigned long long)row,
                 (unsigned long long)g.data.tensor_count);
      }
      for (uint64_t r = 0; read_bytes && r < g.data.tensor_count; ++r) {
        const DLTensor& t = g.data.tensors[r];
        if (t.ndim != 1 || !t.shape || t.shape[0] < 0 || t.shape[0] > (1 << 24))
          oracle("array group tensor not canonical");
        if (t.shape[0] > 0)
          touch(static_cast<const unsigned char*>(t.data) + t.byte_offset, size_t(t.shape[0]) * tb);
      }
    }
  }

  uint64_t group_checksum(const kstage_read_group_t& g) {
    if (g.is_delete) return 0;
    uint64_t h = 0;
    const size_t tb = tuple_bytes(g.dtype);
    for (uint64_t r = 0; r < g.data.tensor_count; ++r) {
      const DLTensor& t = g.data.tensors[r];
      if (t.shape[0] > 0)
        h = h * 31 + touch(static_cast<const unsigned char*>(t.data) + t.byte_offset,
                           size_t(t.shape[0]) * tb);
    }
    return h;
  }

  // -- ops -------------------------------------------------------------------------------------
  std::string odd_string() {
    switch (in.ConsumeIntegralInRange<int>(0, 6)) {
      case 0: {  // a structured path
        std::string s;
        int depth = in.ConsumeIntegralInRange<int>(0, 4);
        static const char* parts[] = {"a", "b", "world", "body_17", "x y", "\xc3\xa9", ".", ".."};
        for (int i = 0; i < depth; ++i)
          s += std::string("/") + parts[in.ConsumeIntegralInRange<int>(0, 7)];
        return s.empty() ? "/" : s;
      }
      case 1: {  // a long path
        std::string s;
        int n = in.ConsumeIntegralInRange<int>(1, 600);
        for (int i = 0; i < n; ++i) s += "/c" + std::to_string(i % 7);
        return s;
      }
      case 2: return std::string(in.ConsumeIntegralInRange<size_t>(0, 5000), 'x');
      default: return in.ConsumeRandomLengthString(80);
    }
  }

  void op_intern(bool token) {
    std::string s = odd_string();
    if (!token && chance(50) && (s.empty() || s[0] != '/')) s.insert(s.begin(), '/');
    size_t len = s.size();
    const int lm = in.ConsumeIntegralInRange<int>(0, 5);
    if (lm == 0) len = KSTAGE_NUL_TERMINATED;
    else if (lm == 1 && len > 0) len = in.ConsumeIntegralInRange<size_t>(0, len);
    const bool null_str = chance(3);
    const bool null_out = chance(3);
    uint64_t id = 0xdeadbeef;
    const char* str = null_str ? nullptr : s.c_str();
    kstage_status_t st =
        token ? CALL_A(kstage_intern_token, stage[0], str, len, null_out ? nullptr : &id)
              : CALL_A(kstage_intern_path, stage[0], str, len, null_out ? nullptr : &id);
    if (st != KSTAGE_OK) {
      if (id != 0xdeadbeef) oracle("a failed intern wrote its out-parameter");
      return;
    }
    if (null_out) oracle("intern accepted a NULL out-parameter");
    uint64_t id2 = 0;
    twin_ok(token ? CALL_B(kstage_intern_token, stage[1], str, len, &id2)
                  : CALL_B(kstage_intern_path, stage[1], str, len, &id2),
            "intern");
    if (id != id2)
      oracle("interning '%s' gave id %llu on the stage but %llu on its twin", s.c_str(),
             (unsigned long long)id, (unsigned long long)id2);
    // Idempotent, and the string round-trips.
    const std::string used =
        len == KSTAGE_NUL_TERMINATED ? std::string(s.c_str()) : s.substr(0, len);
    uint64_t again = 0;
    const char* back = nullptr;
    size_t back_len = 0;
    if (token) {
      if (kstage_intern_token(stage[0], used.data(), used.size(), &again) != KSTAGE_OK ||
          again != id)
        oracle("re-interning token gave another id or failed");
      if (kstage_token_string(stage[0], id, &back, &back_len) != KSTAGE_OK)
        oracle("token_string failed");
    } else {
      if (kstage_intern_path(stage[0], used.data(), used.size(), &again) != KSTAGE_OK ||
          again != id)
        oracle("re-interning path gave another id or failed");
      if (kstage_path_string(stage[0], id, &back, &back_len) != KSTAGE_OK)
        oracle("path_string failed");
    }
    if (back_len != std::strlen(back))
      oracle("string length %zu but strlen %zu", back_len, std::strlen(back));
    if (used != back) oracle("'%s' reads back as '%s'", used.c_str(), back);
    std::vector<uint64_t>& v = token ? tokens : paths;
    if (std::find(v.begin(), v.end(), id) == v.end()) {
      v.push_back(id);
      if (token) schemas.emplace_back();
    }
  }

  void op_strings() {
    const char* s = nullptr;
    size_t len = 0;
    const bool tok = chance(50);
    const uint64_t id = tok ? token_id() : path_id();
    kstage_status_t st = tok ? CALL_A(kstage_token_string, stage[0], id, chance(5) ? nullptr : &s,
                                      chance(30) ? nullptr : &len)
                             : CALL_A(kstage_path_string, stage[0], id, chance(5) ? nullptr : &s,
                                      chance(30) ? nullptr : &len);
    if (st == KSTAGE_OK && s) touch(s, std::strlen(s) + 1);
  }

  void op_list_create() {
    std::vector<uint64_t> ids(in.ConsumeIntegralInRange<size_t>(0, 8));
    for (auto& id : ids) id = path_id();
    uint64_t n = ids.size();
    const bool null_ids = chance(5);
    if (null_ids && chance(50)) n = in.ConsumeIntegralInRange<uint64_t>(1, kU64Max);
    kstage_path_list_t l = 0xabc;
    kstage_status_t st =
        CALL_A(kstage_path_list_create, stage[0], null_ids ? nullptr : ids.data(), n, &l);
    if (st != KSTAGE_OK) {
      if (l != 0xabc) oracle("failed path_list_create wrote its out-parameter");
      return;
    }
    kstage_path_list_t l2 = 0;
    twin_ok(CALL_B(kstage_path_list_create, stage[1], null_ids ? nullptr : ids.data(), n, &l2),
            "path_list_create");
    Pair p;
    p.h[0] = l;
    p.h[1] = l2;
    p.live = true;
    p.prims = n;
    lists.push_back(p);
  }

  void op_list_use() {
    uint64_t g = 0;
    int i = pick(lists, g);
    const uint64_t ha = i < 0 ? g : lists[size_t(i)].h[0];
    const bool known_dead = i < 0 || !lists[size_t(i)].live;
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: {
        const kstage_path_t* ids = nullptr;
        uint64_t n = 0;
        kstage_status_t st = CALL_A(kstage_path_list_get, stage[0], ha, &ids, &n);
        if (st == KSTAGE_OK) {
          if (known_dead) oracle("path_list_get accepted a dead handle");
          if (n && !ids) oracle("path_list_get gave NULL ids");
          touch(ids, n * sizeof(uint64_t));
        }
        break;
      }
      case 1: {
        kstage_status_t st = CALL_A(kstage_path_list_retain, stage[0], ha);
        if (st == KSTAGE_OK) {
          if (known_dead) oracle("path_list_retain accepted a dead handle");
          twin_ok(CALL_B(kstage_path_list_retain, stage[1], lists[size_t(i)].h[1]),
                  "path_list_retain");
          lists[size_t(i)].prims += 1ull << 40;  // extra references (high bits)
        }
        break;
      }
      default: {
        kstage_status_t st = CALL_A(kstage_path_list_release, stage[0], ha);
        if (st == KSTAGE_OK) {
          if (known_dead) oracle("path_list_release accepted a dead handle");
          Pair& p = lists[size_t(i)];
          twin_ok(CALL_B(kstage_path_list_release, stage[1], p.h[1]), "path_list_release");
          if (p.prims >> 40) p.prims -= 1ull << 40;
          else {
            p.live = false;
            retire(p.h[0]);
          }
        }
      }
    }
  }

  void add_query(kstage_query_t a, kstage_query_t b) {
    uint64_t na = 0, nb = 0;
    if (kstage_query_count(stage[0], a, &na) != KSTAGE_OK ||
        kstage_query_count(stage[1], b, &nb) != KSTAGE_OK)
      oracle("query_count of a new query failed: %s", kstage_last_error());
    if (na != nb)
      oracle("divergence: a query has %llu prims on the stage, %llu on its twin",
             (unsigned long long)na, (unsigned long long)nb);
    Pair p;
    p.h[0] = a;
    p.h[1] = b;
    p.live = true;
    p.prims = na;
    queries.push_back(p);
  }

  void op_query_paths() {
    std::vector<uint64_t> ids(in.ConsumeIntegralInRange<size_t>(0, 12));
    for (auto& id : ids) id = path_id();
    if (!paths.empty() && chance(40)) {  // a clean prefix of the known paths
      ids.assign(paths.begin(), paths.begin() + long(in.ConsumeIntegralInRange<size_t>(
                                                    1, std::min<size_t>(paths.size(), 16))));
    }
    uint64_t n = ids.size();
    const bool null_ids = chance(4);
    if (null_ids && chance(50)) n = kU64Max;
    kstage_query_t q = 0x123;
    kstage_status_t st = CALL_A(kstage_query_paths, stage[0], null_ids ? nullptr : ids.data(), n,
                                chance(3) ? nullptr : &q);
    if (st != KSTAGE_OK) {
      if (q != 0x123) oracle("failed query_paths wrote its out-parameter");
      return;
    }
    kstage_query_t q2 = 0;
    twin_ok(CALL_B(kstage_query_paths, stage[1], null_ids ? nullptr : ids.data(), n, &q2),
            "query_paths");
    add_query(q, q2);
  }

  void op_query_filter() {
    std::vector<uint64_t> has(in.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& t : has) t = token_id();
    kstage_filter_t f[2]{};
    const bool null_has = chance(5);
    const uint64_t has_count = null_has && chance(50) ? 3 : has.size();
    const uint64_t prefix = chance(40) ? path_id() : 0;
    for (auto& x : f) {
      x.has_attributes = null_has ? nullptr : has.data();
      x.has_attribute_count = has_count;
      x.path_prefix = prefix;
    }
    int li = -1;
    uint64_t g = 0;
    if (chance(30)) {
      li = pick(lists, g);
      if (li < 0) f[0].path_in = g;
      else {
        f[0].path_in = lists[size_t(li)].h[0];
        f[1].path_in = lists[size_t(li)].h[1];
      }
    }
    kstage_query_t q = 0x123;
    kstage_status_t st = CALL_A(kstage_query_filter, stage[0], chance(3) ? nullptr : &f[0], &q);
    if (st != KSTAGE_OK) return;
    if (f[0].path_in && (li < 0 || !lists[size_t(li)].live))
      oracle("query_filter accepted a dead path list");
    kstage_query_t q2 = 0;
    twin_ok(CALL_B(kstage_query_filter, stage[1], &f[1], &q2), "query_filter");
    add_query(q, q2);
  }

  // A reserved name (kstage.h's scene names) as a token of both stages, interned in the same
  // order on each, so their ids match; not added to `tokens` (writes of them have rules of
  // their own, which op_write does not know).
  kstage_token_t reserved_token() {
    static const char* const kNames[] = {KSTAGE_PATH_ATTRIBUTE, KSTAGE_PARENT_ATTRIBUTE,
                                         KSTAGE_CHILDREN_ATTRIBUTE, KSTAGE_PRIM_TYPE,
                                         KSTAGE_APPLIED_SCHEMAS};
    const char* name = kNames[in.ConsumeIntegralInRange<size_t>(0, 4)];
    kstage_token_t a = 0, b = 0;
    if (kstage_intern_token(stage[0], name, KSTAGE_NUL_TERMINATED, &a) != KSTAGE_OK ||
        kstage_intern_token(stage[1], name, KSTAGE_NUL_TERMINATED, &b) != KSTAGE_OK || a != b)
      oracle("interning the reserved name '%s' failed or diverged", name);
    return a;
  }

  // kstage_query_filter_ex: 0-3 predicates of any operator (outside the enum too) on ordinary
  // tokens or reserved names, with path or token ids (or garbage) as values.
  void op_query_filter_ex() {
    const size_t n = in.ConsumeIntegralInRange<size_t>(0, 3);
    std::vector<kstage_predicate_t> preds(n);
    std::vector<std::vector<uint64_t>> values(n);
    for (size_t i = 0; i < n; ++i) {
      kstage_predicate_t& p = preds[i];
      p.op = in.ConsumeIntegralInRange<int32_t>(-1, 8);
      p.reserved = chance(5) ? 1 : 0;
      p.attribute = chance(60) ? reserved_token() : token_id();
      values[i].resize(in.ConsumeIntegralInRange<size_t>(0, 3));
      for (auto& v : values[i]) v = chance(50) ? path_id() : token_id();
      p.values = values[i].empty() || chance(5) ? nullptr : values[i].data();
      p.value_count = values[i].size();
    }
    kstage_filter_ex_t f = kstage_filter_ex_init();
    f.predicates = preds.empty() || chance(5) ? nullptr : preds.data();
    f.predicate_count = chance(5) ? 1 : preds.size();
    if (chance(5)) f.struct_size = chance(50) ? 0 : 23;  // (never more: kstage reads that many)
    kstage_query_t q = 0x123;
    kstage_status_t st = CALL_A(kstage_query_filter_ex, stage[0], chance(3) ? nullptr : &f, &q);
    if (st != KSTAGE_OK) {
      if (q != 0x123) oracle("a failed query_filter_ex wrote its out-parameter");
      return;
    }
    kstage_query_t q2 = 0;
    twin_ok(CALL_B(kstage_query_filter_ex, stage[1], &f, &q2), "query_filter_ex");
    add_query(q, q2);
  }

  // kstage_query_hierarchy over a query (live, dead or garbage) with any relation; the answer's
  // CSR is checked and compared with the twin's.
  void op_hierarchy() {
    uint64_t g = 0;
    int i = pick(queries, g);
    const uint64_t ha = i < 0 ? g : queries[size_t(i)].h[0];
    const bool known_dead = i < 0 || !queries[size_t(i)].live;
    const int32_t relation = in.ConsumeIntegralInRange<int32_t>(-1, 3);
    kstage_hierarchy_t h = 0x123;
    if (CALL_A(kstage_query_hierarchy, stage[0], ha, relation, chance(3) ? nullptr : &h) !=
        KSTAGE_OK) {
      if (h != 0x123) oracle("a failed query_hierarchy wrote its out-parameter");
      return;
    }
    if (known_dead) oracle("query_hierarchy accepted a dead query");
    kstage_hierarchy_t h2 = 0;
    twin_ok(CALL_B(kstage_query_hierarchy, stage[1], queries[size_t(i)].h[1], relation, &h2),
            "query_hierarchy");
    const kstage_hierarchy_item_t* items[2] = {nullptr, nullptr};
    const kstage_path_span_t* spans[2] = {nullptr, nullptr};
    uint64_t ni[2] = {0, 0}, ns[2] = {0, 0};
    if (kstage_hierarchy_get(stage[0], h, &items[0], &ni[0], &spans[0], &ns[0]) != KSTAGE_OK ||
        kstage_hierarchy_get(stage[1], h2, &items[1], &ni[1], &spans[1], &ns[1]) != KSTAGE_OK)
      oracle("hierarchy_get of a new answer failed: %s", kstage_last_error());
    if (ni[0] != queries[size_t(i)].prims || ni[0] != ni[1] || ns[0] != ns[1])
      oracle("hierarchy answer: %llu items, %llu spans; twin %llu, %llu; query %llu prims",
             (unsigned long long)ni[0], (unsigned long long)ns[0], (unsigned long long)ni[1],
             (unsigned long long)ns[1], (unsigned long long)queries[size_t(i)].prims);
    uint64_t next = 0;
    for (uint64_t k = 0; k < ni[0]; ++k) {
      const kstage_hierarchy_item_t& it = items[0][k];
      if (it.span_offset != next || it.span_offset + it.span_count > ns[0] ||
          std::memcmp(&it, &items[1][k], sizeof it) != 0)
        oracle("hierarchy item %llu is inconsistent or differs from the twin's",
               (unsigned long long)k);
      next += it.span_count;
    }
    if (ns[0] > 0 && std::memcmp(spans[0], spans[1], size_t(ns[0]) * sizeof(kstage_path_span_t)))
      oracle("hierarchy spans differ from the twin's");
    if (CALL_A(kstage_hierarchy_release, stage[0], h) != KSTAGE_OK ||
        CALL_B(kstage_hierarchy_release, stage[1], h2) != KSTAGE_OK)
      oracle("hierarchy_release failed");
    if (CALL_A(kstage_hierarchy_release, stage[0], h) != KSTAGE_INVALID_HANDLE)
      oracle("a released hierarchy was released again");
  }

  void op_query_use() {
    uint64_t g = 0;
    int i = pick(queries, g);
    const uint64_t ha = i < 0 ? g : queries[size_t(i)].h[0];
    const bool known_dead = i < 0 || !queries[size_t(i)].live;
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: {
        uint64_t n = 0;
        if (CALL_A(kstage_query_count, stage[0], ha, &n) == KSTAGE_OK) {
          if (known_dead) oracle("query_count accepted a dead handle");
          if (n != queries[size_t(i)].prims) oracle("query_count changed");
        }
        break;
      }
      case 1: {
        kstage_path_list_t l = 0;
        if (CALL_A(kstage_query_get_paths, stage[0], ha, &l) == KSTAGE_OK) {
          if (known_dead) oracle("query_get_paths accepted a dead handle");
          kstage_path_list_t l2 = 0;
          twin_ok(CALL_B(kstage_query_get_paths, stage[1], queries[size_t(i)].h[1], &l2),
                  "query_get_paths");
          Pair p;
          p.h[0] = l;
          p.h[1] = l2;
          p.live = true;
          p.prims = queries[size_t(i)].prims;
          lists.push_back(p);
        }
        break;
      }
      default:
        if (CALL_A(kstage_query_release, stage[0], ha) == KSTAGE_OK) {
          if (known_dead) oracle("query_release accepted a dead handle");
          twin_ok(CALL_B(kstage_query_release, stage[1], queries[size_t(i)].h[1]), "query_release");
          queries[size_t(i)].live = false;
          retire(ha);
        }
    }
  }

  // -- write descriptors -----------------------------------------------------------------------
  DLDataType dtype(const Schema* known) {
    if (known && known->known && chance(80)) return known->dtype;
    static const DLDataType valid[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1},   {kDLInt, 32, 1},
                                       {kDLUInt, 8, 1},   {kDLUInt, 64, 1},    {kDLFloat, 16, 1},
                                       {kDLBool, 8, 1},   {kDLComplex, 64, 1}, {kDLBfloat, 16, 1},
                                       {kDLInt, 16, 1}};
    DLDataType t = valid[in.ConsumeIntegralInRange<int>(0, 9)];
    static const uint16_t lanes[] = {1, 1, 1, 2, 3, 4, 16};
    t.lanes = lanes[in.ConsumeIntegralInRange<int>(0, 6)];
    if (chance(6)) {  // invalid
      switch (in.ConsumeIntegralInRange<int>(0, 3)) {
        case 0: t.bits = in.ConsumeIntegral<uint8_t>(); break;
        case 1: t.code = in.ConsumeIntegral<uint8_t>(); break;
        case 2: t.lanes = 0; break;
        default: t.lanes = in.ConsumeIntegral<uint16_t>(); break;
      }
    }
    return t;
  }

  kstage_semantic_t semantic(const Schema* known, DLDataType t, bool is_array) {
    if (known && known->known && chance(85)) return known->semantic;
    if (chance(4)) return in.ConsumeIntegral<int32_t>();
    if (t.code == kDLUInt && t.bits == 64 && t.lanes == 1 && chance(30))
      return chance(50) ? KSTAGE_SEMANTIC_TOKEN_ID : KSTAGE_SEMANTIC_PATH_ID;
    if (is_array && t.bits == 8 && t.lanes == 1 && chance(30)) return KSTAGE_SEMANTIC_STRING;
    return in.ConsumeIntegralInRange<int>(0, 7);
  }

  int64_t dim_value(bool huge_ok) {
    if (huge_ok && chance(5)) {
      static const int64_t odd[] = {-1, INT64_MIN, INT64_MAX, int64_t(1) << 32, int64_t(1) << 62,
                                    -5};
      return odd[in.ConsumeIntegralInRange<int>(0, 5)];
    }
    return in.ConsumeIntegralInRange<int64_t>(0, 4);
  }

  int64_t stride_value(int64_t compact) {
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0: return -compact;
      case 1: return compact * in.ConsumeIntegralInRange<int64_t>(2, 3);
      case 2: return 0;
      case 3: {
        static const int64_t huge[] = {INT64_MAX,
                                       INT64_MIN,
                                       int64_t(1) << 62,
                                       -(int64_t(1) << 62),
                                       (int64_t(1) << 61) + 3,
                                       INT64_MAX / 2 + 1};
        return huge[in.ConsumeIntegralInRange<int>(0, 5)];
      }
      case 4: return in.ConsumeIntegralInRange<int64_t>(-8, 8);
      default: return compact;
    }
  }

  // A tensor of `rows` rows (or odd), lanes folded from trailing axes.
  TensorSpec tensor_spec(int64_t rows, DLDataType t) {
    TensorSpec s;
    s.seed = ++seed;
    s.dtype = t;
    s.ndim = chance(80)
                 ? 1
                 : in.ConsumeIntegralInRange<int32_t>(chance(10) ? -2 : 0, chance(5) ? 12 : 4);
    const size_t nd = size_t(std::max(s.ndim, 0));
    s.shape.assign(std::max<size_t>(nd, 1), 1);
    if (nd >= 1) s.shape[0] = chance(90) ? rows : dim_value(true);
    for (size_t d = 1; d < nd; ++d)
      s.shape[d] = chance(70) ? in.ConsumeIntegralInRange<int64_t>(1, 4) : dim_value(true);
    // ndim > 1 with a 1-lane dtype folds; keep the folded lanes sane most of the time
    if (nd > 1 && chance(70)) s.dtype.lanes = 1;
    s.has_strides = chance(30);
    if (s.has_strides) {
      s.strides.assign(std::max<size_t>(nd, 1), 1);
      int64_t compact = 1;
      for (size_t d = nd; d-- > 0;) {
        s.strides[d] = stride_value(compact);
        const int64_t extent = std::max<int64_t>(s.shape[d], 1);
        if (extent > (1 << 20) || __builtin_mul_overflow(compact, extent, &compact) ||
            compact > (1 << 20))
          compact = 1;
      }
    }
    if (chance(10)) s.byte_offset = in.ConsumeIntegralInRange<uint64_t>(1, 64);
    if (chance(3)) s.null_data = true;
    if (chance(2)) s.null_shape = true;
    if (chance(4)) {
      static const DLDevice devs[] = {{kDLCUDA, 0}, {kDLCUDAHost, 0},      {kDLCPU, 3},
                                      {kDLROCM, 1}, {DLDeviceType(99), 0}, {kDLCUDAManaged, 0}};
      s.device = devs[in.ConsumeIntegralInRange<int>(0, 5)];
    }
    // Must-reject layouts get a minimal buffer (see materialise_tensor); valid layouts too
    // big to back with memory are made smaller.
    const size_t elem = std::max<size_t>(tuple_bytes(s.dtype), 1);
    int64_t lo = 0;
    size_t span = 0;
    Span k =
        layout_span(s.ndim, s.shape, s.has_strides ? s.strides.data() : nullptr, elem, lo, span);
    if (k == Span::TooBig) {
      s.has_strides = false;
      k = layout_span(s.ndim, s.shape, nullptr, elem, lo, span);
    }
    if (k == Span::TooBig) {
      for (size_t d = 0; d < nd; ++d) s.shape[d] = std::min<int64_t>(s.shape[d], 2);
      k = layout_span(s.ndim, s.shape, nullptr, elem, lo, span);
    }
    if (k == Span::TooBig) {
      for (size_t d = 0; d < nd; ++d) s.shape[d] = std::min<int64_t>(s.shape[d], 1);
      k = layout_span(s.ndim, s.shape, nullptr, elem, lo, span);
    }
    // Still too big: one element is over 1 MiB, which only an invalid dtype (lanes > 255)
    // gives, so kstage must reject it.
    if (k == Span::TooBig) k = Span::Overflow;
    s.tiny = k == Span::Overflow;
    s.flags = chance(30) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    if (chance(3)) s.flags = in.ConsumeIntegral<uint64_t>();
    if (chance(3)) s.version_major = in.ConsumeIntegral<uint32_t>();
    s.no_deleter = chance(3);
    s.null_entry = chance(2);
    return s;
  }

  DescSpec desc_spec(int token_index, uint64_t qprims) {
    DescSpec d;
    const Schema* known = token_index >= 0 ? &schemas[size_t(token_index)] : nullptr;
    d.is_array = known && known->known && chance(85) ? known->is_array : chance(30);
    const DLDataType t = dtype(known);
    d.semantic = semantic(known, t, d.is_array);
    d.managed = chance(25);
    d.legacy = d.managed && chance(30);
    d.set_both = chance(2);
    d.set_neither = chance(2);
    d.reserved_index = chance(3) ? in.ConsumeIntegralInRange<int>(0, 5) : -1;
    d.attribute_mode =
        chance(10) ? KSTAGE_ATTRIBUTE_MODE_FORCE : (chance(2) ? in.ConsumeIntegral<uint8_t>() : 0);
    // logical count
    if (chance(25) && qprims > 0) d.count = in.ConsumeIntegralInRange<uint64_t>(1, qprims);
    else if (chance(3))
      d.count = chance(50) ? qprims + 1 : (chance(50) ? kU64Max : uint64_t(1) << 40);
    const uint64_t logical = d.count ? d.count : qprims;
    int64_t rows = int64_t(std::min<uint64_t>(logical, 64));
    if (d.count && d.count <= 256 && chance(40)) {
      const int which = in.ConsumeIntegralInRange<int>(0, 9);
      d.use_index_map = which < 5 || which == 9;
      d.use_mask = which >= 5;
      if (d.use_index_map) {
        rows = in.ConsumeIntegralInRange<int64_t>(chance(5) ? 0 : 1, 8);
        d.index_map.resize(size_t(d.count));
        for (auto& x : d.index_map)
          x = chance(95) && rows > 0 ? in.ConsumeIntegralInRange<uint32_t>(0, uint32_t(rows - 1))
                                     : (chance(50) ? uint32_t(rows) : UINT32_MAX);
        d.null_index_map = false;
      }
      if (d.use_mask) {
        d.mask.resize(size_t((d.count + 63) / 64));
        for (auto& w : d.mask) w = in.ConsumeIntegral<uint64_t>();
      }
    } else if (chance(3)) {
      d.use_mask = true;  // with count 0 or huge: rejected; one word is enough to read
      d.mask.assign(d.count <= 64 * 4 ? std::max<size_t>(size_t((d.count + 63) / 64), 1) : 1,
                    ~0ull);
      if (d.count > 256) d.count = 0;
    }
    if (chance(5) && rows > 0) rows += chance(50) ? 1 : -1;  // row count mismatch
    if (!d.is_array) {
      d.tensors.push_back(tensor_spec(rows, t));
      d.tensor_count = 1;
      if (chance(4)) {
        static const uint64_t bad[] = {0, 2, uint64_t(1) << 40, kU64Max, uint64_t(1) << 32};
        d.tensor_count = bad[in.ConsumeIntegralInRange<int>(0, 4)];
        if (d.tensor_count == 2) d.tensors.push_back(tensor_spec(rows, t));
      }
    } else if (chance(30) || rows == 0) {  // one packed tensor
      const int64_t per = in.ConsumeIntegralInRange<int64_t>(0, 3);
      d.tensors.push_back(tensor_spec(std::max<int64_t>(rows, 1) * per + (chance(5) ? 1 : 0), t));
      d.tensor_count = 1;
    } else {
      for (int64_t r = 0; r < rows; ++r)
        d.tensors.push_back(tensor_spec(in.ConsumeIntegralInRange<int64_t>(0, 5), t));
      d.tensor_count = d.tensors.size();
      if (chance(3)) d.tensor_count = 0;
    }
    if (d.managed && d.tensors.size() >= 2 && chance(5)) d.duplicate_managed = 1;
    return d;
  }

  WriteSpec write_spec(const std::vector<int>& token_indices, uint64_t qprims) {
    WriteSpec w;
    for (int ti : token_indices) w.descs.push_back(desc_spec(ti, qprims));
    w.n = w.descs.size();
    w.null_data = chance(2);
    uint32_t size = sizeof(kstage_write_data_t);
    if (chance(8)) {
      // 80: the first layout; 88: 0.2's (legacy_managed_tensors); 96: 0.3's (residency); 104:
      // 0.4's; sizes between layouts (81, 89, 92, 97) cut a field; past 65536: rejected.
      static const uint32_t sizes[] = {0,  1,  8,   79,   81,   88,    89,    92,        96,
                                       97, 80, 104, 4097, 8192, 65536, 65537, UINT32_MAX};
      size = sizes[in.ConsumeIntegralInRange<int>(0, int(std::size(sizes)) - 1)];
    }
    for (auto& d : w.descs) {
      d.struct_size = size;
      if (valid_write_struct_size(size) && size > sizeof(kstage_write_data_t) && chance(30))
        d.nonzero_extra = in.ConsumeIntegralInRange<size_t>(1, size - sizeof(kstage_write_data_t));
    }
    if (w.descs.size() > 1 && chance(5)) w.descs.back().struct_size = size + 8;  // mismatch
    w.stride_size = valid_write_struct_size(size) ? size : uint32_t(sizeof(kstage_write_data_t));
    return w;
  }

  // Builds the call's memory for one side. Managed boxes are created per side.
  void materialise(const WriteSpec& w, Materialised& m) {
    m.tensors.resize(w.descs.size());
    m.managed_ptrs.resize(w.descs.size());
    m.legacy_ptrs.resize(w.descs.size());
    m.raw.assign(size_t(w.stride_size) * std::max<size_t>(w.descs.size(), 1), 0);
    for (size_t i = 0; i < w.descs.size(); ++i) {
      const DescSpec& d = w.descs[i];
      kstage_write_data_t k = kstage_write_data_init();
      k.struct_size = d.struct_size;
      k.semantic = d.semantic;
      k.count = d.count;
      k.is_array = d.is_array;
      k.tensor_count = d.tensor_count;
      if (d.reserved_index >= 0) k.reserved[d.reserved_index] = 1;
      k.attribute_mode = d.attribute_mode;
      if (d.use_index_map) k.index_map = d.index_map.data();
      if (d.use_mask) k.mask = d.mask.data();
      std::vector<DLTensor>& ts = m.tensors[i];
      ts.resize(std::max<size_t>(d.tensors.size(), 1));
      auto& ptrs = m.managed_ptrs[i];
      for (size_t j = 0; j < d.tensors.size(); ++j) {
        const TensorSpec& s = d.tensors[j];
        if (!d.managed) {
          m.buffers.emplace_back();
          m.shapes.emplace_back();
          m.shapes.emplace_back();
          auto& strides = m.shapes.back();
          auto& shape = m.shapes[m.shapes.size() - 2];
          materialise_tensor(s, ts[j], m.buffers.back(), shape, strides);
        } else {
          auto& lptrs = m.legacy_ptrs[i];
          if (s.null_entry) {
            ptrs.push_back(nullptr);
            lptrs.push_back(nullptr);
            continue;
          }
          if (d.duplicate_managed && j == 1 && !ptrs.empty() && (ptrs[0] || lptrs[0])) {
            ptrs.push_back(ptrs[0]);
            lptrs.push_back(lptrs[0]);
            continue;
          }
          auto box = std::make_unique<Managed>();
          if (d.legacy) {
            materialise_tensor(s, box->l.dl_tensor, box->storage, box->shape, box->strides);
            box->legacy = true;
            box->l.manager_ctx = box.get();
            box->l.deleter = s.no_deleter ? nullptr : legacy_deleter;
            for (unsigned char c : box->storage)
              box->handed_checksum = box->handed_checksum * 31 + c;
          } else {
            materialise_tensor(s, box->m.dl_tensor, box->storage, box->shape, box->strides);
            box->m.version.major = s.version_major;
            box->m.version.minor = DLPACK_MINOR_VERSION;
            box->m.flags = s.flags;
            box->m.manager_ctx = box.get();
            box->m.deleter = s.no_deleter ? nullptr : managed_deleter;
          }
          box->has_deleter = !s.no_deleter;
          // A fixed-size write hands over entry 0 only; later entries are never read. A
          // caller whose struct_size cuts legacy_managed_tensors (80 to 87 bytes) has no such
          // field to pass (kstage.h: a field not wholly inside struct_size is absent); a
          // struct_size kstage.h rejects is read as this header's struct, field included.
          box->handed = !w.null_data && (d.is_array || j == 0) &&
                        !(d.legacy && valid_write_struct_size(w.descs[0].struct_size) &&
                          w.stride_size < kLegacyFieldEnd);
          // tensor_count beyond what the array holds: whether this entry counts as handed
          // over is up to kstage; it must not run the deleter twice, though.
          if (d.tensor_count != d.tensors.size()) box->expect_once = false;
          ptrs.push_back(d.legacy ? nullptr : &box->m);
          lptrs.push_back(d.legacy ? &box->l : nullptr);
          m.boxes.push_back(box.get());
          boxes.push_back(std::move(box));
        }
      }
      if (d.managed || d.set_both) {
        auto& lptrs = m.legacy_ptrs[i];
        while (ptrs.size() < std::max<size_t>(d.tensors.size(), 1)) ptrs.push_back(nullptr);
        while (lptrs.size() < ptrs.size()) lptrs.push_back(nullptr);
        if (d.legacy) k.legacy_managed_tensors = lptrs.data();
        else k.managed_tensors = ptrs.data();
      }
      if (!d.managed || d.set_both) k.tensors = ts.data();
      if (d.set_neither) {
        k.tensors = nullptr;
        k.managed_tensors = nullptr;
        k.legacy_managed_tensors = nullptr;
      }
      if (d.set_both || d.set_neither)
        for (Managed* b : m.boxes) b->expect_once = false;  // "exactly one" violated: ambiguous
      unsigned char* dst = m.raw.data() + i * w.stride_size;
      std::memcpy(
          dst, &k,
          std::min<size_t>(sizeof(k), w.stride_size));  // an 80-byte caller: no legacy field
      if (d.nonzero_extra) dst[sizeof(k) + d.nonzero_extra - 1] = 0x5a;
    }
  }

  // Pre-call bookkeeping is done; after the call: the deleters of a rejected call have run.
  void check_rejected_boxes(const Materialised& m, const char* what) {
    for (Managed* b : m.boxes)
      if (b->handed && b->expect_once && b->has_deleter && b->deleted != 1)
        oracle("%s was rejected but the deleter of a managed tensor it was handed ran %d times",
               what, b->deleted);
  }

  void remember_schemas(const WriteSpec& w, const std::vector<int>& tis) {
    for (size_t i = 0; i < tis.size() && i < w.descs.size(); ++i) {
      if (tis[i] < 0) continue;
      Schema& s = schemas[size_t(tis[i])];
      const DescSpec& d = w.descs[i];
      if (d.tensors.empty()) continue;
      s.known = true;
      s.is_array = d.is_array;
      s.semantic = d.semantic;
      s.dtype = d.tensors[0].dtype;
      if (d.tensors[0].ndim > 1) s.known = false;  // folded lanes: re-learn
    }
  }

  void add_op(kstage_op_t a, kstage_op_t b) {
    Pair p;
    p.h[0] = a;
    p.h[1] = b;
    p.live = true;
    ops.push_back(p);
  }

  // Picks a query: (index, handle on A); index -1 means garbage.
  int pick_query(uint64_t& ha, uint64_t& qprims) {
    uint64_t g = 0;
    int qi = pick(queries, g);
    ha = qi < 0 ? g : queries[size_t(qi)].h[0];
    qprims = qi < 0 ? 3 : queries[size_t(qi)].prims;
    return qi;
  }

  void op_write(bool batch) {
    uint64_t qa = 0, qprims = 0;
    const int qi = pick_query(qa, qprims);
    std::vector<int> tis;
    std::vector<uint64_t> attrs;
    const size_t n = batch ? in.ConsumeIntegralInRange<size_t>(0, 4) : 1;
    for (size_t i = 0; i < n; ++i) {
      int ti = chance(92) ? token_index_or_minus() : -1;
      tis.push_back(ti);
      attrs.push_back(ti >= 0 ? tokens[size_t(ti)] : token_id());
    }
    WriteSpec w = write_spec(tis, qprims);
    uint64_t nn = w.descs.size();
    const uint64_t ordinal = this->ordinal();
    kstage_prim_mode_t mode =
        chance(70) ? KSTAGE_PRIM_MODE_UPSERT
                   : in.ConsumeIntegralInRange<int>(chance(5) ? -3 : 0, chance(5) ? 9 : 2);
    const bool null_attrs = chance(2);
    const bool null_op = chance(2);
    for (const DescSpec& d : w.descs)
      trace("  desc: struct_size %u%s is_array %d %s tensor_count %llu (%zu given) count %llu%s%s",
            d.struct_size, d.nonzero_extra ? " (extra bytes set)" : "", int(d.is_array),
            d.set_neither ? "neither"
            : d.set_both  ? "tensors+managed"
            : d.managed   ? "managed"
                          : "tensors",
            (unsigned long long)d.tensor_count, d.tensors.size(), (unsigned long long)d.count,
            d.use_index_map ? " index_map" : "", d.use_mask ? " mask" : "");
    Materialised ma;
    materialise(w, ma);
    const auto* data =
        w.null_data ? nullptr : reinterpret_cast<const kstage_write_data_t*>(ma.raw.data());
    kstage_op_t op = 0x77;
    kstage_status_t st;
    if (!batch && nn == 1 && !null_attrs) {
      st = CALL_A(kstage_write_attribute, stage[0], qa, attrs[0], ordinal, data, mode,
                  null_op ? nullptr : &op);
    } else {
      st = CALL_A(kstage_write_attributes, stage[0], qa, null_attrs ? nullptr : attrs.data(), data,
                  nn, ordinal, mode, null_op ? nullptr : &op);
    }
    if (st != KSTAGE_OK) {
      if (op != 0x77) oracle("a rejected write wrote its op out-parameter");
      check_rejected_boxes(ma, "a write");
      return;
    }
    if (qi < 0 || !queries[size_t(qi)].live) oracle("a write accepted a dead query handle");
    if (CALL_A(kstage_wait, stage[0], op, chance(50) ? 0 : KSTAGE_TIMEOUT_INFINITE) != KSTAGE_OK)
      oracle("the op of an accepted host write did not complete: %s", kstage_last_error());
    // Replay on the twin with its own copies.
    Materialised mb;
    materialise(w, mb);
    const auto* datab =
        w.null_data ? nullptr : reinterpret_cast<const kstage_write_data_t*>(mb.raw.data());
    kstage_op_t opb = 0;
    kstage_status_t stb;
    if (!batch && nn == 1 && !null_attrs)
      stb = CALL_B(kstage_write_attribute, stage[1], queries[size_t(qi)].h[1], attrs[0], ordinal,
                   datab, mode, &opb);
    else
      stb = CALL_B(kstage_write_attributes, stage[1], queries[size_t(qi)].h[1], attrs.data(), datab,
                   nn, ordinal, mode, &opb);
    twin_ok(stb, "a write");
    add_op(op, opb);
    remember_schemas(w, tis);
    // The client's tensors may be freed now (host ops complete when submitted).
  }

  void op_delete() {
    uint64_t qa = 0, qprims = 0;
    const int qi = pick_query(qa, qprims);
    std::vector<uint64_t> attrs(in.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& a : attrs) a = token_id();
    uint64_t n = attrs.size();
    const bool null_attrs = chance(3);
    if (null_attrs && chance(50)) n = 2;
    const uint64_t ordinal = this->ordinal();
    kstage_op_t op = 0x77;
    kstage_status_t st = CALL_A(kstage_delete_attributes, stage[0], qa,
                                null_attrs ? nullptr : attrs.data(), n, ordinal, &op);
    if (st != KSTAGE_OK) {
      if (op != 0x77) oracle("a rejected delete wrote its op");
      return;
    }
    if (qi < 0 || !queries[size_t(qi)].live) oracle("a delete accepted a dead query handle");
    kstage_op_t opb = 0;
    twin_ok(CALL_B(kstage_delete_attributes, stage[1], queries[size_t(qi)].h[1],
                   null_attrs ? nullptr : attrs.data(), n, ordinal, &opb),
            "a delete");
    add_op(op, opb);
  }

  // kstage_clone: a source and 0-3 targets from the known paths (or garbage ids), at any
  // ordinal; the twin replays what A accepts (both intern the copies' paths alike, so ids
  // stay in step), and a refusal must leave A as it was (oracle 1).
  void op_clone() {
    const uint64_t source = path_id();
    std::vector<uint64_t> targets(in.ConsumeIntegralInRange<size_t>(0, 3));
    for (auto& t : targets) t = path_id();
    uint64_t n = targets.size();
    const bool null_targets = chance(3);
    if (null_targets && n == 0) n = 1;
    const uint64_t ordinal = this->ordinal();
    kstage_op_t op = 0x77;
    const kstage_status_t st =
        CALL_A(kstage_clone, stage[0], source, null_targets ? nullptr : targets.data(), n, ordinal,
               chance(3) ? nullptr : &op);
    if (st != KSTAGE_OK) {
      if (op != 0x77) oracle("a rejected clone wrote its op");
      return;
    }
    if (null_targets || n == 0) oracle("a clone accepted no targets");
    kstage_op_t opb = 0;
    twin_ok(CALL_B(kstage_clone, stage[1], source, targets.data(), n, ordinal, &opb), "a clone");
    add_op(op, opb);
  }

  void op_seal() {
    std::vector<uint64_t> attrs;
    if (chance(40)) {
      attrs.resize(in.ConsumeIntegralInRange<size_t>(1, 3));
      for (auto& a : attrs) a = token_id();
    }
    uint64_t ordinal;
    if (chance(85)) ordinal = ord + in.ConsumeIntegralInRange<uint64_t>(0, 3);
    else ordinal = this->ordinal();
    if (ordinal == kU64Max && chance(80))
      ordinal = ord + 1;  // sealing everything forever ends the run early
    const bool null_attrs = chance(2) && !attrs.empty();
    kstage_status_t st = CALL_A(kstage_advance_write_floor, stage[0], ordinal,
                                null_attrs ? nullptr : attrs.data(), attrs.size());
    if (st != KSTAGE_OK) {
      // A seal may fail part-way (a mutation cannot be applied); whatever it did apply must
      // be what the twin does too, so replay it and compare.
      if (null_attrs || st == KSTAGE_INVALID_ARGUMENT) return;
    }
    kstage_status_t stb = CALL_B(kstage_advance_write_floor, stage[1], ordinal,
                                 null_attrs ? nullptr : attrs.data(), attrs.size());
    if (stb != st)
      oracle("divergence: advance_write_floor gave %s on the stage, %s on its twin",
             kstage_status_string(st), kstage_status_string(stb));
    if (attrs.empty() && st == KSTAGE_OK) ord = std::max(ord, ordinal);
    if (chance(25)) compare("after a seal");
  }

  void op_floor() {
    uint64_t f = 0x99;
    const uint64_t t = chance(20) ? 0 : token_id();
    kstage_status_t st = CALL_A(kstage_get_write_floor, stage[0], t, chance(3) ? nullptr : &f);
    if (st != KSTAGE_OK && f != 0x99) oracle("failed get_write_floor wrote its out-parameter");
    if (st == KSTAGE_OK) {
      uint64_t fb = 0;
      twin_ok(CALL_B(kstage_get_write_floor, stage[1], t, &fb), "get_write_floor");
      if (f != fb)
        oracle("divergence: write floor %llu vs twin %llu", (unsigned long long)f,
               (unsigned long long)fb);
    }
  }

  // -- reads -----------------------------------------------------------------------------------
  void op_read() {
    uint64_t qa = 0, qprims = 0;
    const int qi = pick_query(qa, qprims);
    std::vector<uint64_t> attrs(in.ConsumeIntegralInRange<size_t>(0, 4));
    for (auto& a : attrs) a = token_id();
    uint64_t n = attrs.size();
    const bool null_attrs = chance(2);
    if (null_attrs && chance(50)) n = 1;
    struct alignas(8) Raw {
      unsigned char b[8200];
    } raw{};
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = chance(40);
    d.change_range = chance(30);
    if (d.change_range) {
      d.range_begin = chance(70) ? in.ConsumeIntegralInRange<uint64_t>(0, ord + 1)
                                 : in.ConsumeIntegral<uint64_t>();
      d.range_end = chance(70) ? in.ConsumeIntegralInRange<uint64_t>(
                                     d.range_begin, std::max(d.range_begin, ord + 2))
                               : in.ConsumeIntegral<uint64_t>();
    }
    if (chance(10)) {
      static const DLDevice devs[] = {
          {kDLCPU, 0}, {kDLCUDA, 0}, {kDLCPU, 2}, {kDLCUDAHost, 0}, {DLDeviceType(77), 1}};
      d.target_device = devs[in.ConsumeIntegralInRange<int>(0, 4)];
    }
    if (chance(3)) {  // 0.4's bytes: device_index_map (host columns: no effect), or
                      // prims_as_progression, 0 or 1 (any other byte refused)
      switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0: {
          const uint8_t two = 2;
          std::memcpy(&d.prims_as_progression, &two, 1);
          break;
        }
        case 1: d.prims_as_progression = true; break;
        default: d.device_index_map = true;
      }
    }
    if (chance(2)) d.device_sync.event = 1;
    uint32_t size = sizeof(d);
    if (chance(8)) {
      static const uint32_t sizes[] = {0, 4, 47, 49, 50, 56, 64, 4097, 8192, 65537, UINT32_MAX};
      size = sizes[in.ConsumeIntegralInRange<int>(0, int(std::size(sizes)) - 1)];
    }
    d.struct_size = size;
    std::memcpy(raw.b, &d,
                std::min<size_t>(sizeof(d), std::max<uint32_t>(size, 4)));  // the caller's bytes
    if (size > sizeof(d) && size <= sizeof(raw.b) && chance(40))
      raw.b[in.ConsumeIntegralInRange<size_t>(sizeof(d), size - 1)] = 1;
    const int dm = in.ConsumeIntegralInRange<int>(0, 9);
    const kstage_read_desc_t* desc =
        dm == 0 ? nullptr : reinterpret_cast<const kstage_read_desc_t*>(raw.b);
    kstage_read_t r = 0x55;
    kstage_status_t st =
        CALL_A(kstage_read_attributes, stage[0], qa, null_attrs ? nullptr : attrs.data(), n, desc,
               chance(2) ? nullptr : &r);
    if (st != KSTAGE_OK) {
      if (r != 0x55) oracle("a failed read wrote its out-parameter");
      return;
    }
    if (qi < 0 || !queries[size_t(qi)].live) oracle("a read accepted a dead query handle");
    ReadRec rec;
    rec.h = r;
    rec.live = true;
    rec.zero_copy = desc == nullptr || (!d.compact && d.target_device.device_type == 0);
    rec.progression = desc != nullptr && d.prims_as_progression;
    reads.push_back(rec);
    const int fetches = in.ConsumeIntegralInRange<int>(0, 3);
    for (int i = 0; i < fetches; ++i) fetch_read(reads.size() - 1);
  }

  void fetch_read(size_t ri) {
    ReadRec& rr = reads[ri];
    kstage_read_group_t g{};
    g.handle = 0x66;
    kstage_status_t st = CALL_A(kstage_fetch_read_next, stage[0], rr.h, 0, &g);
    if (st != KSTAGE_OK) {
      if (g.handle != 0x66) oracle("a failed fetch_read_next wrote its group");
      if (st != KSTAGE_END_OF_ITERATION && rr.live)
        oracle("fetch_read_next on a live read failed: %s", kstage_last_error());
      return;
    }
    if (!rr.live) oracle("fetch_read_next accepted a released read");
    if (g.prim_count && !g.prims) {  // only a progression, read as one, names no array
      uint64_t first = 0, stride = 0;
      if (!rr.progression) oracle("group with prims NULL from a read without prims_as_progression");
      if (CALL_A(kstage_group_prim_progression, stage[0], g.handle, &first, &stride) != KSTAGE_OK)
        oracle("a group with prims NULL is no progression: %s", kstage_last_error());
    }
    check_group_layout(g, true);
    GroupRec gr;
    gr.h = g.handle;
    gr.g = g;
    gr.live = true;
    gr.zero_copy = rr.zero_copy;
    gr.checksum = group_checksum(g);
    groups.push_back(gr);
  }

  void op_read_use() {
    if (reads.empty() || chance(5)) {
      uint64_t h = garbage(nullptr, /*for_read=*/true);
      kstage_read_group_t g{};
      if (chance(50)) {
        if (CALL_A(kstage_fetch_read_next, stage[0], h, 0, &g) == KSTAGE_OK)
          oracle("fetch_read_next accepted a dead read");
      } else if (CALL_A(kstage_release_read, stage[0], h) == KSTAGE_OK) {
        oracle("release_read accepted a dead read");
      }
      return;
    }
    const size_t ri = in.ConsumeIntegralInRange<size_t>(0, reads.size() - 1);
    if (chance(70)) {
      fetch_read(ri);
    } else {
      kstage_status_t st = CALL_A(kstage_release_read, stage[0], reads[ri].h);
      if (st == KSTAGE_OK) {
        if (!reads[ri].live) oracle("release_read accepted a released read");
        reads[ri].live = false;
        retire(reads[ri].h);
      } else if (reads[ri].live) {
        oracle("release_read of a live read failed: %s", kstage_last_error());
      }
    }
  }

  void release_group(GroupRec& gr) {
    if (gr.live && !gr.dirty && group_checksum(gr.g) != gr.checksum)
      oracle(
          "a read group's data changed before it was released (a seal modified a pinned buffer)");
    kstage_status_t st = CALL_A(kstage_release_group, stage[0], gr.h);
    if (st == KSTAGE_OK && !gr.live) oracle("release_group accepted a released group");
    if (st != KSTAGE_OK && gr.live)
      oracle("release_group of a live group failed: %s", kstage_last_error());
    if (gr.live) retire(gr.h);
    gr.live = false;
  }

  void op_group() {
    if (groups.empty() || chance(4)) {
      uint64_t h = garbage(nullptr);
      DLManagedTensorVersioned* t = nullptr;
      if (CALL_A(kstage_group_export, stage[0], h, 0, 0, &t) == KSTAGE_OK)
        oracle("group_export accepted a dead group");
      if (CALL_A(kstage_release_group, stage[0], h) == KSTAGE_OK)
        oracle("release_group accepted a dead group");
      return;
    }
    GroupRec& gr = groups[in.ConsumeIntegralInRange<size_t>(0, groups.size() - 1)];
    switch (in.ConsumeIntegralInRange<int>(0, 4)) {
      case 0: release_group(gr); break;
      case 1:
        if (gr.live && !gr.dirty && group_checksum(gr.g) != gr.checksum)
          oracle("a read group's data changed while it was held");
        break;
      case 4: {  // an Arrow export of the group, with a path column or not (its prims may be a
                 // progression with no list), released at once
        static const uint64_t kFlags[] = {0, KSTAGE_ARROW_PATH_IDS, KSTAGE_ARROW_PATH_STRINGS,
                                          KSTAGE_ARROW_PATH_IDS | KSTAGE_ARROW_PATH_STRINGS};
        const uint64_t flags = chance(5) ? in.ConsumeIntegral<uint64_t>()
                                         : kFlags[in.ConsumeIntegralInRange<int>(0, 3)];
        ArrowSchema schema{};
        ArrowDeviceArray array{};
        if (CALL_A(kstage_group_export_arrow, stage[0], gr.h, flags, &schema, &array) !=
            KSTAGE_OK) {
          if (schema.release || array.array.release)
            oracle("a failed Arrow export wrote its out-structs");
          break;
        }
        if (!gr.live) oracle("an Arrow export accepted a released group");
        if (!schema.release || !array.array.release)
          oracle("an Arrow export without its release callbacks");
        if (array.array.length != int64_t(gr.g.prim_count))
          oracle("an Arrow export of %llu rows for a group of %llu prims",
                 (unsigned long long)array.array.length, (unsigned long long)gr.g.prim_count);
        array.array.release(&array.array);
        schema.release(&schema);
        break;
      }
      default: {
        const uint64_t index = chance(90) ? in.ConsumeIntegralInRange<uint64_t>(0, 2) : kU64Max;
        uint64_t flags = chance(70) ? 0 : KSTAGE_EXPORT_READ_ONLY;
        if (chance(20)) flags |= KSTAGE_EXPORT_CONSUMER_READS_ONLY;
        if (chance(5)) flags = in.ConsumeIntegral<uint64_t>();
        const bool promised = flags & KSTAGE_EXPORT_CONSUMER_READS_ONLY;
        Export e;
        kstage_status_t st;
        if (chance(70)) {
          DLManagedTensorVersioned* t = reinterpret_cast<DLManagedTensorVersioned*>(0x1);
          st = CALL_A(kstage_group_export, stage[0], gr.h, index, flags, chance(2) ? nullptr : &t);
          if (st != KSTAGE_OK) {
            if (t != reinterpret_cast<DLManagedTensorVersioned*>(0x1))
              oracle("a failed export wrote its out-parameter");
            break;
          }
          e.v = t;
          const bool ro = t->flags & DLPACK_FLAG_BITMASK_READ_ONLY;
          if ((gr.zero_copy || (flags & KSTAGE_EXPORT_READ_ONLY)) && !ro)
            oracle("an export of a zero-copy group (or asked READ_ONLY) is writable");
          if (t->version.major != DLPACK_MAJOR_VERSION)
            oracle("export version %u", unsigned(t->version.major));
        } else {
          DLManagedTensor* t = nullptr;
          st = CALL_A(kstage_group_export_legacy, stage[0], gr.h, index, flags, &t);
          if (st != KSTAGE_OK) break;
          if (gr.zero_copy && !promised)
            oracle("a legacy export of a zero-copy group was accepted without the promise");
          e.legacy = t;
          e.promised = promised;
        }
        if (!gr.live) oracle("group export accepted a released group");
        e.checksum = touch_dl(export_tensor(e));
        const DLTensor& t = export_tensor(e);
        // A legacy export under KSTAGE_EXPORT_CONSUMER_READS_ONLY: the fuzzer keeps the promise.
        const bool writable =
            e.legacy ? !e.promised : !(e.v->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
        if (writable && chance(30) && t.data) {
          // The consumer owns a writable export: scribble over it. The stage must not see it.
          int64_t total = 1;
          for (int d = 0; d < t.ndim; ++d) total *= t.shape[d];
          std::memset(static_cast<unsigned char*>(t.data) + t.byte_offset, 0xab,
                      size_t(total) * tuple_bytes(t.dtype));
          e.written = true;
          gr.dirty = true;  // a compact group shares its buffer with its exports
          for (auto& other : exports)
            if ((other.v || other.legacy) && export_tensor(other).data == t.data)
              other.written = true;
        }
        exports.push_back(e);
      }
    }
  }

  void op_drop_export() {
    if (exports.empty()) return;
    const size_t i = in.ConsumeIntegralInRange<size_t>(0, exports.size() - 1);
    if (exports[i].v || exports[i].legacy) drop_export(exports[i]);
  }

  // -- maps ------------------------------------------------------------------------------------
  void op_map() {
    uint64_t qa = 0, qprims = 0;
    const int qi = pick_query(qa, qprims);
    const int ti = chance(92) ? token_index_or_minus() : -1;
    const Schema* known = ti >= 0 ? &schemas[size_t(ti)] : nullptr;
    kstage_map_desc_t d = kstage_map_desc_init();
    d.attribute = ti >= 0 ? tokens[size_t(ti)] : token_id();
    d.is_array = known && known->known && chance(85) ? known->is_array : chance(30);
    d.dtype = dtype(known);
    d.semantic = semantic(known, d.dtype, d.is_array);
    d.prim_mode = chance(70) ? KSTAGE_PRIM_MODE_UPSERT : in.ConsumeIntegralInRange<int>(-1, 3);
    if (chance(5))
      d.residency =
          DLDevice{chance(50) ? kDLCUDA : kDLCPU, in.ConsumeIntegralInRange<int32_t>(0, 2)};
    d.max_group_prims =
        chance(70) ? 0 : (chance(90) ? in.ConsumeIntegralInRange<uint64_t>(1, 4) : kU64Max);
    if (chance(3)) d.reserved[in.ConsumeIntegralInRange<int>(0, 5)] = 1;
    if (chance(10)) d.attribute_mode = chance(80) ? KSTAGE_ATTRIBUTE_MODE_FORCE : 2;
    std::vector<uint64_t> counts;
    uint64_t n = 0;
    bool null_counts = true;
    if (d.is_array || chance(5)) {
      counts.resize(size_t(std::min<uint64_t>(qprims, 64)));
      const size_t eb = std::max<size_t>(tuple_bytes(d.dtype), 1);
      for (auto& c : counts) {
        if (chance(92)) c = in.ConsumeIntegralInRange<uint64_t>(0, 6);
        else {
          const uint64_t big[] = {(UINT64_MAX / 2) / eb,
                                  (UINT64_MAX / 2) / eb + 1,
                                  kU64Max,
                                  uint64_t(1) << 62,
                                  (uint64_t(1) << 31),
                                  ((UINT64_MAX / 2) / eb) & ~uint64_t(63)};
          c = big[in.ConsumeIntegralInRange<int>(0, 5)];
        }
      }
      n = counts.size();
      null_counts = false;
      if (chance(5)) n = n ? n - 1 : 1;
      if (chance(3)) {
        null_counts = true;
      }
      if (n > counts.size()) counts.resize(size_t(n), 0);
    }
    uint32_t size = sizeof(d);
    if (chance(8)) {
      static const uint32_t sizes[] = {0, 4, 41, 47, 49, 56, 64, 4097, 8192, 65537};
      size = sizes[in.ConsumeIntegralInRange<int>(0, int(std::size(sizes)) - 1)];
    }
    d.struct_size = size;
    struct alignas(8) Raw {
      unsigned char b[8200];
    } raw{};
    std::memcpy(raw.b, &d, sizeof(d));
    if (size > sizeof(d) && size <= sizeof(raw.b) && chance(40))
      raw.b[in.ConsumeIntegralInRange<size_t>(sizeof(d), size - 1)] = 1;
    const bool null_desc = chance(2);
    const auto* desc = null_desc ? nullptr : reinterpret_cast<const kstage_map_desc_t*>(raw.b);
    const uint64_t ordinal = this->ordinal();
    kstage_map_t m = 0x44;
    kstage_status_t st = CALL_A(kstage_map_attribute, stage[0], qa, desc, ordinal,
                                null_counts ? nullptr : counts.data(), n, &m);
    if (st != KSTAGE_OK) {
      if (m != 0x44) oracle("a failed map wrote its out-parameter");
      return;
    }
    if (qi < 0 || !queries[size_t(qi)].live) oracle("a map accepted a dead query handle");
    kstage_map_t mb = 0;
    twin_ok(CALL_B(kstage_map_attribute, stage[1], queries[size_t(qi)].h[1], desc, ordinal,
                   null_counts ? nullptr : counts.data(), n, &mb),
            "map_attribute");
    MapRec rec;
    rec.h[0] = m;
    rec.h[1] = mb;
    rec.live = true;
    maps.push_back(rec);
    if (ti >= 0 && !schemas[size_t(ti)].known) {
      // The schema becomes the column's only if a group is unmapped; learning it early is harmless.
      schemas[size_t(ti)] = Schema{true, d.is_array, d.dtype, d.semantic};
    }
    const int fetches = in.ConsumeIntegralInRange<int>(0, 2);
    for (int i = 0; i < fetches; ++i) fetch_map(maps.size() - 1);
  }

  void fill_map_group(const kstage_map_group_info_t& g, uint32_t fill_seed) {
    if (g.prim_count != g.data.count) oracle("map group prim_count != data.count");
    if (g.data.mask) oracle("map group with a mask");
    const size_t tb = tuple_bytes(g.dtype);
    uint64_t total = 0;
    for (uint64_t i = 0; i < g.data.tensor_count; ++i) {
      const DLTensor& t = g.data.tensors[i];
      if (t.ndim != 1 || !t.shape || t.shape[0] < 0) oracle("map group tensor not canonical");
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(uint64_t(t.shape[0]), uint64_t(tb), &bytes) ||
          __builtin_add_overflow(total, bytes, &total) || total > (uint64_t(1) << 32))
        oracle(
            "a map group hands out tensors of more than 4 GiB in all (tensor %llu: %lld elements "
            "of %zu bytes), "
            "more than kstage can have allocated here: its buffer is smaller than it claims",
            (unsigned long long)i, (long long)t.shape[0], tb);
    }
    if (!g.is_array && g.data.tensor_count != 1)
      oracle("fixed-size map group with %llu tensors", (unsigned long long)g.data.tensor_count);
    if (g.is_array && g.data.tensor_count != g.prim_count)
      oracle("array map group: %llu tensors for %llu prims",
             (unsigned long long)g.data.tensor_count, (unsigned long long)g.prim_count);
    for (uint64_t i = 0; i < g.prim_count; ++i)
      if (g.data.index_map && int64_t(g.data.index_map[i]) >= g.data.tensors[0].shape[0])
        oracle("map index_map out of range");
    for (uint64_t i = 0; i < g.data.tensor_count; ++i) {
      const DLTensor& t = g.data.tensors[i];
      const size_t bytes = size_t(t.shape[0]) * tb;
      if (bytes)
        fill_pattern(static_cast<unsigned char*>(t.data) + t.byte_offset, bytes,
                     fill_seed + uint32_t(i));
    }
  }

  void fetch_map(size_t mi) {
    MapRec& mr = maps[mi];
    kstage_map_group_info_t g{};
    g.handle = 0x33;
    kstage_status_t st = CALL_A(kstage_fetch_map_next, stage[0], mr.h[0], 0, &g);
    if (st != KSTAGE_OK) {
      if (g.handle != 0x33) oracle("a failed fetch_map_next wrote its group");
      if (st != KSTAGE_END_OF_ITERATION && mr.live)
        oracle("fetch_map_next on a live map failed: %s", kstage_last_error());
      return;
    }
    if (!mr.live) oracle("fetch_map_next accepted a dead map");
    kstage_map_group_info_t gb{};
    twin_ok(CALL_B(kstage_fetch_map_next, stage[1], mr.h[1], 0, &gb), "fetch_map_next");
    if (g.prim_count != gb.prim_count || g.data.tensor_count != gb.data.tensor_count)
      oracle("divergence: map groups differ between the stage and its twin");
    const uint32_t s = ++seed;
    fill_map_group(g, s);
    fill_map_group(gb, s);
    MapGroupRec rec;
    rec.h[0] = g.handle;
    rec.h[1] = gb.handle;
    rec.info[0] = g;
    rec.info[1] = gb;
    mr.groups.push_back(rec);
  }

  void op_map_use() {
    if (maps.empty() || chance(4)) {
      uint64_t h = garbage(nullptr);
      kstage_op_t op = 0;
      if (CALL_A(kstage_unmap_attribute, stage[0], h, kstage_device_sync_t{0, 0}, &op) == KSTAGE_OK)
        oracle("unmap_attribute accepted a dead map");
      if (CALL_A(kstage_release_map, stage[0], h) == KSTAGE_OK)
        oracle("release_map accepted a dead map");
      return;
    }
    const size_t mi = in.ConsumeIntegralInRange<size_t>(0, maps.size() - 1);
    MapRec& mr = maps[mi];
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
      case 1: fetch_map(mi); break;
      case 2: {  // unmap one group (or a bogus one)
        uint64_t ga = 0x1234, gb = 0;
        MapGroupRec* gr = nullptr;
        if (!mr.groups.empty() && chance(90)) {
          gr = &mr.groups[in.ConsumeIntegralInRange<size_t>(0, mr.groups.size() - 1)];
          ga = gr->h[0];
          gb = gr->h[1];
        } else if (chance(50) && &maps.front() != &mr && !maps.front().groups.empty()) {
          ga = maps.front().groups.front().h[0];  // another map's group
        }
        kstage_op_t op = 0x77;
        kstage_device_sync_t sync{0, 0};
        if (chance(3)) sync.event = 5;
        kstage_status_t st =
            CALL_A(kstage_unmap_group, stage[0], mr.h[0], ga, sync, chance(2) ? nullptr : &op);
        if (st != KSTAGE_OK) return;
        if (!mr.live || !gr || !gr->mapped) oracle("unmap_group accepted a dead map or group");
        kstage_op_t opb = 0;
        twin_ok(CALL_B(kstage_unmap_group, stage[1], mr.h[1], gb, sync, &opb), "unmap_group");
        gr->mapped = false;
        add_op(op, opb);
        break;
      }
      case 3: {
        kstage_op_t op = 0x77;
        kstage_status_t st = CALL_A(kstage_unmap_attribute, stage[0], mr.h[0],
                                    kstage_device_sync_t{0, 0}, chance(2) ? nullptr : &op);
        if (st != KSTAGE_OK) return;
        if (!mr.live) oracle("unmap_attribute accepted a dead map");
        kstage_op_t opb = 0;
        twin_ok(CALL_B(kstage_unmap_attribute, stage[1], mr.h[1], kstage_device_sync_t{0, 0}, &opb),
                "unmap_attribute");
        add_op(op, opb);
        mr.live = false;
        mr.groups.clear();
        retire(mr.h[0]);
        break;
      }
      case 4: {
        kstage_status_t st = CALL_A(kstage_release_map, stage[0], mr.h[0]);
        if (st != KSTAGE_OK) {
          if (mr.live) oracle("release_map of a live map failed: %s", kstage_last_error());
          return;
        }
        if (!mr.live) oracle("release_map accepted a dead map");
        twin_ok(CALL_B(kstage_release_map, stage[1], mr.h[1]), "release_map");
        mr.live = false;
        mr.groups.clear();
        retire(mr.h[0]);
        break;
      }
      default: {  // export a mapped group's tensor
        if (mr.groups.empty()) return;
        MapGroupRec& gr = mr.groups[in.ConsumeIntegralInRange<size_t>(0, mr.groups.size() - 1)];
        DLManagedTensorVersioned* t = nullptr;
        const uint64_t index = in.ConsumeIntegralInRange<uint64_t>(0, 2);
        const uint64_t flags = chance(80) ? 0 : (chance(50) ? KSTAGE_EXPORT_READ_ONLY : 6);
        kstage_status_t st =
            CALL_A(kstage_map_group_export, stage[0], mr.h[0], gr.h[0], index, flags, &t);
        if (st != KSTAGE_OK) return;
        if (!mr.live || !gr.mapped)
          oracle("map_group_export accepted a dead map or unmapped group");
        if ((flags & KSTAGE_EXPORT_READ_ONLY) && !(t->flags & DLPACK_FLAG_BITMASK_READ_ONLY))
          oracle("a READ_ONLY map group export is writable");
        Export e;
        e.v = t;
        e.checksum = touch_dl(t->dl_tensor);
        // The producer does not write through it after unmap, so its bytes may change once
        // the buffer becomes column storage and is later sealed over: do not compare.
        e.written = true;
        exports.push_back(e);
      }
    }
  }

  // -- ops -------------------------------------------------------------------------------------
  void op_op() {
    uint64_t g = 0;
    const int oi = pick(ops, g);
    const uint64_t ha = oi < 0 ? g : ops[size_t(oi)].h[0];
    const bool dead = oi < 0 || !ops[size_t(oi)].live;
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: {
        kstage_status_t st =
            CALL_A(kstage_wait, stage[0], ha, chance(50) ? 0 : KSTAGE_TIMEOUT_INFINITE);
        if (st == KSTAGE_OK && dead) oracle("kstage_wait accepted a dead op");
        if (st != KSTAGE_OK && !dead)
          oracle("a live host op did not complete: %s", kstage_last_error());
        break;
      }
      case 1: {
        const char* msg = nullptr;
        kstage_status_t st = CALL_A(kstage_op_error, stage[0], ha, chance(3) ? nullptr : &msg);
        if (st == KSTAGE_OK) {
          if (dead) oracle("kstage_op_error accepted a dead op");
          touch(msg, std::strlen(msg));
        }
        break;
      }
      default: {
        kstage_status_t st = CALL_A(kstage_release_op, stage[0], ha);
        if (st == KSTAGE_OK) {
          if (dead) oracle("kstage_release_op accepted a dead op");
          twin_ok(CALL_B(kstage_release_op, stage[1], ops[size_t(oi)].h[1]), "release_op");
          ops[size_t(oi)].live = false;
          retire(ha);
        } else if (!dead) {
          oracle("release_op of a live op failed: %s", kstage_last_error());
        }
      }
    }
  }

  // Any entry point with a stage handle that is not live.
  void op_bad_stage() {
    kstage_stage_t s;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: s = 0; break;
      case 1:
        s = dead_stages.empty()
                ? kU64Max
                : dead_stages[in.ConsumeIntegralInRange<size_t>(0, dead_stages.size() - 1)];
        break;
      case 2: s = queries.empty() ? kU64Max : queries.front().h[0]; break;
      default: s = ops.empty() ? 0 : ops.back().h[0]; break;
    }
    uint64_t out = 0;
    kstage_status_t st;
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: st = CALL_A(kstage_intern_token, s, "t", 1, &out); break;
      case 1: st = CALL_A(kstage_advance_write_floor, s, 5, nullptr, 0); break;
      case 2: st = CALL_A(kstage_get_write_floor, s, 0, &out); break;
      case 3: {
        kstage_filter_t f{};
        st = CALL_A(kstage_query_filter, s, &f, &out);
        break;
      }
      case 4: st = CALL_A(kstage_destroy, s); break;
      default: {
        // A managed write to a dead stage still runs the deleter exactly once.
        auto box = std::make_unique<Managed>();
        box->storage.assign(16, 0);
        box->shape = {1};
        box->m.dl_tensor.data = box->storage.data();
        box->m.dl_tensor.ndim = 1;
        box->m.dl_tensor.shape = box->shape.data();
        box->m.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
        box->m.dl_tensor.device = DLDevice{kDLCPU, 0};
        box->m.version.major = DLPACK_MAJOR_VERSION;
        box->m.manager_ctx = box.get();
        box->m.deleter = managed_deleter;
        box->has_deleter = true;
        box->handed = true;
        DLManagedTensorVersioned* p = &box->m;
        kstage_write_data_t w = kstage_write_data_init();
        w.managed_tensors = &p;
        w.tensor_count = 1;
        Managed* raw = box.get();
        boxes.push_back(std::move(box));
        st = CALL_A(kstage_write_attribute, s, 1, 1, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &out);
        if (st != KSTAGE_OK && raw->deleted != 1)
          oracle("a managed write to a dead stage did not run the deleter once");
      }
    }
    if (st == KSTAGE_OK)
      oracle("a call with the dead stage handle %llu was accepted", (unsigned long long)s);
  }

  void op_create_config() {
    struct alignas(8) Raw {
      unsigned char b[8200];
    } raw{};
    kstage_config_t c = kstage_config_init();
    c.host_execution =
        chance(70) ? in.ConsumeIntegralInRange<int>(0, 2) : in.ConsumeIntegral<int32_t>();
    static const uint32_t sizes[] = {0, 4, 7, 8, 9, 12, 16, 4097, 8192, 65537, UINT32_MAX};
    c.struct_size = chance(30)
                        ? uint32_t(sizeof(c))
                        : sizes[in.ConsumeIntegralInRange<int>(0, int(std::size(sizes)) - 1)];
    std::memcpy(raw.b, &c, sizeof(c));
    if (c.struct_size > sizeof(c) && c.struct_size <= sizeof(raw.b) && chance(50))
      raw.b[in.ConsumeIntegralInRange<size_t>(sizeof(c), c.struct_size - 1)] = 1;
    kstage_stage_t s = 0x11;
    kstage_status_t st = CALL_A(kstage_create, reinterpret_cast<const kstage_config_t*>(raw.b), &s);
    if (st != KSTAGE_OK) {
      if (s != 0x11) oracle("a failed kstage_create wrote its out-parameter");
      if (c.struct_size == 0 && st != KSTAGE_INVALID_ARGUMENT)
        oracle("struct_size 0 gave %s", kstage_status_string(st));
      return;
    }
    if (c.struct_size == 0) oracle("kstage_create accepted struct_size 0");
    if (CALL_A(kstage_destroy, s) != KSTAGE_OK) oracle("destroying a fresh stage failed");
    dead_stages.push_back(s);
  }

  // -- the run ---------------------------------------------------------------------------------
  void run() {
    create_stages();
    int steps = 0;
    while (in.remaining_bytes() > 0 && steps++ < 160) {
      if (!alive) create_stages();
      const int op = in.ConsumeIntegralInRange<int>(0, 31);
      switch (op) {
        case 0:
        case 1: op_intern(true); break;
        case 2:
        case 3: op_intern(false); break;
        case 4: op_strings(); break;
        case 5: op_list_create(); break;
        case 6: op_list_use(); break;
        case 7:
        case 8: op_query_paths(); break;
        case 9:
          if (chance(50)) op_query_filter();
          else if (chance(50)) op_query_filter_ex();
          else op_hierarchy();
          break;
        case 10: op_query_use(); break;
        case 11:
        case 12:
        case 13: op_write(false); break;
        case 14: op_write(true); break;
        case 15:
          if (chance(30)) op_clone();
          else op_delete();
          break;
        case 16:
        case 17: op_seal(); break;
        case 18: op_floor(); break;
        case 19:
        case 20: op_read(); break;
        case 21: op_read_use(); break;
        case 22:
        case 23: op_group(); break;
        case 24: op_drop_export(); break;
        case 25: op_map(); break;
        case 26:
        case 27: op_map_use(); break;
        case 28: op_op(); break;
        case 29: compare("at a checkpoint"); break;
        case 30:
          if (chance(30)) destroy_stages();
          else op_bad_stage();
          break;
        default: op_create_config(); break;
      }
    }
    finish();
  }

  void finish() {
    if (alive) {
      // Release a random part of what is held, so destroy frees the rest.
      for (auto& gr : groups)
        if (gr.live && (gr.h & 1)) release_group(gr);
      compare("at the end");
      const uint64_t top = std::max<uint64_t>(ord, kU64Max - 1);
      kstage_status_t a = CALL_A(kstage_advance_write_floor, stage[0], top, nullptr, 0);
      kstage_status_t b = CALL_B(kstage_advance_write_floor, stage[1], top, nullptr, 0);
      if (a != b)
        oracle("divergence: the final seal gave %s vs %s on the twin", kstage_status_string(a),
               kstage_status_string(b));
      compare("after sealing everything");
      for (auto& gr : groups)
        if (gr.live && !gr.dirty && group_checksum(gr.g) != gr.checksum)
          oracle("a read group's data changed before it was released (final seal)");
      destroy_stages();
    }
    // Exports outlive the groups, the seals and the stage: their data is still intact.
    for (auto& e : exports)
      if (e.v || e.legacy) drop_export(e);
    for (auto& b : boxes) {
      if (b->handed && b->expect_once && b->has_deleter && b->deleted != 1)
        oracle("a managed tensor's deleter ran %d times (expected exactly once, by the end)",
               b->deleted);
      if (!b->handed && b->deleted != 0)
        oracle("the deleter of a managed tensor that was never handed over ran %d times",
               b->deleted);
      unpoison(*b);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* t = std::getenv("KSTAGE_FUZZ_TRACE");
  g_trace = t && t[0] && t[0] != '0';
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  State s(in);
  s.run();
  return 0;
}
