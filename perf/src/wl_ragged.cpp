// SPDX-License-Identifier: Apache-2.0
// Ragged (array) attribute workloads: every prim holds a row of `len[i]` elements of
// `lanes` lanes; a write passes one DLTensor per row (tensor_count = rows, the C API's form for
// rows of different lengths). Length distributions: mean4 (uniform 1..7), mean64 (uniform
// 1..127), skewed (1024/k for k uniform in 1..1024: mostly 1-2 elements, a few up to 1024).
#include "context.hpp"

#include <cstring>

namespace kperf {
namespace {

constexpr uint64_t kSeedLengths = 0x5EED0100;

enum class RaggedOp { Write, WriteSeal, Read, ReadCompact };

template <class T>
class RaggedInstance final : public Instance {
 public:
  RaggedInstance(Context& cx, const Shape& s, std::string dist, RaggedOp op)
      : cx_(cx), s_(s), dist_(std::move(dist)), op_(op) {
    name_ = "rg_" + dist_ + "_" + (s.dtype == DType::F32 ? "f32" : "f64") + "x" +
            std::to_string(s.lanes);
    attr_ = cx.token(name_);
  }

  void prepare() override {
    const uint64_t n = s_.rows;
    len_ = ragged_lengths(dist_, n, kSeedLengths);
    off_.resize(n);
    uint64_t e = 0;
    for (uint64_t i = 0; i < n; ++i) {
      off_[i] = e;
      e += len_[i];
    }
    elements_ = e;
    // Base state (data set 2) sealed, so every workload starts from the same column; the
    // reads then seal data set 1 over it.
    write_rows(2, true);
    if (op_ == RaggedOp::Read || op_ == RaggedOp::ReadCompact) write_rows(1, true);
    else build(src_, tensors_, shapes_, 1);
    desc_ = kstage_read_desc_init();
    desc_.compact = op_ == RaggedOp::ReadCompact;
    cx_.note_column(name_, double(elements_) * double(s_.row_bytes()));
  }
  void before() override { ordinal_ = cx_.next_ordinal(); }
  void run() override {
    if (op_ == RaggedOp::Read || op_ == RaggedOp::ReadCompact) {
      seen_ = 0;
      read_groups(cx_.stage(), cx_.all(), attr_, &desc_,
                  [&](const kstage_read_group_t& g) { seen_ += g.prim_count; });
      return;
    }
    cx_.write(cx_.all(), attr_, ordinal_, data(tensors_));
    if (op_ == RaggedOp::WriteSeal) cx_.seal(ordinal_, attr_);
  }
  void after() override {
    if (op_ == RaggedOp::Write) cx_.seal(ordinal_, attr_);
  }
  std::string verify() override {
    const uint64_t n = s_.rows;
    if ((op_ == RaggedOp::Read || op_ == RaggedOp::ReadCompact) && seen_ != n)
      return "the read returned " + std::to_string(seen_) + " prims, expected " + std::to_string(n);
    std::string bad;
    uint64_t first = 0;
    const uint64_t w = uint64_t(s_.lanes);
    read_groups(cx_.stage(), cx_.all(), attr_, &desc_, [&](const kstage_read_group_t& g) {
      if (!bad.empty()) return;
      if (!g.is_array) {
        bad = "the group is not an array group";
        return;
      }
      if (g.data.tensor_count != g.prim_count) {
        bad = "array group: tensor_count != prim_count";
        return;
      }
      for (uint64_t i = 0; i < g.prim_count && bad.empty(); ++i) {
        const uint64_t k = first + i;
        if (k >= n || g.prims[i] != cx_.paths()[k]) {
          bad = "unexpected prim in the read";
          break;
        }
        const DLTensor& t = g.data.tensors[i];
        if (t.ndim != 1 || uint64_t(t.shape[0]) != len_[k] || t.dtype.lanes != s_.lanes) {
          bad = "row " + std::to_string(k) + " has the wrong shape";
          break;
        }
        const T* v = reinterpret_cast<const T*>(static_cast<const char*>(t.data) + t.byte_offset);
        for (uint64_t j = 0; j < len_[k] * w; ++j)
          if (!(v[j] == T(value_of(1, off_[k] * w + j, 0)))) {
            bad = "row " + std::to_string(k) + " element " + std::to_string(j) + " differs";
            break;
          }
      }
      first += g.prim_count;
    });
    return bad;
  }
  double payload_bytes() const override { return double(elements_) * double(s_.row_bytes()); }
  double items() const override { return double(s_.rows); }

