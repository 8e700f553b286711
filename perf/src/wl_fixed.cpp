// SPDX-License-Identifier: Apache-2.0
// Fixed-size attribute workloads through the C API: writes (dense, index_map, mask), seals,
// latest reads (zero-copy and compact, in row order and with index_map sharing) and
// change-range reads after a sparse tick.
//
// Every workload of one (dtype, lanes) in a context shares the attribute "fx_<dtype>x<lanes>";
// prepare() first puts the column into a known base state (a dense write of data set 2 over
// every prim, sealed), so each workload starts from the same column whatever ran before.
#include "context.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace kperf {
namespace {

constexpr uint64_t kSaltSrc = 1, kSaltBase = 2;
constexpr uint64_t kSeedPerm = 0x5EED0002, kSeedMask50 = 0x5EED0050, kSeedMask05 = 0x5EED0005;

template <class T>
class FixedBase : public Instance {
 protected:
  FixedBase(Context& cx, const Shape& s) : cx_(cx), s_(s) {
    name_ = std::string("fx_") + (s.dtype == DType::F32 ? "f32" : "f64") + "x" +
            std::to_string(s.lanes);
    attr_ = cx.token(name_);
  }
  uint64_t n() const { return s_.rows; }
  size_t rb() const { return s_.row_bytes(); }

  // Data set `salt`, all rows, as a canonical tensor.
  void make_source(uint64_t salt) {
    src_ = HostBuf(n() * rb());
    fill_values(src_.as<T>(), n(), s_.lanes, salt);
    src_shape_[0] = int64_t(n());
    tensor_ = make_tensor(src_.p, s_.dtype, s_.lanes, src_shape_);
  }
  kstage_write_data_t dense_data(const DLTensor* t) const {
    kstage_write_data_t d;
    d = kstage_write_data_init();
    d.tensors = t;
    d.tensor_count = 1;
    d.semantic = KSTAGE_SEMANTIC_NONE;
    return d;
  }
  // Column := data set `salt` for every prim, sealed.
  void write_dense_sealed(uint64_t salt) {
    HostBuf b(n() * rb());
    fill_values(b.as<T>(), n(), s_.lanes, salt);
    int64_t shape[1] = {int64_t(n())};
    const DLTensor t = make_tensor(b.p, s_.dtype, s_.lanes, shape);
    const uint64_t o = cx_.next_ordinal();
    cx_.write(cx_.all(), attr_, o, dense_data(&t));
    cx_.seal(o, attr_);
    cx_.note_column(name_, double(n() * rb()));
  }
  // Reads every prim (zero-copy) and compares with expected(prim index, lane).
  template <class E>
  std::string verify_column(E&& expected) {
    std::string bad;
    uint64_t seen = 0;
    read_groups(cx_.stage(), cx_.all(), attr_, nullptr, [&](const kstage_read_group_t& g) {
      if (bad.empty()) bad = check_fixed_group<T>(g, s_.lanes, cx_.paths(), seen, expected);
      seen += g.prim_count;
    });
    if (bad.empty() && seen != n())
      bad = "the column holds " + std::to_string(seen) + " prims, expected " + std::to_string(n());
    return bad;
  }

  Context& cx_;
  Shape s_;
  std::string name_;
  kstage_token_t attr_ = 0;
  HostBuf src_;
  int64_t src_shape_[1] = {0};
  DLTensor tensor_{};
};

// ---- writes and seals --------------------------------------------------------------------------
enum class WriteKind { Dense, DenseUpdate, IndexMapRandom, IndexMapLocal, Mask };
enum class Timed { Write, WriteSeal, Seal };

template <class T>
class WriteInstance final : public FixedBase<T> {
  using B = FixedBase<T>;

 public:
  WriteInstance(Context& cx, const Shape& s, WriteKind kind, Timed timed, double p = 0,
                bool adopt = false)
      : B(cx, s), kind_(kind), timed_(timed), p_(p), adopt_(adopt) {}

