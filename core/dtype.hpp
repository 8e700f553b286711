// SPDX-License-Identifier: Apache-2.0
// DLPack dtypes and kstage semantics: which ones a column may hold and how
// many bytes one tuple (all lanes) takes.
#pragma once

#include "core/status.hpp"

#include <string>

namespace kstage::core {

// Bytes of one tuple: bits/8 * lanes. Only valid for dtypes validate_dtype accepts.
inline size_t tuple_bytes(DLDataType t) { return size_t(t.bits / 8) * t.lanes; }

inline bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// "float32x3", "int8", "code 9 bits 7" ...
std::string dtype_string(DLDataType t);
const char* semantic_name(kstage_semantic_t s);
const char* device_type_name(int32_t device_type);

// Every DLPack dtype with a whole byte size: int/uint 8-64, float 16/32/64,
// bfloat16, bool (8 bits), complex 64/128; lanes 1..255.
Status validate_dtype(DLDataType t, const std::string& what);
// What validate_dtype accepts, without a message: the per-row check of ragged writes.
inline bool dtype_supported(DLDataType t) {
  if (t.lanes < 1 || t.lanes > 255) return false;
  switch (t.code) {
    case kDLInt:
    case kDLUInt: return t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLFloat: return t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLBfloat: return t.bits == 16;
    case kDLComplex: return t.bits == 64 || t.bits == 128;
    case kDLBool: return t.bits == 8;
    default: return false;
  }
}
// The highest kstage_semantic_t.
constexpr kstage_semantic_t kLastSemantic = KSTAGE_SEMANTIC_FRAME;
// Semantic constraints (kstage.h's layouts): TOKEN_ID, PATH_ID, PATH_EXPRESSION_ID and
// RELATIONSHIP_PATH_ID need uint64 lanes 1; ASSET_PATH_ID uint64 lanes 2; CONNECTION_PATH_ID an
// array column of uint64 lanes 2; TIME_CODE float64 lanes 1; FRAME float64 lanes 16; STRING an
// array column of 8-bit int/uint lanes 1. The message names the semantic and its layout.
Status validate_semantic(kstage_semantic_t s, DLDataType t, bool is_array);

}  // namespace kstage::core
