/* SPDX-License-Identifier: Apache-2.0 */
/* Restarts one checkpoint into a fresh stage and prints the outcome, for scripts that run a
 * restart in a child process bounded in time (adios2_damage_reproducers.py):
 *
 *   kstage_test_adios2_restart <checkpoint.bp>
 *
 * prints "STATUS <kstage_status_t>" and "MESSAGE <kstage_adios2_last_error()>"; exits 0 when the
 * restart returned (whatever its status), 2 on a usage or stage error. */
#include <kstage/kstage_adios2.h>

#include <stdio.h>

int main(int argc, char** argv) {
  kstage_stage_t stage = 0;
  kstage_status_t st;
  if (argc != 2) {
    fprintf(stderr, "usage: %s <checkpoint.bp>\n", argv[0]);
    return 2;
  }
  if (kstage_create(NULL, &stage) != KSTAGE_OK) {
    fprintf(stderr, "kstage_create: %s\n", kstage_last_error());
    return 2;
  }
  st = kstage_adios2_restart(stage, argv[1], NULL);
  printf("STATUS %d\nMESSAGE %s\n", (int)st, st == KSTAGE_OK ? "" : kstage_adios2_last_error());
  kstage_destroy(stage);
  return 0;
}
