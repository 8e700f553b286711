// SPDX-License-Identifier: Apache-2.0
#include "core/dtype.hpp"

namespace kstage::core {

namespace {
const char* code_name(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    case kDLOpaqueHandle: return "opaque";
    default: return nullptr;
  }
}
}  // namespace

std::string dtype_string(DLDataType t) {
  const char* name = code_name(t.code);
  std::string s = name ? format("%s%u", name, unsigned(t.bits))
                       : format("code %u bits %u", unsigned(t.code), unsigned(t.bits));
  if (t.lanes != 1) s += format("x%u", unsigned(t.lanes));
  return s;
}

const char* semantic_name(kstage_semantic_t s) {
  static const char* names[] = {"NONE",
                                "POINT",
                                "VECTOR",
                                "NORMAL",
                                "COLOR",
                                "QUATERNION",
                                "MATRIX",
                                "TEXCOORD",
                                "TOKEN_ID",
                                "PATH_ID",
                                "STRING",
                                "ASSET_PATH_ID",
                                "PATH_EXPRESSION_ID",
                                "RELATIONSHIP_PATH_ID",
                                "CONNECTION_PATH_ID",
                                "TIME_CODE",
                                "FRAME"};
  static_assert(sizeof names / sizeof names[0] == kLastSemantic + 1,
                "one name per kstage_semantic_t");
  if (s < 0 || s > kLastSemantic) return "invalid";
  return names[s];
}

const char* device_type_name(int32_t t) {
  switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLOneAPI: return "kDLOneAPI";
    case kDLWebGPU: return "kDLWebGPU";
    case kDLHexagon: return "kDLHexagon";
    case kDLMAIA: return "kDLMAIA";
    default: return "unknown device type";
  }
}

Status validate_dtype(DLDataType t, const std::string& what) {
  if (dtype_supported(t)) return Status::OK();
  bool ok_bits = false;
  switch (t.code) {
    case kDLInt:
    case kDLUInt: ok_bits = t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64; break;
    case kDLFloat: ok_bits = t.bits == 16 || t.bits == 32 || t.bits == 64; break;
    case kDLBfloat: ok_bits = t.bits == 16; break;
    case kDLComplex: ok_bits = t.bits == 64 || t.bits == 128; break;
    case kDLBool: ok_bits = t.bits == 8; break;
    default:
      return error(KSTAGE_INVALID_ARGUMENT, "%s: unsupported dtype code %u (bits %u)", what.c_str(),
                   unsigned(t.code), unsigned(t.bits));
  }
  if (!ok_bits)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: unsupported bit width %u for %s", what.c_str(),
                 unsigned(t.bits), code_name(t.code));
  if (t.lanes < 1 || t.lanes > 255)
    return error(KSTAGE_INVALID_ARGUMENT, "%s: lanes %u outside 1..255", what.c_str(),
                 unsigned(t.lanes));
  return Status::OK();
}

namespace {
// The layout a semantic fixes: dtype code, bits and lanes, and the kinds it allows.
struct Layout {
  uint8_t code, bits;
  uint16_t lanes;
  bool fixed, array;
  const char* what;  // for messages
};
bool layout_of(kstage_semantic_t s, Layout& l) {
  switch (s) {
    case KSTAGE_SEMANTIC_TOKEN_ID:
    case KSTAGE_SEMANTIC_PATH_ID:
    case KSTAGE_SEMANTIC_PATH_EXPRESSION_ID:
    case KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID:
      l = {kDLUInt, 64, 1, true, true, "dtype uint64 (lanes 1)"};
      return true;
    case KSTAGE_SEMANTIC_ASSET_PATH_ID:
      l = {kDLUInt, 64, 2, true, true, "dtype uint64x2 (authored, resolved token ids)"};
      return true;
    case KSTAGE_SEMANTIC_CONNECTION_PATH_ID:
      l = {kDLUInt, 64, 2, false, true, "an array column of uint64x2 (path, token ids)"};
      return true;
    case KSTAGE_SEMANTIC_TIME_CODE:
      l = {kDLFloat, 64, 1, true, true, "dtype float64 (lanes 1)"};
      return true;
    case KSTAGE_SEMANTIC_FRAME:
      l = {kDLFloat, 64, 16, true, true, "dtype float64x16 (a row-major 4x4)"};
      return true;
    default: return false;
  }
}
}  // namespace

Status validate_semantic(kstage_semantic_t s, DLDataType t, bool is_array) {
  if (s < KSTAGE_SEMANTIC_NONE || s > kLastSemantic)
    return error(KSTAGE_INVALID_ARGUMENT, "semantic %d is not a kstage_semantic_t", int(s));
  Layout l{};
  if (layout_of(s, l) && !(t.code == l.code && t.bits == l.bits && t.lanes == l.lanes &&
                           (is_array ? l.array : l.fixed)))
    return error(KSTAGE_INVALID_ARGUMENT, "semantic %s needs %s, got %s%s", semantic_name(s),
                 l.what, is_array ? "an array column of " : "a fixed-size column of ",
                 dtype_string(t).c_str());
  if (s == KSTAGE_SEMANTIC_STRING &&
      !(is_array && (t.code == kDLUInt || t.code == kDLInt) && t.bits == 8 && t.lanes == 1))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "semantic STRING needs an array column of uint8/int8 (lanes 1), got %s%s",
                 is_array ? "" : "a fixed-size column of ", dtype_string(t).c_str());
  return Status::OK();
}

}  // namespace kstage::core
