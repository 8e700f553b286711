// SPDX-License-Identifier: Apache-2.0
// The emulated device backend (test builds only): see kstage_emulated.h.
#pragma once

#include "core/backend.hpp"

namespace kstage::backends::emulated {

// Device type kDLExtDev, KSTAGE_EMULATED_DEVICE_COUNT ordinals.
// A function, not a constant: HIP's clang would make a constant-initialised
// global an implicit device variable, pointing at host functions.
const core::BackendFactory& factory();

}  // namespace kstage::backends::emulated
