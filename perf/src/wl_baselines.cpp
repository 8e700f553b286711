// SPDX-License-Identifier: Apache-2.0
// Baselines measured in the same run as kstage: memcpy (warm and into fresh memory),
// Kokkos::deep_copy on the Serial and the OpenMP execution space, and the plain serial C++
// loops a user would write instead of each kstage operation. Each loop moves the same payload
// as the kstage workload that names its key (docs/performance.md, "Bytes").
#include "harness.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kperf {
namespace {

// ---- memcpy ----------------------------------------------------------------------------------
class MemcpyInstance final : public Instance {
 public:
  MemcpyInstance(size_t bytes, bool fresh) : bytes_(bytes), fresh_(fresh) {}
  void prepare() override {
    src_ = HostBuf(bytes_);
    std::memset(src_.p, 0x5A, bytes_);
    if (!fresh_) {
      dst_ = HostBuf(bytes_);
      std::memset(dst_.p, 0, bytes_);
    }
  }
  void run() override {
    if (fresh_) {
      // What a copy into newly allocated memory costs (allocation + first touch + free),
      // as kstage's write path does when it stages a write into a new buffer.
      void* d = std::malloc(bytes_);
      std::memcpy(d, src_.p, bytes_);
      last_ok_ = static_cast<unsigned char*>(d)[bytes_ - 1] == 0x5A;
      std::free(d);
    } else {
      std::memcpy(dst_.p, src_.p, bytes_);
    }
  }
  std::string verify() override {
    if (fresh_) return last_ok_ ? "" : "memcpy into fresh memory lost data";
    return std::memcmp(dst_.p, src_.p, bytes_) == 0 ? "" : "memcpy result differs";
  }
  double payload_bytes() const override { return double(bytes_); }

 private:
  size_t bytes_;
  bool fresh_;
  bool last_ok_ = false;
  HostBuf src_, dst_;
};

// ---- Kokkos::deep_copy -----------------------------------------------------------------------
template <class Exec>
class DeepCopyInstance final : public Instance {
 public:
  explicit DeepCopyInstance(size_t bytes) : bytes_(bytes) {}
  void prepare() override {
    src_ = HostBuf(bytes_);
    dst_ = HostBuf(bytes_);
    std::memset(src_.p, 0x3C, bytes_);
    std::memset(dst_.p, 0, bytes_);
  }
  void run() override {
    using V =
        Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    V d(dst_.as<unsigned char>(), bytes_), s(src_.as<unsigned char>(), bytes_);
    Exec exec;
    Kokkos::deep_copy(exec, d, s);
    exec.fence();
  }
  std::string verify() override {
    return std::memcmp(dst_.p, src_.p, bytes_) == 0 ? "" : "deep_copy result differs";
  }
  double payload_bytes() const override { return double(bytes_); }

