// SPDX-License-Identifier: Apache-2.0
// The tick of examples/c/particles, re-implemented so it runs on both host execution spaces
// and at every row count of the grid: N particles with "position" and "velocity" (float32 x 3);
// each tick moves 5% of them and
//   - odd ticks (mask): both attributes as full N-row arrays with a mask over all particles,
//   - even ticks (index_map): a query over the moved particles (in particle order) and compact
//     rows in a shuffled order, index_map[i] naming the row of query prim i,
// written as one kstage_write_attributes batch in PRIM_MODE_UPDATE, then sealed; the consumer
// then reads the change range [tick, tick] of "position" over all particles.
// One timed run is a pair of ticks (one of each kind). Timed: query creation for the
// index_map tick, write + wait, seal, the change-range read (open, fetch, release). Untimed:
// the host-side simulation (picking and moving particles, building mask and index_map).
#include "context.hpp"

#include <algorithm>
#include <cstring>

namespace kperf {
namespace {

class ParticlesInstance final : public Instance {
 public:
  ParticlesInstance(Context& cx, const Shape& s)
      : cx_(cx), n_(s.rows), m_(std::max<uint64_t>(1, s.rows * 5 / 100)) {
    attrs_[0] = cx.token("particles_position");
    attrs_[1] = cx.token("particles_velocity");
  }

  void prepare() override {
    pos_.resize(n_ * 3);
    vel_.resize(n_ * 3);
    fill_values(pos_.data(), n_, 3, 11);
    fill_values(vel_.data(), n_, 3, 12);
    snap_pos_.resize(n_ * 3);
    snap_vel_.resize(n_ * 3);
    out_pos_.resize(m_ * 3);
    out_vel_.resize(m_ * 3);
    perm_.resize(n_);
    for (uint64_t i = 0; i < n_; ++i) perm_[i] = uint32_t(i);
    slot_.resize(n_);
    mask_.assign((n_ + 63) / 64, 0);
    // Initial state: every particle, both attributes, one batch.
    int64_t shape[1] = {int64_t(n_)};
    DLTensor t[2] = {make_tensor(pos_.data(), DType::F32, 3, shape),
                     make_tensor(vel_.data(), DType::F32, 3, shape)};
    kstage_write_data_t d[2] = {kstage_write_data_init(), kstage_write_data_init()};
    for (int a = 0; a < 2; ++a) {
      d[a].tensors = &t[a];
      d[a].tensor_count = 1;
      d[a].semantic = a == 0 ? KSTAGE_SEMANTIC_POINT : KSTAGE_SEMANTIC_VECTOR;
    }
    const uint64_t o = cx_.next_ordinal();
    write_batch(cx_.all(), d, o, KSTAGE_PRIM_MODE_UPSERT);
    KP_CHECK(kstage_advance_write_floor(cx_.stage(), o, attrs_, 2));
    cx_.note_column("particles_position", double(n_) * 12);
    cx_.note_column("particles_velocity", double(n_) * 12);
  }

  void before() override {
    // Tick A (mask): move m particles, snapshot the full arrays, set their mask bits.
    pick_and_move();
    std::fill(mask_.begin(), mask_.end(), 0);
    moved_a_.assign(perm_.begin(), perm_.begin() + long(m_));
    for (uint32_t p : moved_a_) mask_[p >> 6] |= uint64_t(1) << (p & 63);
    std::sort(moved_a_.begin(), moved_a_.end());
    snap_pos_ = pos_;
    snap_vel_ = vel_;
    // Tick B (index_map): move m particles; compact rows in pick order; query in particle order.
    pick_and_move();
    for (uint64_t i = 0; i < m_; ++i) {
      const uint32_t p = perm_[i];
      std::memcpy(&out_pos_[3 * i], &pos_[3 * p], 12);
      std::memcpy(&out_vel_[3 * i], &vel_[3 * p], 12);
      slot_[p] = uint32_t(i);
    }
    moved_b_.assign(perm_.begin(), perm_.begin() + long(m_));
    std::sort(moved_b_.begin(), moved_b_.end());
    index_map_.resize(m_);
    moved_paths_.resize(m_);
    for (uint64_t i = 0; i < m_; ++i) {
      index_map_[i] = slot_[moved_b_[i]];
      moved_paths_[i] = cx_.paths()[moved_b_[i]];
    }
    ordinal_a_ = cx_.next_ordinal();
    ordinal_b_ = cx_.next_ordinal();
  }

