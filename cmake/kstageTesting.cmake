# Test helpers for kstage.
#
# Kokkos 3.4's OpenMP backend prints a warning on STDOUT at Kokkos::initialize when
# OMP_PROC_BIND is not set:
#   Kokkos::OpenMP::initialize WARNING: OMP_PROC_BIND environment variable not set ...
# Catch2's catch_discover_tests parses stdout of `<exe> --list-tests` and would take those
# lines for test names. Every test program therefore runs with KSTAGE_TEST_ENVIRONMENT
# (OMP_PROC_BIND=spread, OMP_PLACES=threads, which silences the warning), both when its
# tests are discovered and when they run. The CMake presets set the same variables.
#
#   kstage_add_test(NAME <name> COMMAND <cmd> [args...]
#                   [WORKING_DIRECTORY <dir>] [TIMEOUT <s>]
#                   [LABELS <label>...] [ENVIRONMENT <VAR=value>...])
#       add_test() + the kstage test environment (+ extra ENVIRONMENT entries).
#
#   kstage_catch_discover_tests(<target> [catch_discover_tests options...])
#       catch_discover_tests() whose discovery and test runs get the kstage test environment
#       (through a launcher: `env OMP_PROC_BIND=spread OMP_PLACES=threads <exe> ...`).
#
#   kstage_emulated_discover_tests(<target> PREFIX <prefix> [TEST_SPEC <spec>] [LABELS <label>])
#       the program's Catch2 tests registered once per emulated ordinal in
#       KSTAGE_TEST_EMULATED_ORDINALS, as "<prefix>@<ordinal>: <test>", each run with
#       KSTAGE_TEST_EMULATED_ORDINAL=<ordinal> (tests/support.hpp reads it: the program's
#       columns live on that emulated device).
#
#   KSTAGE_TEST_EMULATED_ORDINALS   the emulated ordinals every emulated test runs on (cache;
#       default "0;1"). The sanitizer presets take "1" alone: a memory or thread error does not
#       depend on which ordinal the columns are on, and ordinal 1 is the one that switches
#       devices (DeviceGuard) on every call; the default preset runs both.
#
#   KSTAGE_TEST_ENVIRONMENT   the list of VAR=value entries above
#   KSTAGE_TEST_LAUNCHER      the launcher command (a list)

include_guard(GLOBAL)

set(KSTAGE_TEST_ENVIRONMENT "OMP_PROC_BIND=spread" "OMP_PLACES=threads")
set(KSTAGE_TEST_EMULATED_ORDINALS "0;1" CACHE STRING "Emulated device ordinals each emulated test runs on (0, 1)")

find_program(KSTAGE_ENV_PROGRAM NAMES env DOC "env(1), used to launch tests with the kstage test environment")
mark_as_advanced(KSTAGE_ENV_PROGRAM)
if(KSTAGE_ENV_PROGRAM)
  set(KSTAGE_TEST_LAUNCHER "${KSTAGE_ENV_PROGRAM}" ${KSTAGE_TEST_ENVIRONMENT})
else()
  set(KSTAGE_TEST_LAUNCHER "${CMAKE_COMMAND}" -E env ${KSTAGE_TEST_ENVIRONMENT})
endif()

