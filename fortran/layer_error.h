/* SPDX-License-Identifier: Apache-2.0 */
/* The Fortran layer's message for its last failure on this thread (layer_error.c). */
#ifndef KSTAGE_FORTRAN_LAYER_ERROR_H_
#define KSTAGE_FORTRAN_LAYER_ERROR_H_

#include <kstage/kstage.h>

#include <stddef.h>

/* Sets this thread's message (printf-style) and returns `status`. */
kstage_status_t kstage_fortran_fail(kstage_status_t status, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A Fortran string (`length` bytes, trailing blanks dropped) as a NUL-terminated C string. */
void kstage_fortran_name(char* out, size_t capacity, const char* str, size_t length);

#endif /* KSTAGE_FORTRAN_LAYER_ERROR_H_ */