  void prepare() override {
    B::write_dense_sealed(kSaltBase);
    B::make_source(kSaltSrc);
    data_ = B::dense_data(&this->tensor_);
    query_ = this->cx_.all();
    const uint64_t n = B::n();
    switch (kind_) {
      case WriteKind::Dense: count_ = n; break;
      case WriteKind::DenseUpdate:
        count_ = n;
        mode_ = KSTAGE_PRIM_MODE_UPDATE;
        break;
      case WriteKind::IndexMapRandom:
        map_ = random_permutation(n, kSeedPerm);
        count_ = n;
        data_.count = n;
        data_.index_map = map_.data();
        break;
      case WriteKind::IndexMapLocal:
        // The query holds prims 0, 4, 8, ...; element i takes source row 4i (sorted, strided).
        query_ = this->cx_.strided(4);
        count_ = (n + 3) / 4;
        map_.resize(count_);
        for (uint64_t i = 0; i < count_; ++i) map_[i] = uint32_t(4 * i);
        data_.count = count_;
        data_.index_map = map_.data();
        break;
      case WriteKind::Mask:
        mask_ = random_mask(n, p_, p_ > 0.25 ? kSeedMask50 : kSeedMask05);
        for (uint64_t w : mask_) count_ += uint64_t(__builtin_popcountll(w));
        data_.count = n;
        data_.mask = mask_.data();
        break;
    }
  }
  void before() override {
    ordinal_ = this->cx_.next_ordinal();
    if (adopt_) hand_over();
    if (timed_ == Timed::Seal) this->cx_.write(query_, this->attr_, ordinal_, data_, mode_);
  }
  void run() override {
    if (timed_ != Timed::Seal) this->cx_.write(query_, this->attr_, ordinal_, data_, mode_);
    if (timed_ != Timed::Write) this->cx_.seal(ordinal_, this->attr_);
  }
  std::string check() const {
    return adopt_ && managed_.manager_ctx != nullptr
               ? "the stage still holds the adopted source after its seal"
               : std::string();
  }
  void after() override {
    if (timed_ == Timed::Write) this->cx_.seal(ordinal_, this->attr_);
  }
  std::string verify() override {
    if (std::string bad = check(); !bad.empty()) return bad;
    return B::verify_column([&](uint64_t k, int l) -> double {
      switch (kind_) {
        case WriteKind::Dense:
        case WriteKind::DenseUpdate: return value_of(kSaltSrc, k, l);
        case WriteKind::IndexMapRandom: return value_of(kSaltSrc, map_[k], l);
        case WriteKind::IndexMapLocal:
          return k % 4 ? value_of(kSaltBase, k, l) : value_of(kSaltSrc, k, l);
        case WriteKind::Mask:
          return mask_bit(mask_.data(), k) ? value_of(kSaltSrc, k, l) : value_of(kSaltBase, k, l);
      }
      return 0;
    });
  }
  double payload_bytes() const override { return double(count_) * double(this->rb()); }
  double items() const override { return double(count_); }

 private:
  WriteKind kind_;
  Timed timed_;
  // The source handed over as a managed tensor (read-only: the stage never writes into it),
  // its memory the instance's own: the deleter only marks it free for the next repetition.
  void hand_over() {
    if (managed_.manager_ctx != nullptr) throw std::runtime_error(check());
    managed_ = DLManagedTensorVersioned{};
    managed_.version.major = DLPACK_MAJOR_VERSION;
    managed_.manager_ctx = this;
    managed_.deleter = [](DLManagedTensorVersioned* self) { self->manager_ctx = nullptr; };
    managed_.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    managed_.dl_tensor = this->tensor_;
    managed_list_[0] = &managed_;
    data_.tensors = nullptr;
    data_.managed_tensors = managed_list_;
  }