 private:
  size_t bytes_;
  HostBuf src_, dst_;
};

// ---- plain serial loops ----------------------------------------------------------------------
template <class T, int L>
inline void copy_row(T* __restrict d, const T* __restrict s, int lanes) {
  if constexpr (L > 0) {
    for (int l = 0; l < L; ++l) d[l] = s[l];
  } else {
    for (int l = 0; l < lanes; ++l) d[l] = s[l];
  }
}

// Stride4TwoPass: the stride-4 local write as a sealed write must move it, in two passes -- a
// gather of the selected rows into a staging buffer (the write's isolation until the seal), then
// a scatter of the staging buffer into the destination (the seal). The floor of the sealed
// local index_map write; Stride4 is the one pass a user's loop needs without isolation.
enum class LoopKind { Copy, GatherPerm, Stride4, Stride4TwoPass, Masked, Scatter, ScanGather };

// `threads` > 1: the same loop under `#pragma omp parallel for` (static schedule), what a
// user would write to use the machine's cores; it shows what 2 threads give on this machine
// in this run, next to kstage's parallel figures.
template <class T, int L>
class LoopInstance final : public Instance {
 public:
  LoopInstance(const Shape& s, LoopKind kind, double p, int threads)
      : s_(s), kind_(kind), p_(p), threads_(threads) {}
  void prepare() override {
    const uint64_t n = s_.rows, w = uint64_t(s_.lanes);
    src_ = HostBuf(n * s_.row_bytes());
    dst_ = HostBuf(n * s_.row_bytes());
    fill_values(src_.as<T>(), n, s_.lanes, 1);
    fill_values(dst_.as<T>(), n, s_.lanes, 2);
    (void)w;
    switch (kind_) {
      case LoopKind::GatherPerm:
        perm_ = random_permutation(n, 0x5EED0002);
        count_ = n;
        break;
      case LoopKind::Stride4: count_ = (n + 3) / 4; break;
      case LoopKind::Stride4TwoPass:
        count_ = (n + 3) / 4;
        staged_ = HostBuf(count_ * s_.row_bytes());
        std::memset(staged_.p, 0, count_ * s_.row_bytes());
        break;
      case LoopKind::Masked:
        mask_ = random_mask(n, p_, p_ > 0.25 ? 0x5EED0050 : 0x5EED0005);
        for (uint64_t x : mask_) count_ += uint64_t(__builtin_popcountll(x));
        break;
      case LoopKind::Scatter:
      case LoopKind::ScanGather: {
        const auto m = random_mask(n, p_, 0x5EED0005);
        for (uint64_t i = 0; i < n; ++i)
          if (mask_bit(m.data(), i)) idx_.push_back(uint32_t(i));
        count_ = idx_.size();
        if (kind_ == LoopKind::ScanGather) {
          changed_at_.assign(n, 1);
          for (uint32_t i : idx_) changed_at_[i] = 2;
        }
        break;
      }
      case LoopKind::Copy: count_ = n; break;
    }
  }
  void run() override {
    const T* __restrict s = src_.as<T>();
    T* __restrict d = dst_.as<T>();
    const uint64_t n = s_.rows, w = uint64_t(s_.lanes);
    const int lanes = s_.lanes;
    const int nt = threads_;
    (void)nt;
    switch (kind_) {
      case LoopKind::Copy:
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t i = 0; i < n; ++i) copy_row<T, L>(d + i * w, s + i * w, lanes);
        break;
      case LoopKind::GatherPerm: {
        const uint32_t* perm = perm_.data();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t i = 0; i < n; ++i)
          copy_row<T, L>(d + i * w, s + uint64_t(perm[i]) * w, lanes);
        break;
      }
      case LoopKind::Stride4:
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t i = 0; i < n; i += 4) copy_row<T, L>(d + i * w, s + i * w, lanes);
        break;
      case LoopKind::Stride4TwoPass: {
        T* __restrict t = staged_.as<T>();
        const uint64_t m = count_;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t j = 0; j < m; ++j) copy_row<T, L>(t + j * w, s + 4 * j * w, lanes);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t j = 0; j < m; ++j) copy_row<T, L>(d + 4 * j * w, t + j * w, lanes);
        break;
      }
      case LoopKind::Masked: {
        const uint64_t* m = mask_.data();
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (uint64_t i = 0; i < n; ++i)
          if ((m[i >> 6] >> (i & 63)) & 1u) copy_row<T, L>(d + i * w, s + i * w, lanes);
        break;
      }
      case LoopKind::Scatter:
        for (uint64_t j = 0; j < idx_.size(); ++j)
          copy_row<T, L>(d + uint64_t(idx_[j]) * w, s + j * w, lanes);
        break;
      case LoopKind::ScanGather: {
        uint64_t k = 0;
        const uint64_t* c = changed_at_.data();
        for (uint64_t i = 0; i < n; ++i)
          if (c[i] == 2) copy_row<T, L>(d + (k++) * w, s + i * w, lanes);
        break;
      }
    }
  }
  std::string verify() override {
    const T* s = src_.as<T>();
    const T* d = dst_.as<T>();
    const uint64_t n = s_.rows, w = uint64_t(s_.lanes);
    auto row_eq = [&](uint64_t di, uint64_t si) {
      return std::memcmp(d + di * w, s + si * w, s_.row_bytes()) == 0;
    };
    for (uint64_t i = 0; i < n; ++i) {
      bool ok = true;
      switch (kind_) {
        case LoopKind::Copy: ok = row_eq(i, i); break;
        case LoopKind::GatherPerm: ok = row_eq(i, perm_[i]); break;
        case LoopKind::Stride4:
        case LoopKind::Stride4TwoPass:
          ok = i % 4 ? d[i * w] == T(value_of(2, i, 0)) : row_eq(i, i);
          break;
        case LoopKind::Masked:
          ok = mask_bit(mask_.data(), i) ? row_eq(i, i) : d[i * w] == T(value_of(2, i, 0));
          break;
        case LoopKind::Scatter:
        case LoopKind::ScanGather: break;
      }
      if (!ok) return "serial loop result differs at row " + std::to_string(i);
    }
    for (uint64_t j = 0; j < idx_.size(); ++j) {
      const bool ok = kind_ == LoopKind::Scatter ? row_eq(idx_[j], j) : row_eq(j, idx_[j]);
      if (!ok) return "serial loop result differs at element " + std::to_string(j);
    }
    return "";
  }
  double payload_bytes() const override { return double(count_) * double(s_.row_bytes()); }
  double items() const override { return double(count_); }

 private:
  Shape s_;
  LoopKind kind_;
  double p_;
  int threads_;
  uint64_t count_ = 0;
  HostBuf src_, dst_, staged_;
  std::vector<uint32_t> perm_, idx_;
  std::vector<uint64_t> mask_, changed_at_;
};

