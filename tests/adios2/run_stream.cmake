# adios2_sst_stream (cmake -P -DPROGRAM=<kstage_test_adios2_stream> -DWORK=<dir>): the writer and
# the reader run at once (one execute_process with two commands runs them side by side), bounded
# in time; both must succeed.
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(
  COMMAND "${PROGRAM}" writer ticks 25 "${WORK}/checksum"
  COMMAND "${PROGRAM}" reader ticks "${WORK}/checksum"
  WORKING_DIRECTORY "${WORK}"
  TIMEOUT 120
  RESULTS_VARIABLE _rcs OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message(STATUS "writer, reader: ${_rcs}\n${_out}${_err}")
if(NOT _rcs STREQUAL "0;0")
  message(FATAL_ERROR "the SST writer and reader did not both succeed: ${_rcs}")
endif()
