/* SPDX-License-Identifier: Apache-2.0 */
/* kstage-info: how libkstage was built and what it runs on (kstage_build_info), printed the way
 * kokkos_print_configuration prints Kokkos' -- the first thing to send with a question about
 * an installation. It creates a stage with the defaults first, so that Kokkos is initialised
 * (as in any program that uses kstage) and the running Kokkos and its threads are known.
 * A plain C program: the C API is all it needs. */
#include <kstage/kstage.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: %s\n  prints how libkstage was built and what it runs on (kstage_build_info)\n",
           argv[0]);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "%s: no arguments expected (see --help)\n", argv[0]);
    return 2;
  }
  kstage_stage_t stage = 0;
  const kstage_status_t created = kstage_create(NULL, &stage);
  if (created != KSTAGE_OK) /* still print what is known: the build itself */
    fprintf(stderr, "kstage-info: kstage_create failed (%s: %s); Kokkos may not be initialized\n",
            kstage_status_string(created), kstage_last_error());
  const char* text = NULL;
  const kstage_status_t st = kstage_build_info(&text);
  if (st != KSTAGE_OK) {
    fprintf(stderr, "kstage-info: kstage_build_info failed (%s: %s)\n", kstage_status_string(st),
            kstage_last_error());
    return 1;
  }
  fputs(text, stdout);
  if (stage != 0) kstage_destroy(stage);
  return created == KSTAGE_OK ? 0 : 1;
}
