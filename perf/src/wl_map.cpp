// SPDX-License-Identifier: Apache-2.0
// Map / unmap workloads: map -> fill -> unmap -> seal, dense (every prim: the mapped buffer
// becomes the column's storage, no copy) and sparse (a quarter of the prims: staged and
// scattered at seal). The fill is the producer's own work; the target compares the whole
// cycle with the fill alone (the `fill` baseline: the same loop into a warm buffer) plus one
// memcpy of the payload, and the extras record whether the sealed storage is the map buffer.
#include "context.hpp"

#include <cstring>

namespace kperf {
namespace {

// The producer's fill: element e of tick t. Cheap on purpose, so the cycle's overheads show.
template <class T>
void fill(T* p, uint64_t elements, uint64_t tick) {
  for (uint64_t e = 0; e < elements; ++e) p[e] = T(double(e % 65536) + double(tick % 1024));
}

template <class T>
class MapInstance final : public Instance {
 public:
  MapInstance(Context& cx, const Shape& s, bool dense) : cx_(cx), s_(s), dense_(dense) {
    attr_ = cx.token(std::string("map_") + (s.dtype == DType::F32 ? "f32" : "f64") + "x" +
                     std::to_string(s.lanes));
  }

  void prepare() override {
    query_ = dense_ ? cx_.all() : cx_.strided(4);
    KP_CHECK(kstage_query_count(cx_.stage(), query_, &count_));
    desc_ = kstage_map_desc_init();
    desc_.attribute = attr_;
    desc_.dtype = DLDataType{kDLFloat, uint8_t(dtype_bytes(s_.dtype) * 8), uint16_t(s_.lanes)};
    // The base state: every prim holds the attribute, so the sparse map updates a subset.
    cycle(cx_.all(), s_.rows);
    cx_.note_column(std::string("map_") + dtype_name(s_.dtype), double(s_.dense_bytes()));
  }
  void run() override { last_buffer_ = cycle(query_, count_); }
  std::string verify() override {
    // Values: the last tick's fill, read back through the index_map the group gave.
    const uint64_t lanes = uint64_t(s_.lanes);
    std::string bad;
    const void* storage = nullptr;
    uint64_t seen = 0;
    read_groups(cx_.stage(), query_, attr_, nullptr, [&](const kstage_read_group_t& g) {
      storage = g.data.tensors[0].data;
      const T* base = static_cast<const T*>(g.data.tensors[0].data);
      for (uint64_t i = 0; i < g.prim_count && bad.empty(); ++i) {
        const uint64_t k = seen + i;
        const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
        const uint64_t want_row = last_rows_.empty() ? k : last_rows_[k];
        for (uint64_t l = 0; l < lanes && bad.empty(); ++l) {
          const T want = T(double((want_row * lanes + l) % 65536) + double(last_tick_ % 1024));
          if (!(base[row * lanes + l] == want))
            bad = "prim " + std::to_string(k) + " lane " + std::to_string(l) + " holds " +
                  std::to_string(double(base[row * lanes + l])) + ", expected " +
                  std::to_string(double(want));
        }
      }
      seen += g.prim_count;
    });
    if (bad.empty() && seen != count_)
      bad = "read " + std::to_string(seen) + " prims, expected " + std::to_string(count_);
    if (bad.empty() && dense_ && storage != last_buffer_)
      bad = "the sealed storage is not the mapped buffer: a dense map was copied";
    zero_copy_ = storage == last_buffer_;
    return bad;
  }
  double payload_bytes() const override { return double(count_) * double(s_.row_bytes()); }
  double items() const override { return double(count_); }
  std::vector<std::pair<std::string, double>> extras() const override {
    return {{"storage_is_map_buffer", zero_copy_ ? 1.0 : 0.0}};
  }

