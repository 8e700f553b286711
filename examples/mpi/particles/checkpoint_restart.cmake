# The MPI particles example checkpointed and restarted (ctest example_mpi_particles_restart):
# run A checkpoints every 4 ticks of 10 (its last checkpoint: tick 8); run B restarts from it
# on the same ranks and runs ticks 9 and 10. Both end with the same global state: the same
# particle count and checksum at tick 10 (each checked there against its own plain model).
#   cmake -DMPIEXEC=... "-DFLAGS=a;b" -DPROGRAM=... -DWORK=dir -P checkpoint_restart.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(_run "${MPIEXEC}" -n 2 ${FLAGS} "${PROGRAM}" -n 3000 -t 10 -c 5)
function(_step name)
  execute_process(COMMAND ${_run} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  message("---- ${name}: ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc})")
  endif()
  string(REGEX MATCH "tick +10: [^\n]*" final "${out}")
  if(final STREQUAL "")
    message(FATAL_ERROR "${name} printed no tick-10 state")
  endif()
  set(${name}_final "${final}" PARENT_SCOPE)
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()
_step(uninterrupted --checkpoint "${WORK}/run.ckpt" --every 4)
if(NOT uninterrupted_out MATCHES "checkpoint at tick 8 in ")
  message(FATAL_ERROR "the run wrote no checkpoint at tick 8")
endif()
_step(restarted --restart "${WORK}/run.ckpt")
if(NOT restarted_out MATCHES "restarted from [^\n]* at tick 8")
  message(FATAL_ERROR "the run did not restart at tick 8")
endif()
if(NOT uninterrupted_final STREQUAL restarted_final)
  message(FATAL_ERROR "the restarted run ends elsewhere:\n  ${uninterrupted_final}\n  ${restarted_final}")
endif()
message("same state at tick 10: ${restarted_final}")