  double p_;
  bool adopt_;
  DLManagedTensorVersioned managed_{};
  DLManagedTensorVersioned* managed_list_[1] = {nullptr};
  kstage_prim_mode_t mode_ = KSTAGE_PRIM_MODE_UPSERT;
  kstage_write_data_t data_ = kstage_write_data_init();
  kstage_query_t query_ = 0;
  std::vector<uint32_t> map_;
  std::vector<uint64_t> mask_;
  uint64_t count_ = 0, ordinal_ = 0;
};

// ---- reads -----------------------------------------------------------------------------------
enum class ReadKind { Latest, Shuffled, ChangeRange };

template <class T>
class ReadInstance final : public FixedBase<T> {
  using B = FixedBase<T>;

 public:
  ReadInstance(Context& cx, const Shape& s, ReadKind kind, bool compact)
      : B(cx, s), kind_(kind), compact_(compact) {}

  void prepare() override {
    desc_ = kstage_read_desc_init();
    desc_.compact = compact_;
    const uint64_t n = B::n();
    if (kind_ == ReadKind::ChangeRange) {
      // A sparse tick: 5% of the prims change at ordinal `tick`; the read asks for [tick, tick].
      B::write_dense_sealed(kSaltBase);
      B::make_source(kSaltSrc);
      const auto mask = random_mask(n, 0.05, kSeedMask05);
      kstage_write_data_t d = B::dense_data(&this->tensor_);
      d.count = n;
      d.mask = mask.data();
      const uint64_t tick = this->cx_.next_ordinal();
      this->cx_.write(this->cx_.all(), this->attr_, tick, d);
      this->cx_.seal(tick, this->attr_);
      for (uint64_t i = 0; i < n; ++i)
        if (mask_bit(mask.data(), i)) rows_.push_back(uint32_t(i));
      desc_.change_range = true;
      desc_.range_begin = desc_.range_end = tick;
      query_ = this->cx_.all();
      this->src_ = HostBuf();
    } else {
      B::write_dense_sealed(kSaltSrc);
      if (kind_ == ReadKind::Shuffled) {
        const auto& perm = this->cx_.shuffle_perm();
        rows_.assign(perm.begin(), perm.end());
        query_ = this->cx_.shuffled();
      } else {
        query_ = this->cx_.all();
      }
    }
  }
  void run() override {
    seen_ = 0;
    read_groups(this->cx_.stage(), query_, this->attr_, &desc_,
                [&](const kstage_read_group_t& g) { seen_ += g.prim_count; });
  }
  std::string verify() override {
    const uint64_t expect = kind_ == ReadKind::Latest ? B::n() : rows_.size();
    if (seen_ != expect)
      return "the read returned " + std::to_string(seen_) + " prims, expected " +
             std::to_string(expect);
    std::vector<kstage_path_t> want(expect);
    for (uint64_t k = 0; k < expect; ++k)
      want[k] = this->cx_.paths()[kind_ == ReadKind::Latest ? k : rows_[k]];
    std::string bad;
    uint64_t first = 0;
    read_groups(this->cx_.stage(), query_, this->attr_, &desc_, [&](const kstage_read_group_t& g) {
      if (!bad.empty()) return;
      if (compact_ && g.data.index_map) bad = "a compact read returned an index_map";
      if (bad.empty())
        bad = check_fixed_group<T>(g, this->s_.lanes, want, first, [&](uint64_t k, int l) {
          return value_of(kSaltSrc, kind_ == ReadKind::Latest ? k : rows_[k], l);
        });
      first += g.prim_count;
    });
    return bad;
  }
  double payload_bytes() const override {
    return double(kind_ == ReadKind::Latest ? B::n() : rows_.size()) * double(this->rb());
  }
  double items() const override {
    return double(kind_ == ReadKind::Latest ? B::n() : rows_.size());
  }

