/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the C compiler sees of kstage_adios2.h, for test_fortran_adios2.f90: the size and field
 * offsets of kstage_adios2_restart_desc_t and the kstage_adios2_manifest_t constants, which
 * module kstage_adios2_c declares by hand.
 */
#include <kstage/kstage_adios2.h>

#include <stddef.h>

void kstage_test_adios2_layout(int32_t* values) {
  values[0] = (int32_t)sizeof(kstage_adios2_restart_desc_t);
  values[1] = (int32_t)offsetof(kstage_adios2_restart_desc_t, struct_size);
  values[2] = (int32_t)offsetof(kstage_adios2_restart_desc_t, manifest);
  values[3] = KSTAGE_ADIOS2_MANIFEST_DEFAULT;
  values[4] = KSTAGE_ADIOS2_MANIFEST_IF_PRESENT;
  values[5] = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  values[6] = (int32_t)kstage_adios2_restart_desc_init().struct_size;
}
