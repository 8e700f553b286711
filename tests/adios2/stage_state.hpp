// SPDX-License-Identifier: Apache-2.0
// Everything a stage holds, by names -- per attribute its schema, write floor and each prim's
// bytes -- for the ADIOS2 tests to compare a restored or streamed stage with its original
// (test_adios2.cpp) and to checksum it in another process (stream_processes.cpp). Read through
// the C API, compact, on the host; a failing call throws std::runtime_error with its message.
#pragma once

#include <kstage/kstage.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kstage_adios2_test {

struct StageState {
  struct Column {
    DLDataType dtype{};
    bool is_array = false;
    kstage_semantic_t semantic = 0;
    uint64_t floor = 0;
    std::map<std::string, std::vector<unsigned char>> values;  // by path
    bool operator==(const Column& o) const {
      return dtype.code == o.dtype.code && dtype.bits == o.dtype.bits &&
             dtype.lanes == o.dtype.lanes && is_array == o.is_array && semantic == o.semantic &&
             floor == o.floor && values == o.values;
    }
  };
  // By attribute name; an attribute held in several schemas: one per schema, by
  // "<name>#<schema_key>".
  std::map<std::string, Column> columns;
  bool operator==(const StageState& o) const { return columns == o.columns; }
};

inline void must(kstage_status_t st, const char* what) {
  if (st != KSTAGE_OK) throw std::runtime_error(std::string(what) + ": " + kstage_last_error());
}

// A schema as text, to tell an attribute's columns apart.
inline std::string schema_key(bool is_array, DLDataType t, kstage_semantic_t semantic) {
  return std::string(is_array ? "array:" : "fixed:") + std::to_string(t.code) + "." +
         std::to_string(t.bits) + "x" + std::to_string(t.lanes) + ":" + std::to_string(semantic);
}

inline StageState stage_state(kstage_stage_t stage) {
  StageState state;
  uint64_t n = 0;
  must(kstage_list_attributes(stage, nullptr, 0, &n), "kstage_list_attributes");
  std::vector<kstage_token_t> tokens(n);
  must(kstage_list_attributes(stage, tokens.data(), n, &n), "kstage_list_attributes");
  kstage_filter_t all{};
  kstage_query_t q = 0;
  must(kstage_query_filter(stage, &all, &q), "kstage_query_filter");
  for (kstage_token_t t : tokens) {
    const char* name = nullptr;
    must(kstage_token_string(stage, t, &name, nullptr), "kstage_token_string");
    kstage_attribute_info_t info = kstage_attribute_info_init();
    must(kstage_attribute_info(stage, t, &info), "kstage_attribute_info");
    auto key = [&](bool is_array, DLDataType dtype, kstage_semantic_t semantic) {
      return info.schema_count == 1
                 ? std::string(name)
                 : std::string(name) + "#" + schema_key(is_array, dtype, semantic);
    };
    for (uint64_t k = 0; k < info.schema_count; ++k) {
      kstage_attribute_info_t one = kstage_attribute_info_init();
      must(kstage_attribute_schema(stage, t, k, &one), "kstage_attribute_schema");
      StageState::Column& c = state.columns[key(one.is_array, one.dtype, one.semantic)];
      c.dtype = one.dtype;
      c.is_array = one.is_array;
      c.semantic = one.semantic;
      c.floor = one.write_floor;
    }
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    d.target_device = DLDevice{kDLCPU, 0};
    kstage_read_t r = 0;
    must(kstage_read_attributes(stage, q, &t, 1, &d, &r), "kstage_read_attributes");
    kstage_read_group_t g;
    while (kstage_fetch_read_next(stage, r, 0, &g) == KSTAGE_OK) {
      StageState::Column& c = state.columns[key(g.is_array, g.dtype, g.semantic)];
      const size_t elem = size_t(g.dtype.bits / 8) * g.dtype.lanes;
      for (uint64_t i = 0; i < g.prim_count; ++i) {
        const char* path = nullptr;
        must(kstage_path_string(stage, g.prims[i], &path, nullptr), "kstage_path_string");
        const DLTensor& tensor = g.data.tensors[g.is_array ? i : 0];
        const auto* base = static_cast<const unsigned char*>(tensor.data) + tensor.byte_offset;
        const size_t rows = g.is_array ? size_t(tensor.shape[0]) : 1;
        const unsigned char* at = g.is_array ? base : base + i * elem;
        c.values[path].assign(at, at + rows * elem);
      }
      must(kstage_release_group(stage, g.handle), "kstage_release_group");
    }
    must(kstage_release_read(stage, r), "kstage_release_read");
  }
  must(kstage_query_release(stage, q), "kstage_query_release");
  return state;
}

}  // namespace kstage_adios2_test
