// SPDX-License-Identifier: Apache-2.0
// The C++ API (kstage/kstage.hpp) next to the C API: the same dense write + wait + seal as
// write_dense_seal (wl_fixed.cpp), through kstage::Stage with a Kokkos View of the source.
// kstage.hpp adds no semantics, so it must cost what the C calls cost: perf/report.py holds
// cpp_write_dense_seal to >= 0.97x write_dense_seal at the same shape.
#include "context.hpp"

#include <kstage/kstage.hpp>

namespace kperf {
namespace {

constexpr uint64_t kSaltSrc = 1, kSaltBase = 2;

template <class T>
class CppWriteSeal final : public Instance {
 public:
  CppWriteSeal(Context& cx, const Shape& s)
      : cx_(cx),
        s_(s),
        stage_(kstage::Stage::borrow(cx.stage())),
        all_(kstage::Query::borrow(cx.stage(), cx.all())) {
    // Its own attribute: the same column shape as write_dense_seal's, not shared with it.
    attr_ = cx.token(std::string("cpp_") + (s.dtype == DType::F32 ? "f32" : "f64") + "x" +
                     std::to_string(s.lanes));
  }
  void prepare() override {
    const uint64_t n = s_.rows;
    base_ = HostBuf(n * s_.row_bytes());
    fill_values(base_.as<T>(), n, s_.lanes, kSaltBase);
    const uint64_t o = cx_.next_ordinal();
    stage_.write(attr_, all_, host_view(base_), o).wait();
    stage_.seal(o, {attr_});
    cx_.note_column("cpp_" + std::to_string(s_.lanes) + dtype_name(s_.dtype),
                    double(n * s_.row_bytes()));
    src_ = HostBuf(n * s_.row_bytes());
    fill_values(src_.as<T>(), n, s_.lanes, kSaltSrc);
  }
  void before() override { ordinal_ = cx_.next_ordinal(); }
  void run() override {
    // A View of the client's buffer, as a Kokkos code holds its data.
    stage_.write(attr_, all_, host_view(src_), ordinal_).wait();
    stage_.seal(ordinal_, {attr_});
  }
  std::string verify() override {
    std::string bad;
    uint64_t seen = 0;
    read_groups(cx_.stage(), cx_.all(), attr_, nullptr, [&](const kstage_read_group_t& g) {
      if (bad.empty())
        bad = check_fixed_group<T>(g, s_.lanes, cx_.paths(), seen,
                                   [](uint64_t k, int l) { return value_of(kSaltSrc, k, l); });
      seen += g.prim_count;
    });
    if (bad.empty() && seen != s_.rows) bad = "the column holds " + std::to_string(seen) + " prims";
    return bad;
  }
  double payload_bytes() const override { return double(s_.dense_bytes()); }
  double items() const override { return double(s_.rows); }

 private:
  using HostView = Kokkos::View<const T**, Kokkos::LayoutRight, Kokkos::HostSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  HostView host_view(const HostBuf& b) const {
    return HostView(b.as<const T>(), size_t(s_.rows), size_t(s_.lanes));
  }

  Context& cx_;
  Shape s_;
  kstage::Stage stage_;
  kstage::Query all_;
  kstage_token_t attr_ = 0;
  HostBuf base_, src_;
  uint64_t ordinal_ = 0;
};

const bool registered = [] {
  WorkloadDef d;
  d.name = "cpp_write_dense_seal";
  d.family = "write";
  d.description =
      "write_dense_seal through the C++ API: stage.write(attr, query, View) + wait + seal";
  d.loop_key = "copy";
  d.numpy_key = "copy";
  d.big_ok = true;
  d.working_set = [](const Shape& s) {
    return 4.0 * double(s.dense_bytes()) + 24.0 * double(s.rows);
  };
  d.make = [](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
    if (s.dtype == DType::F32) return std::make_unique<CppWriteSeal<float>>(cx, s);
    return std::make_unique<CppWriteSeal<double>>(cx, s);
  };
  RegisterWorkload{std::move(d)};
  return true;
}();

}  // namespace
}  // namespace kperf