 private:
  // One map -> fill -> unmap -> seal over `query`; returns the group's buffer.
  const void* cycle(kstage_query_t query, uint64_t n) {
    const uint64_t tick = cx_.next_ordinal();
    kstage_map_t map = 0;
    KP_CHECK(kstage_map_attribute(cx_.stage(), query, &desc_, tick, nullptr, 0, &map));
    kstage_map_group_info_t g;
    KP_CHECK(kstage_fetch_map_next(cx_.stage(), map, 0, &g));
    T* buffer = static_cast<T*>(g.data.tensors[0].data);
    // Fill in buffer-row order; remember which row each prim got (for verify).
    fill(buffer, n * uint64_t(s_.lanes), tick);
    if (g.data.index_map) {
      last_rows_.assign(g.data.index_map, g.data.index_map + g.prim_count);
    } else {
      last_rows_.clear();
    }
    kstage_op_t op = 0;
    KP_CHECK(kstage_unmap_attribute(cx_.stage(), map, kstage_device_sync_t{0, 0}, &op));
    KP_CHECK(kstage_release_op(cx_.stage(), op));
    cx_.seal(tick, attr_);
    last_tick_ = tick;
    return buffer;
  }

  Context& cx_;
  Shape s_;
  bool dense_;
  kstage_token_t attr_ = 0;
  kstage_query_t query_ = 0;
  uint64_t count_ = 0;
  kstage_map_desc_t desc_ = kstage_map_desc_init();
  const void* last_buffer_ = nullptr;
  std::vector<uint32_t> last_rows_;
  uint64_t last_tick_ = 0;
  bool zero_copy_ = false;
};

// The fill alone, into a warm buffer: what the producer's loop costs without kstage.
template <class T>
class FillBaseline final : public Instance {
 public:
  explicit FillBaseline(const Shape& s) : s_(s), buf_(s.dense_bytes()) {
    touch(buf_.p, buf_.bytes);
  }
  void run() override { fill(buf_.as<T>(), s_.rows * uint64_t(s_.lanes), ++tick_); }
  std::string verify() override {
    return buf_.as<T>()[0] == T(double(tick_ % 1024)) ? "" : "fill wrote the wrong value";
  }
  double payload_bytes() const override { return double(s_.dense_bytes()); }
  double items() const override { return double(s_.rows); }

 private:
  Shape s_;
  HostBuf buf_;
  uint64_t tick_ = 0;
};

const bool registered = [] {
  for (bool dense : {true, false}) {
    WorkloadDef d;
    d.name = dense ? "map_fill_unmap_seal_dense" : "map_fill_unmap_seal_sparse";
    d.family = "map";
    d.description =
        dense ? "map every prim, fill in place, unmap, seal: the buffer becomes the storage"
              : "map a quarter of the prims (0,4,8..), fill, unmap, seal (scatter at seal)";
    d.params = dense ? "" : "stride=4";
    d.loop_key = "fill";
    d.big_ok = dense;
    d.working_set = [](const Shape& s) { return 3.0 * double(s.dense_bytes()); };
    d.payload_estimate = [dense](const Shape& s) {
      return double(s.dense_bytes()) / (dense ? 1.0 : 4.0);
    };
    d.make = [dense](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
      if (s.dtype == DType::F32) return std::make_unique<MapInstance<float>>(cx, s, dense);
      return std::make_unique<MapInstance<double>>(cx, s, dense);
    };
    RegisterWorkload{std::move(d)};
  }
  BaselineDef b;
  b.key = "fill";
  b.impl = "serial_loop";
  b.description = "the producer's fill loop alone, into a warm buffer";
  b.working_set = [](const Shape& s) { return double(s.dense_bytes()); };
  b.make = [](const Shape& s) -> std::unique_ptr<Instance> {
    if (s.dtype == DType::F32) return std::make_unique<FillBaseline<float>>(s);
    return std::make_unique<FillBaseline<double>>(s);
  };
  RegisterBaseline{std::move(b)};
  return true;
}();

}  // namespace
}  // namespace kperf
