/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A C descriptor no Fortran compiler here makes (test_fortran.f90): 4-byte reals 6 bytes apart,
 * as a component of a packed record would be. The Fortran layer must refuse it, not misread it.
 */
#include <ISO_Fortran_binding.h>
#include <kstage/kstage.h>

#include <string.h>

kstage_status_t kstage_fortran_tensor(const CFI_cdesc_t* a, int32_t unsigned_ints, const char* what,
                                      size_t what_length, DLTensor* tensor, int64_t* shape,
                                      int64_t* strides);

kstage_status_t kstage_test_misaligned_stride(void) {
  static char bytes[64];
  CFI_CDESC_T(1) descriptor;
  CFI_cdesc_t* a = (CFI_cdesc_t*)&descriptor;
  const CFI_index_t extent[1] = {4};
  if (CFI_establish(a, bytes, CFI_attribute_other, CFI_type_float, sizeof(float), 1, extent) !=
      CFI_SUCCESS) {
    return KSTAGE_INTERNAL;
  }
  a->dim[0].sm = 6;
  DLTensor t;
  int64_t shape[15], strides[15];
  const char what[] = "kstage_write: array";
  return kstage_fortran_tensor(a, 0, what, strlen(what), &t, shape, strides);
}