std::unique_ptr<Instance> make_loop(const Shape& s, LoopKind kind, double p = 0, int threads = 1) {
  return dispatch(s, [&](auto tag, auto lanes) -> std::unique_ptr<Instance> {
    using T = typename decltype(tag)::type;
    return std::make_unique<LoopInstance<T, decltype(lanes)::value>>(s, kind, p, threads);
  });
}

// Ragged pack: rows of varying length (elements of `lanes` lanes) copied one after another
// into a packed buffer, as kstage stages a ragged write or gathers a compact ragged read.
class RaggedPackInstance final : public Instance {
 public:
  RaggedPackInstance(const Shape& s, std::string dist) : s_(s), dist_(std::move(dist)) {}
  void prepare() override {
    const auto len = ragged_lengths(dist_, s_.rows, 0x5EED0100);
    const size_t eb = s_.row_bytes();
    off_.resize(s_.rows);
    bytes_.resize(s_.rows);
    uint64_t cursor = 0;
    for (uint64_t i = 0; i < s_.rows; ++i) {
      off_[i] = cursor;
      bytes_[i] = len[i] * eb;
      cursor += bytes_[i];
    }
    total_ = cursor;
    src_ = HostBuf(total_);
    dst_ = HostBuf(total_);
    auto* p = src_.as<unsigned char>();
    for (uint64_t b = 0; b < total_; ++b) p[b] = (unsigned char)(mix64(b) >> 56);
    std::memset(dst_.p, 0, total_);
    // Rows are reached through per-row pointers (as with one DLTensor per row).
    rows_.resize(s_.rows);
    for (uint64_t i = 0; i < s_.rows; ++i) rows_[i] = p + off_[i];
  }
  void run() override {
    unsigned char* d = dst_.as<unsigned char>();
    for (uint64_t i = 0; i < s_.rows; ++i) std::memcpy(d + off_[i], rows_[i], bytes_[i]);
  }
  std::string verify() override {
    return std::memcmp(dst_.p, src_.p, total_) == 0 ? "" : "ragged pack result differs";
  }
  double payload_bytes() const override { return double(total_); }
  double items() const override { return double(s_.rows); }

 private:
  Shape s_;
  std::string dist_;
  uint64_t total_ = 0;
  std::vector<uint64_t> off_, bytes_;
  std::vector<const unsigned char*> rows_;
  HostBuf src_, dst_;
};