 private:
  // Packed data set `salt` (element e, lane l holds value_of(salt, e*lanes + l, 0)) and one
  // tensor per row pointing into it.
  void build(HostBuf& buf, std::vector<DLTensor>& tensors, std::vector<int64_t>& shapes,
             uint64_t salt) {
    const uint64_t w = uint64_t(s_.lanes);
    buf = HostBuf(std::max<uint64_t>(elements_, 1) * s_.row_bytes());
    T* p = buf.as<T>();
    for (uint64_t x = 0; x < elements_ * w; ++x) p[x] = T(value_of(salt, x, 0));
    tensors.resize(s_.rows);
    shapes.resize(s_.rows);
    for (uint64_t i = 0; i < s_.rows; ++i) {
      shapes[i] = int64_t(len_[i]);
      tensors[i] = make_tensor(p + off_[i] * w, s_.dtype, s_.lanes, &shapes[i]);
    }
  }
  kstage_write_data_t data(const std::vector<DLTensor>& tensors) const {
    kstage_write_data_t d;
    d = kstage_write_data_init();
    d.tensors = tensors.data();
    d.tensor_count = tensors.size();
    d.is_array = true;
    d.semantic = KSTAGE_SEMANTIC_NONE;
    return d;
  }
  void write_rows(uint64_t salt, bool seal) {
    HostBuf buf;
    std::vector<DLTensor> tensors;
    std::vector<int64_t> shapes;
    build(buf, tensors, shapes, salt);
    const uint64_t o = cx_.next_ordinal();
    cx_.write(cx_.all(), attr_, o, data(tensors));
    if (seal) cx_.seal(o, attr_);
  }

  Context& cx_;
  Shape s_;
  std::string dist_, name_;
  RaggedOp op_;
  kstage_token_t attr_ = 0;
  std::vector<uint64_t> len_, off_;
  uint64_t elements_ = 0, ordinal_ = 0, seen_ = 0;
  HostBuf src_;
  std::vector<DLTensor> tensors_;
  std::vector<int64_t> shapes_;
  kstage_read_desc_t desc_ = kstage_read_desc_init();
};

double mean_len(const std::string& dist) {
  return dist == "mean4" ? 4 : dist == "mean64" ? 64 : 7.5;
}

void reg(const std::string& dist, RaggedOp op) {
  static const char* op_names[] = {"write", "write_seal", "read", "read_compact"};
  static const char* op_desc[] = {"ragged write, one tensor per row: write + wait (seal untimed)",
                                  "ragged write + wait + seal",
                                  "ragged latest read, zero-copy (one tensor per row)",
                                  "ragged latest read, compact=true (rows packed in prim order)"};
  WorkloadDef d;
  d.name = "ragged_" + std::string(op_names[int(op)]) + "_" + dist;
  d.family = "ragged";
  d.description = op_desc[int(op)];
  d.params = ragged_params(dist);
  d.loop_key = "ragged_pack_" + dist;
  d.quick_max_rows = 100000;  // set when ragged writes cost ~0.5 us per row (CHANGELOG.md)
  d.max_rows = 1000000;
  d.numpy_key = d.loop_key;
  const double mean = mean_len(dist);
  // payload x4 (source, staged, column, old column or compact copy) + per-row overheads:
  // DLTensor + shape on our side, row pointers/offsets in the engine, a DLTensor per row per read.
  d.working_set = [mean](const Shape& s) {
    return 4.0 * double(s.rows) * mean * double(s.row_bytes()) + 300.0 * double(s.rows);
  };
  d.payload_estimate = [mean](const Shape& s) {
    return double(s.rows) * mean * double(s.row_bytes());
  };
  d.make = [dist, op](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
    if (s.dtype == DType::F32) return std::make_unique<RaggedInstance<float>>(cx, s, dist, op);
    return std::make_unique<RaggedInstance<double>>(cx, s, dist, op);
  };
  RegisterWorkload{std::move(d)};
}

const bool registered = [] {
  for (const char* dist : {"mean4", "mean64", "skewed"})
    for (RaggedOp op :
         {RaggedOp::Write, RaggedOp::WriteSeal, RaggedOp::Read, RaggedOp::ReadCompact})
      reg(dist, op);
  return true;
}();

}  // namespace
}  // namespace kperf