function(kstage_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;WORKING_DIRECTORY;TIMEOUT" "COMMAND;LABELS;ENVIRONMENT")
  if(NOT arg_NAME OR NOT arg_COMMAND)
    message(FATAL_ERROR "kstage_add_test: NAME and COMMAND are required")
  endif()
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kstage_add_test(${arg_NAME}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(wd "")
  if(arg_WORKING_DIRECTORY)
    set(wd WORKING_DIRECTORY "${arg_WORKING_DIRECTORY}")
  endif()
  add_test(NAME "${arg_NAME}" COMMAND ${arg_COMMAND} ${wd})
  set_property(TEST "${arg_NAME}" PROPERTY ENVIRONMENT ${KSTAGE_TEST_ENVIRONMENT} ${arg_ENVIRONMENT})
  if(arg_LABELS)
    set_property(TEST "${arg_NAME}" APPEND PROPERTY LABELS ${arg_LABELS})
  endif()
  if(arg_TIMEOUT)
    set_property(TEST "${arg_NAME}" PROPERTY TIMEOUT "${arg_TIMEOUT}")
  endif()
endfunction()

function(kstage_catch_discover_tests target)
  if(NOT COMMAND catch_discover_tests)
    include(Catch)
  endif()
  # Catch's discovery script runs `${CROSSCOMPILING_EMULATOR} <exe> --list-tests` and puts the
  # same prefix in front of every discovered test command; use it as the environment launcher.
  get_property(emulator TARGET ${target} PROPERTY CROSSCOMPILING_EMULATOR)
  if(NOT emulator AND NOT CMAKE_CROSSCOMPILING)
    set_property(TARGET ${target} PROPERTY CROSSCOMPILING_EMULATOR ${KSTAGE_TEST_LAUNCHER})
  endif()
  # A build whose programs need a GPU (a CUDA or HIP Kokkos initialises it in every program) cannot
  # list its tests on a machine without one: ctest would run each program just to load the test
  # list. There, each program is one test (ctest on a GPU machine runs it whole).
  if(KSTAGE_KOKKOS_HAS_CUDA OR KSTAGE_KOKKOS_HAS_HIP)
    cmake_parse_arguments(arg "" "TEST_PREFIX;TEST_SPEC;DISCOVERY_MODE" "" ${ARGN})
    set(spec "")
    if(arg_TEST_SPEC)
      set(spec "${arg_TEST_SPEC}")
    endif()
    add_test(NAME "${arg_TEST_PREFIX}all" COMMAND ${KSTAGE_TEST_LAUNCHER} $<TARGET_FILE:${target}> ${spec})
    set_property(TEST "${arg_TEST_PREFIX}all" PROPERTY LABELS gpu)
    return()
  endif()
  catch_discover_tests(${target} ${ARGN})
endfunction()

function(kstage_emulated_discover_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "PREFIX;TEST_SPEC;LABELS" "")
  if(NOT arg_PREFIX OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kstage_emulated_discover_tests(${target}): PREFIX is required, got ${ARGN}")
  endif()
  set(spec "")
  if(arg_TEST_SPEC)
    set(spec TEST_SPEC "${arg_TEST_SPEC}")
  endif()
  set(labels "")
  if(arg_LABELS)
    set(labels LABELS "${arg_LABELS}")
  endif()
  foreach(ordinal IN LISTS KSTAGE_TEST_EMULATED_ORDINALS)
    if(NOT ordinal MATCHES "^[01]$")
      message(FATAL_ERROR "KSTAGE_TEST_EMULATED_ORDINALS: ${ordinal} is not an emulated ordinal (0 or 1)")
    endif()
    # Catch's discovery files are named by a hash of the arguments that reach the program, not
    # of the prefix: the suite name (Catch2's --name) differs per ordinal, so each registration
    # gets its own files.
    kstage_catch_discover_tests(${target} DISCOVERY_MODE PRE_TEST ${spec}
                                TEST_PREFIX "${arg_PREFIX}@${ordinal}: "
                                EXTRA_ARGS --name "${target}@${ordinal}"
                                PROPERTIES ENVIRONMENT "KSTAGE_TEST_EMULATED_ORDINAL=${ordinal}" ${labels})
  endforeach()
endfunction()

# Tests that start mpirun take this lock: one mpirun at a time. Open MPI 4 creates its session
# directory (/tmp/ompi.<host>.<uid>) with a check-then-mkdir that races: a second mpirun started in
# the same instant fails in orte_init with "mkdir ... File exists" (seen in CI). The MPI tests are short (under a second each), so running them one after another costs
# little.
function(kstage_mpirun_lock)
  set_property(TEST ${ARGN} APPEND PROPERTY RESOURCE_LOCK kstage_mpirun)
endfunction()

# The flags and environment of the tests' mpirun: Open MPI refuses to run as root without
# --allow-run-as-root (CI runs as root) and more ranks than cores without --oversubscribe;
# --bind-to none lets the ranks share the cores. Other MPIs (MPICH) get none of these flags. One
# OpenMP thread per rank, unbound; Kokkos' warning about oversubscribed cores off; Open MPI's
# shared-memory transport without CMA single copies (which containers often forbid).
function(kstage_mpiexec_flags out_flags out_env)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE version ERROR_VARIABLE version
                  RESULT_VARIABLE rc)
  set(flags "")
  if(version MATCHES "Open MPI|OpenRTE")
    set(flags --oversubscribe --allow-run-as-root --bind-to none)
  endif()
  set(${out_flags} ${flags} PARENT_SCOPE)
  set(${out_env} OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMP_PLACES=cores KOKKOS_DISABLE_WARNINGS=1
                 OMPI_MCA_btl_vader_single_copy_mechanism=none PARENT_SCOPE)
endfunction()
