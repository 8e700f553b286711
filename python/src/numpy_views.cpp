// SPDX-License-Identifier: Apache-2.0
// numpy views of kstage's own arrays (a group's prims and index map) and DLPack dtypes as numpy
// dtypes. Views are read-only and keep their owner (the group's pin) alive.
#include "binding.hpp"

#include <nanobind/stl/string.h>

namespace kstage_py {

nb::object uint64_view(const uint64_t* data, size_t n, nb::handle owner) {
  size_t shape[1] = {n};
  return nb::cast(nb::ndarray<nb::numpy, const uint64_t, nb::ndim<1>>(data, 1, shape, owner));
}

nb::object uint32_view(const uint32_t* data, size_t n, nb::handle owner) {
  size_t shape[1] = {n};
  return nb::cast(nb::ndarray<nb::numpy, const uint32_t, nb::ndim<1>>(data, 1, shape, owner));
}

nb::object numpy_dtype(DLDataType dtype) {
  char kind = 0;
  switch (dtype.code) {
    case kDLInt: kind = 'i'; break;
    case kDLUInt: kind = 'u'; break;
    case kDLFloat: kind = 'f'; break;
    case kDLComplex: kind = 'c'; break;
    case kDLBool: kind = 'b'; break;
    default: break;
  }
  if (kind == 0 || dtype.bits % 8 != 0) {
    // bfloat16, float8, ...: numpy has no dtype of its own for them (ml_dtypes does).
    return nb::none();
  }
  std::string name = std::string(1, kind) + std::to_string(dtype.bits / 8);
  return nb::module_::import_("numpy").attr("dtype")(name);
}

}  // namespace kstage_py