// The particles tick pair in plain arrays: a mask tick (2 attributes, full arrays, a mask over
// all particles), an index_map tick (2 attributes, compact rows of the moved particles in a
// shuffled order scattered to their slots), and after each the consumer's gather of the moved
// positions.
class ParticlesLoopInstance final : public Instance {
 public:
  explicit ParticlesLoopInstance(uint64_t n) : n_(n), m_(std::max<uint64_t>(1, n * 5 / 100)) {}
  void prepare() override {
    for (auto* b : {&pos_col_, &vel_col_, &pos_, &vel_, &pos_out_, &vel_out_, &read_})
      *b = HostBuf(n_ * 12);
    fill_values(pos_.as<float>(), n_, 3, 11);
    fill_values(vel_.as<float>(), n_, 3, 12);
    fill_values(pos_col_.as<float>(), n_, 3, 2);
    fill_values(vel_col_.as<float>(), n_, 3, 2);
    mask_ = random_mask(n_, double(m_) / double(n_), 0x5EED0200);
    for (uint64_t i = 0; i < n_; ++i)
      if (mask_bit(mask_.data(), i)) moved_a_.push_back(uint32_t(i));
    const auto perm = random_permutation(n_, 0x5EED0201);
    std::vector<uint32_t> chosen(perm.begin(), perm.begin() + long(m_));
    sorted_b_ = chosen;
    std::sort(sorted_b_.begin(), sorted_b_.end());
    // compact rows in `chosen` order; index_map[i] = slot of sorted_b_[i] in `chosen`
    std::vector<uint32_t> slot(n_);
    for (uint64_t i = 0; i < m_; ++i) slot[chosen[i]] = uint32_t(i);
    index_map_.resize(m_);
    for (uint64_t i = 0; i < m_; ++i) index_map_[i] = slot[sorted_b_[i]];
    fill_values(pos_out_.as<float>(), m_, 3, 13);
    fill_values(vel_out_.as<float>(), m_, 3, 14);
  }
  void run() override {
    float* pc = pos_col_.as<float>();
    float* vc = vel_col_.as<float>();
    const float* p = pos_.as<float>();
    const float* v = vel_.as<float>();
    float* out = read_.as<float>();
    const uint64_t* m = mask_.data();
    for (uint64_t i = 0; i < n_; ++i)  // mask tick, both attributes
      if ((m[i >> 6] >> (i & 63)) & 1u) {
        copy_row<float, 3>(pc + 3 * i, p + 3 * i, 3);
        copy_row<float, 3>(vc + 3 * i, v + 3 * i, 3);
      }
    for (uint64_t k = 0; k < moved_a_.size(); ++k)  // consumer: the moved positions
      copy_row<float, 3>(out + 3 * k, pc + 3 * uint64_t(moved_a_[k]), 3);
    const float* po = pos_out_.as<float>();
    const float* vo = vel_out_.as<float>();
    for (uint64_t i = 0; i < m_; ++i) {  // index_map tick, both attributes
      copy_row<float, 3>(pc + 3 * uint64_t(sorted_b_[i]), po + 3 * uint64_t(index_map_[i]), 3);
      copy_row<float, 3>(vc + 3 * uint64_t(sorted_b_[i]), vo + 3 * uint64_t(index_map_[i]), 3);
    }
    for (uint64_t k = 0; k < m_; ++k)
      copy_row<float, 3>(out + 3 * k, pc + 3 * uint64_t(sorted_b_[k]), 3);
  }
  std::string verify() override {
    const float* pc = pos_col_.as<float>();
    const float* po = pos_out_.as<float>();
    for (uint64_t i = 0; i < m_; ++i)
      if (std::memcmp(pc + 3 * uint64_t(sorted_b_[i]), po + 3 * uint64_t(index_map_[i]), 12) != 0)
        return "particles loop: index_map tick result differs";
    return "";
  }
  // Per tick pair: 2 ticks x 2 attributes x m rows written + 2 x m rows read (12 B each).
  double payload_bytes() const override { return 6.0 * double(m_) * 12.0; }
  double items() const override { return 2; }

 private:
  uint64_t n_, m_;
  HostBuf pos_col_, vel_col_, pos_, vel_, pos_out_, vel_out_, read_;
  std::vector<uint64_t> mask_;
  std::vector<uint32_t> moved_a_, sorted_b_, index_map_;
};

double ws2(const Shape& s) { return 2.0 * double(s.dense_bytes()) + 8.0 * double(s.rows); }

const RegisterBaseline reg_memcpy(BaselineDef{
    "memcpy", "memcpy", Exec::Serial, "std::memcpy between warm (prefaulted) buffers",
    [](const Shape& s) { return 2.0 * double(s.dense_bytes()); },
    [](const Shape& s) { return make_memcpy(s.dense_bytes(), false); }});
const RegisterBaseline reg_memcpy_alloc(BaselineDef{
    "memcpy_alloc", "memcpy", Exec::Serial,
    "malloc + std::memcpy + free: a copy into newly allocated memory (page faults included)",
    [](const Shape& s) { return 2.0 * double(s.dense_bytes()); },
    [](const Shape& s) { return make_memcpy(s.dense_bytes(), true); }});
const RegisterBaseline reg_deep_copy_serial(BaselineDef{
    "deep_copy", "deep_copy", Exec::Serial, "Kokkos::deep_copy(Kokkos::Serial, HostSpace views)",
    [](const Shape& s) { return 2.0 * double(s.dense_bytes()); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<DeepCopyInstance<Kokkos::Serial>>(s.dense_bytes());
    }});
#if defined(KOKKOS_ENABLE_OPENMP)
const RegisterBaseline reg_deep_copy_parallel(BaselineDef{
    "deep_copy", "deep_copy", Exec::Parallel, "Kokkos::deep_copy(Kokkos::OpenMP, HostSpace views)",
    [](const Shape& s) { return 2.0 * double(s.dense_bytes()); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<DeepCopyInstance<Kokkos::OpenMP>>(s.dense_bytes());
    }});
#endif

#define KP_LOOP(var, key, desc, ...)                           \
  const RegisterBaseline var(                                  \
      BaselineDef{key, "serial_loop", Exec::Serial, desc, ws2, \
                  [](const Shape& s) { return make_loop(s, __VA_ARGS__); }})
