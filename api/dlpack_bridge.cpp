// SPDX-License-Identifier: Apache-2.0
// The non-template parts of include/kstage/dlpack.hpp, declared there (this
// file does not include it: api/ is compiled without Kokkos).
#include <kstage/kstage.h>

#include <string>

#include "core/backend.hpp"
#include "core/dtype.hpp"

namespace kstage::impl {

KSTAGE_API const char* device_type_name(int32_t device_type);
KSTAGE_API std::string dtype_name(DLDataType t);
KSTAGE_API bool kokkos_is_initialized();

const char* device_type_name(int32_t device_type) { return core::device_type_name(device_type); }
std::string dtype_name(DLDataType t) { return core::dtype_string(t); }
bool kokkos_is_initialized() { return core::kokkos_is_running(); }

}  // namespace kstage::impl
