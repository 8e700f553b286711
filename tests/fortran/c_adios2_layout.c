/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the C compiler sees of kstage_adios2.h, for test_fortran_adios2.f90: the sizes and field
 * offsets of its descriptors (kstage_adios2_restart_desc_t, kstage_adios2_open_desc_t,
 * kstage_adios2_step_desc_t), their initialisers' struct_size, and the kstage_adios2_manifest_t
 * and kstage_adios2_mode_t constants, which module kstage_adios2_c declares by hand.
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
  values[7] = (int32_t)sizeof(kstage_adios2_open_desc_t);
  values[8] = (int32_t)offsetof(kstage_adios2_open_desc_t, mode);
  values[9] = (int32_t)offsetof(kstage_adios2_open_desc_t, engine);
  values[10] = (int32_t)offsetof(kstage_adios2_open_desc_t, parameters);
  values[11] = (int32_t)offsetof(kstage_adios2_open_desc_t, inline_writer);
  values[12] = (int32_t)offsetof(kstage_adios2_open_desc_t, manifest);
  values[13] = (int32_t)kstage_adios2_open_desc_init().struct_size;
  values[14] = (int32_t)sizeof(kstage_adios2_step_desc_t);
  values[15] = (int32_t)offsetof(kstage_adios2_step_desc_t, change_range);
  values[16] = (int32_t)offsetof(kstage_adios2_step_desc_t, reserved);
  values[17] = (int32_t)offsetof(kstage_adios2_step_desc_t, range_begin);
  values[18] = (int32_t)offsetof(kstage_adios2_step_desc_t, range_end);
  values[19] = (int32_t)kstage_adios2_step_desc_init().struct_size;
  values[20] = KSTAGE_ADIOS2_WRITE;
  values[21] = KSTAGE_ADIOS2_READ;
}