  void run() override {
    // Tick A: mask write of the full arrays.
    auto t0 = Clock::now();
    int64_t shape_all[1] = {int64_t(n_)}, shape_m[1] = {int64_t(m_)};
    DLTensor ta[2] = {make_tensor(snap_pos_.data(), DType::F32, 3, shape_all),
                      make_tensor(snap_vel_.data(), DType::F32, 3, shape_all)};
    kstage_write_data_t d[2] = {kstage_write_data_init(), kstage_write_data_init()};
    for (int a = 0; a < 2; ++a) {
      d[a].tensors = &ta[a];
      d[a].tensor_count = 1;
      d[a].count = n_;
      d[a].mask = mask_.data();
      d[a].semantic = a == 0 ? KSTAGE_SEMANTIC_POINT : KSTAGE_SEMANTIC_VECTOR;
    }
    write_batch(cx_.all(), d, ordinal_a_, KSTAGE_PRIM_MODE_UPDATE);
    KP_CHECK(kstage_advance_write_floor(cx_.stage(), ordinal_a_, attrs_, 2));
    auto t1 = Clock::now();
    seen_a_ = change_read(ordinal_a_);
    auto t2 = Clock::now();
    // Tick B: index_map write of compact rows through a query over the moved particles.
    kstage_query_t q = cx_.make_query(moved_paths_);
    DLTensor tb[2] = {make_tensor(out_pos_.data(), DType::F32, 3, shape_m),
                      make_tensor(out_vel_.data(), DType::F32, 3, shape_m)};
    for (int a = 0; a < 2; ++a) {
      d[a].tensors = &tb[a];
      d[a].count = m_;
      d[a].mask = nullptr;
      d[a].index_map = index_map_.data();
    }
    write_batch(q, d, ordinal_b_, KSTAGE_PRIM_MODE_UPDATE);
    KP_CHECK(kstage_advance_write_floor(cx_.stage(), ordinal_b_, attrs_, 2));
    KP_CHECK(kstage_query_release(cx_.stage(), q));
    auto t3 = Clock::now();
    seen_b_ = change_read(ordinal_b_);
    auto t4 = Clock::now();
    producer_s_ += std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count();
    consumer_s_ += std::chrono::duration<double>((t2 - t1) + (t4 - t3)).count();
    ticks_ += 2;
  }

  std::string verify() override {
    if (seen_a_ != m_ || seen_b_ != m_)
      return "change reads returned " + std::to_string(seen_a_) + " and " +
             std::to_string(seen_b_) + " particles, expected " + std::to_string(m_);
    // The latest state of every particle must be the host model's.
    std::string bad;
    for (int a = 0; a < 2 && bad.empty(); ++a) {
      const std::vector<float>& model = a == 0 ? pos_ : vel_;
      uint64_t first = 0;
      read_groups(cx_.stage(), cx_.all(), attrs_[a], nullptr, [&](const kstage_read_group_t& g) {
        if (bad.empty())
          bad = check_fixed_group<float>(g, 3, cx_.paths(), first, [&](uint64_t k, int l) {
            return double(model[3 * k + uint64_t(l)]);
          });
        first += g.prim_count;
      });
    }
    return bad;
  }
  double payload_bytes() const override { return 6.0 * double(m_) * 12.0; }
  double items() const override { return 2; }
  std::vector<std::pair<std::string, double>> extras() const override {
    if (!ticks_) return {};
    return {{"producer_us_per_tick", 1e6 * producer_s_ / double(ticks_)},
            {"consumer_us_per_tick", 1e6 * consumer_s_ / double(ticks_)},
            {"moved_per_tick", double(m_)}};
  }

 private:
  void pick_and_move() {
    for (uint64_t i = 0; i < m_; ++i) {
      const uint64_t j = i + rng_() % (n_ - i);
      std::swap(perm_[i], perm_[j]);
    }
    for (uint64_t i = 0; i < m_; ++i) {
      const uint32_t p = perm_[i];
      vel_[3 * p + 2] -= 0.0981f;
      for (int c = 0; c < 3; ++c) pos_[3 * p + uint64_t(c)] += 0.1f * vel_[3 * p + uint64_t(c)];
    }
  }
  void write_batch(kstage_query_t q, const kstage_write_data_t* d, uint64_t ordinal,
                   kstage_prim_mode_t mode) {
    kstage_op_t op = 0;
    KP_CHECK(kstage_write_attributes(cx_.stage(), q, attrs_, d, 2, ordinal, mode, &op));
    const kstage_status_t st = kstage_wait(cx_.stage(), op, KSTAGE_TIMEOUT_INFINITE);
    kstage_release_op(cx_.stage(), op);
    if (st != KSTAGE_OK) throw_kstage(st, "kstage_wait");
  }
  uint64_t change_read(uint64_t ordinal) {
    kstage_read_desc_t desc;
    desc = kstage_read_desc_init();
    desc.change_range = true;
    desc.range_begin = desc.range_end = ordinal;
    uint64_t seen = 0;
    read_groups(cx_.stage(), cx_.all(), attrs_[0], &desc,
                [&](const kstage_read_group_t& g) { seen += g.prim_count; });
    return seen;
  }

  Context& cx_;
  uint64_t n_, m_;
  kstage_token_t attrs_[2] = {0, 0};
  std::vector<float> pos_, vel_, snap_pos_, snap_vel_, out_pos_, out_vel_;
  std::vector<uint32_t> perm_, slot_, moved_a_, moved_b_, index_map_;
  std::vector<kstage_path_t> moved_paths_;
  std::vector<uint64_t> mask_;
  std::mt19937_64 rng_{0x5EED0300};
  uint64_t ordinal_a_ = 0, ordinal_b_ = 0, seen_a_ = 0, seen_b_ = 0, ticks_ = 0;
  double producer_s_ = 0, consumer_s_ = 0;
};

const RegisterWorkload reg([] {
  WorkloadDef d;
  d.name = "particles_tick";
  d.family = "particles";
  d.description =
      "examples/c/particles tick pair (mask tick + index_map tick, UPDATE, seal, change-range "
      "read)";
  d.params = "moved=5%";
  d.loop_key = "particles_p05";
  d.numpy_key = "particles_p05";
  d.applies = [](const Shape& s) { return s.dtype == DType::F32 && s.lanes == 3; };
  d.working_set = [](const Shape& s) { return 12.0 * 14.0 * double(s.rows); };
  d.payload_estimate = [](const Shape& s) { return 6.0 * 12.0 * 0.05 * double(s.rows); };
  d.make = [](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
    return std::make_unique<ParticlesInstance>(cx, s);
  };
  return d;
}());

}  // namespace
}  // namespace kperf
