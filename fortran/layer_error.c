/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Fortran layer's message for its last failed call on each thread, which
 * kstage_error_message() (kstage.f90) returns. It is a copy -- of kstage_last_error() right
 * after the C call that failed, or the layer's own text -- because kstage_last_error() lasts
 * only until the thread's next kstage call, and the layer makes more calls after a failure
 * (releasing what it held). Thread-local, like kstage_last_error(): OpenMP threads each see
 * their own.
 */
#include "layer_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KSTAGE_FORTRAN_MESSAGE_CAPACITY 4096

static _Thread_local char message[KSTAGE_FORTRAN_MESSAGE_CAPACITY];

kstage_status_t kstage_fortran_fail(kstage_status_t status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  return status;
}

void kstage_fortran_name(char* out, size_t capacity, const char* str, size_t length) {
  while (length > 0 && str[length - 1] == ' ') --length;
  if (length >= capacity) length = capacity - 1;
  memcpy(out, str, length);
  out[length] = '\0';
}

/* Fortran: the layer's own message (`length` bytes of `str`). */
void kstage_fortran_set_error(const char* str, size_t length) {
  if (length >= sizeof message) length = sizeof message - 1;
  memmove(message, str, length);
  message[length] = '\0';
}

/* Fortran: keep kstage_last_error() of the C call that just failed, after `context` and ": ". */
void kstage_fortran_keep_last_error(const char* context, size_t length) {
  char name[256];
  kstage_fortran_name(name, sizeof name, context, length);
  snprintf(message, sizeof message, "%s: %s", name, kstage_last_error());
}

/* Fortran: this thread's message (NUL-terminated, valid until its next failure). */
const char* kstage_fortran_error(size_t* length) {
  *length = strlen(message);
  return message;
}