KP_LOOP(reg_copy, "copy", "for i: dst[i] = src[i] (rows, compile-time lanes)", LoopKind::Copy);
KP_LOOP(reg_gather_perm, "gather_perm", "for i: dst[i] = src[perm[i]] (random permutation)",
        LoopKind::GatherPerm);
KP_LOOP(reg_stride4, "gather_scatter_stride4", "for i in 0,4,8..: dst[i] = src[i]",
        LoopKind::Stride4);
KP_LOOP(reg_masked50, "masked_p50", "for i: if mask bit i: dst[i] = src[i] (50% of bits)",
        LoopKind::Masked, 0.5);
KP_LOOP(reg_masked05, "masked_p05", "for i: if mask bit i: dst[i] = src[i] (5% of bits)",
        LoopKind::Masked, 0.05);
KP_LOOP(reg_scatter05, "scatter_p05", "for j: dst[t[j]] = src[j] (5% of rows, t sorted)",
        LoopKind::Scatter, 0.05);
KP_LOOP(reg_scan05, "scan_gather_p05",
        "for i: if changed_at[i] == tick: out[k++] = col[i] (5% changed)", LoopKind::ScanGather,
        0.05);
#undef KP_LOOP

#if defined(_OPENMP)
// The loops of the sparse-write targets, parallel: what 2 threads give this machine.
#define KP_OMP_LOOP(var, key, desc, ...)                                                     \
  const RegisterBaseline var(BaselineDef{                                                    \
      key, "omp_loop", Exec::Parallel, desc, ws2, [](const Shape& s) {                       \
        return make_loop(s, __VA_ARGS__, Kokkos::DefaultHostExecutionSpace().concurrency()); \
      }})
KP_OMP_LOOP(reg_omp_copy, "copy", "the copy loop under omp parallel for", LoopKind::Copy, 0.0);
KP_OMP_LOOP(reg_omp_gather_perm, "gather_perm", "the gather_perm loop under omp parallel for",
            LoopKind::GatherPerm, 0.0);
KP_OMP_LOOP(reg_omp_stride4, "gather_scatter_stride4", "the stride-4 loop under omp parallel for",
            LoopKind::Stride4, 0.0);
// The sealed local index_map write's floor (issue 32): the same rows gathered into a staging
// buffer, then scattered into place, both passes under omp parallel for.
KP_OMP_LOOP(reg_omp_stride4_two_pass, "gather_scatter_stride4_two_pass",
            "the stride-4 rows gathered into a staging buffer, then scattered into place (two omp "
            "parallel for passes: a sealed write's floor)",
            LoopKind::Stride4TwoPass, 0.0);
KP_OMP_LOOP(reg_omp_masked50, "masked_p50", "the masked_p50 loop under omp parallel for",
            LoopKind::Masked, 0.5);
KP_OMP_LOOP(reg_omp_masked05, "masked_p05", "the masked_p05 loop under omp parallel for",
            LoopKind::Masked, 0.05);
#undef KP_OMP_LOOP
#endif

double ragged_ws(const Shape& s, double mean) {
  return 2.0 * double(s.rows) * mean * double(s.row_bytes()) + 32.0 * double(s.rows);
}
const RegisterBaseline reg_rp4(BaselineDef{
    "ragged_pack_mean4", "serial_loop", Exec::Serial, "for i: memcpy(dst + off[i], row[i], len[i])",
    [](const Shape& s) { return ragged_ws(s, 4); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<RaggedPackInstance>(s, "mean4");
    }});
const RegisterBaseline reg_rp64(BaselineDef{
    "ragged_pack_mean64", "serial_loop", Exec::Serial,
    "for i: memcpy(dst + off[i], row[i], len[i])", [](const Shape& s) { return ragged_ws(s, 64); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<RaggedPackInstance>(s, "mean64");
    }});
const RegisterBaseline reg_rps(BaselineDef{
    "ragged_pack_skewed", "serial_loop", Exec::Serial,
    "for i: memcpy(dst + off[i], row[i], len[i])", [](const Shape& s) { return ragged_ws(s, 7.5); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<RaggedPackInstance>(s, "skewed");
    }});
const RegisterBaseline reg_particles(BaselineDef{
    "particles_p05", "serial_loop", Exec::Serial,
    "the particles tick pair (mask tick + index_map tick + change gathers) on plain arrays",
    [](const Shape& s) { return 7.0 * 12.0 * double(s.rows); },
    [](const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<ParticlesLoopInstance>(s.rows);
    }});

}  // namespace

std::unique_ptr<Instance> make_memcpy(size_t bytes, bool fresh) {
  return std::make_unique<MemcpyInstance>(bytes, fresh);
}

}  // namespace kperf