 private:
  ReadKind kind_;
  bool compact_;
  kstage_read_desc_t desc_ = kstage_read_desc_init();
  kstage_query_t query_ = 0;
  std::vector<uint32_t> rows_;  // Shuffled: source row of element k; ChangeRange: changed rows
  uint64_t seen_ = 0;
};

// ---- registration ----------------------------------------------------------------------------
template <template <class> class I, class... A>
std::unique_ptr<Instance> make_fixed(Context& cx, const Shape& s, A... a) {
  if (s.dtype == DType::F32) return std::make_unique<I<float>>(cx, s, a...);
  return std::make_unique<I<double>>(cx, s, a...);
}

double fixed_ws(const Shape& s) {
  // the column + the source + the staged copy + the old column (or a compact read's buffer),
  // plus index arrays and the read's per-prim lists
  return 4.0 * double(s.dense_bytes()) + 24.0 * double(s.rows);
}

void reg_write(const char* name, const char* desc, const char* params, const char* loop,
               const char* numpy, bool big, WriteKind kind, Timed timed, double p = 0,
               bool adopt = false) {
  WorkloadDef d;
  d.name = name;
  d.family = timed == Timed::Seal ? "seal" : "write";
  d.description = desc;
  d.params = params;
  d.loop_key = loop;
  d.numpy_key = numpy;
  d.big_ok = big;
  d.working_set = fixed_ws;
  d.make = [=](Context& cx, const Shape& s) {
    return make_fixed<WriteInstance>(cx, s, kind, timed, p, adopt);
  };
  RegisterWorkload{std::move(d)};
}

void reg_read(const char* name, const char* desc, const char* loop, const char* numpy, bool big,
              ReadKind kind, bool compact) {
  WorkloadDef d;
  d.name = name;
  d.family = kind == ReadKind::ChangeRange ? "change" : "read";
  d.description = desc;
  d.params = kind == ReadKind::ChangeRange ? "p=0.05" : "";
  d.loop_key = loop;
  d.numpy_key = numpy;
  d.big_ok = big;
  d.working_set = fixed_ws;
  d.make = [=](Context& cx, const Shape& s) {
    return make_fixed<ReadInstance>(cx, s, kind, compact);
  };
  RegisterWorkload{std::move(d)};
}

const bool registered = [] {
  reg_write("write_dense",
            "dense write of every prim: kstage_write_attribute + kstage_wait (seal untimed)", "",
            "copy", "copy", true, WriteKind::Dense, Timed::Write);
  reg_write("write_dense_seal", "dense write + wait + seal (kstage_advance_write_floor)", "",
            "copy", "copy", true, WriteKind::Dense, Timed::WriteSeal);
  reg_write("write_dense_update", "dense write in PRIM_MODE_UPDATE (prim-existence check) + wait",
            "mode=UPDATE", "copy", "copy", false, WriteKind::DenseUpdate, Timed::Write);
  reg_write("write_index_map_random",
            "index_map write, random permutation of every prim: write + wait (seal untimed)",
            "perm", "gather_perm", "gather_perm", false, WriteKind::IndexMapRandom, Timed::Write);
  reg_write("write_index_map_random_seal",
            "index_map write, random permutation: write + wait + seal", "perm", "gather_perm",
            "gather_perm", false, WriteKind::IndexMapRandom, Timed::WriteSeal);
  reg_write(
      "write_index_map_local",
      "index_map write, local: query of prims 0,4,8.. takes source rows 0,4,8.. (sorted, strided)",
      "stride=4", "gather_scatter_stride4", "gather_scatter_stride4", false,
      WriteKind::IndexMapLocal, Timed::Write);
  reg_write("write_index_map_local_seal", "index_map write, local (stride 4): write + wait + seal",
            "stride=4", "gather_scatter_stride4", "gather_scatter_stride4", false,
            WriteKind::IndexMapLocal, Timed::WriteSeal);
  reg_write("write_mask_50", "mask write, 50% of the prims selected: write + wait (seal untimed)",
            "p=0.5", "masked_p50", "masked_p50", false, WriteKind::Mask, Timed::Write, 0.5);
  reg_write("write_mask_50_seal", "mask write, 50%: write + wait + seal", "p=0.5", "masked_p50",
            "masked_p50", false, WriteKind::Mask, Timed::WriteSeal, 0.5);
  reg_write("write_mask_05", "mask write, 5% of the prims selected: write + wait (seal untimed)",
            "p=0.05", "masked_p05", "masked_p05", false, WriteKind::Mask, Timed::Write, 0.05);
  reg_write("write_mask_05_seal", "mask write, 5%: write + wait + seal", "p=0.05", "masked_p05",
            "masked_p05", false, WriteKind::Mask, Timed::WriteSeal, 0.05);
  // Issue 12: the same sealed sparse writes of a managed tensor, which the write adopts (no copy
  // at the call; the seal moves each selected row once).
  reg_write("write_index_map_random_adopt_seal",
            "index_map write of an adopted managed tensor, random permutation: write + wait + seal",
            "perm,adopt", "gather_perm", "gather_perm", false, WriteKind::IndexMapRandom,
            Timed::WriteSeal, 0, true);
  reg_write("write_index_map_local_adopt_seal",
            "index_map write of an adopted managed tensor, local (stride 4): write + wait + seal",
            "stride=4,adopt", "gather_scatter_stride4", "gather_scatter_stride4", false,
            WriteKind::IndexMapLocal, Timed::WriteSeal, 0, true);
  reg_write("write_mask_50_adopt_seal",
            "mask write of an adopted managed tensor, 50%: write + wait + seal", "p=0.5,adopt",
            "masked_p50", "masked_p50", false, WriteKind::Mask, Timed::WriteSeal, 0.5, true);
  reg_write("write_mask_05_adopt_seal",
            "mask write of an adopted managed tensor, 5%: write + wait + seal", "p=0.05,adopt",
            "masked_p05", "masked_p05", false, WriteKind::Mask, Timed::WriteSeal, 0.05, true);
  reg_write("seal_dense", "seal alone after a dense write (the staged buffer becomes the column)",
            "", "copy", "copy", false, WriteKind::Dense, Timed::Seal);
  reg_write("seal_index_map_random", "seal alone after a random-permutation index_map write",
            "perm", "copy", "copy", false, WriteKind::IndexMapRandom, Timed::Seal);
  reg_write("seal_index_map_local", "seal alone after a local (stride 4) index_map write (scatter)",
            "stride=4", "gather_scatter_stride4", "gather_scatter_stride4", false,
            WriteKind::IndexMapLocal, Timed::Seal);
  reg_write("seal_mask_05", "seal alone after a 5% mask write (scatter of the staged rows)",
            "p=0.05", "scatter_p05", "scatter_p05", false, WriteKind::Mask, Timed::Seal, 0.05);
  reg_read("read_latest", "latest read of every prim, zero-copy (column storage, no index_map)",
           "copy", "copy", true, ReadKind::Latest, false);
  reg_read("read_latest_compact", "latest read of every prim, compact=true (rows gathered)", "copy",
           "copy", true, ReadKind::Latest, true);
  reg_read("read_shuffled",
           "latest read, query in shuffled prim order: zero-copy + index_map sharing",
           "gather_perm", "gather_perm", false, ReadKind::Shuffled, false);
  reg_read("read_shuffled_compact", "latest read, query in shuffled order, compact=true (gather)",
           "gather_perm", "gather_perm", false, ReadKind::Shuffled, true);
  reg_read("read_change_range", "change-range read [t, t] after a 5% mask tick at t, zero-copy",
           "scan_gather_p05", "scan_gather_p05", false, ReadKind::ChangeRange, false);
  reg_read("read_change_range_compact", "change-range read after a 5% tick, compact=true",
           "scan_gather_p05", "scan_gather_p05", false, ReadKind::ChangeRange, true);
  return true;
}();

}  // namespace
}  // namespace kperf
