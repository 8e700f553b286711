/* Downstream use of an installed kstage: the C header compiles as C, links, and runs. */
#include <kstage/kstage.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  const uint32_t header_version =
      (uint32_t)(KSTAGE_VERSION_MAJOR * 10000 + KSTAGE_VERSION_MINOR * 100 + KSTAGE_VERSION_PATCH);
  const uint32_t package_version =
      (uint32_t)(KSTAGE_FOUND_VERSION_MAJOR * 10000 + KSTAGE_FOUND_VERSION_MINOR * 100 +
                 KSTAGE_FOUND_VERSION_PATCH);
  const uint32_t library_version = kstage_version();
  const char* ok_name = kstage_status_string(KSTAGE_OK);
  int failures = 0;

  printf("kstage downstream: header %u, package %u, library %u, status 0 = %s\n",
         (unsigned)header_version, (unsigned)package_version, (unsigned)library_version,
         ok_name ? ok_name : "(null)");
#ifdef KSTAGE_EXPECTED_VERSION_STRING
  printf("kstage downstream: built kstage version %s\n", KSTAGE_EXPECTED_VERSION_STRING);
#endif
  if (library_version != header_version) {
    fprintf(stderr, "FAIL: kstage_version() = %u, header says %u\n", (unsigned)library_version,
            (unsigned)header_version);
    ++failures;
  }
  if (package_version != header_version) {
    fprintf(stderr, "FAIL: kstageConfigVersion.cmake says %u, header says %u\n",
            (unsigned)package_version, (unsigned)header_version);
    ++failures;
  }
  if (ok_name == NULL || strcmp(ok_name, "KSTAGE_OK") != 0) {
    fprintf(stderr, "FAIL: kstage_status_string(0) = \"%s\", expected \"KSTAGE_OK\"\n",
            ok_name ? ok_name : "(null)");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
