# Generates the Fortran constants of kstage.h and dlpack.h (cmake -P), so that the module never
# drifts from the C headers it mirrors:
#
#   cmake -DKSTAGE_H=<kstage.h> -DDLPACK_H=<dlpack.h> -DOUT=<kstage_constants.f90>
#         [-DTABLE_C=<file.c> -DTABLE_F90=<file.f90>] -P generate_constants.cmake
#
# OUT: module kstage_constants, one named constant per enumerator and value macro of kstage.h
# (KSTAGE_*) and of dlpack.h (kDL*, DLPACK_*). An enumerator or macro this script cannot read is
# an error, not a silent gap: a new kind of definition in a header stops the build here.
# TABLE_C / TABLE_F90 (tests/fortran): the same names as a C table (whose values the C compiler
# computes from the headers themselves) and a Fortran one (values from the generated module), so
# that the test compares every value the generator wrote with what C sees.
cmake_minimum_required(VERSION 3.25)
foreach(_v KSTAGE_H DLPACK_H OUT)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "generate_constants.cmake: -D${_v}=... is required")
  endif()
endforeach()

set(_names "")   # every numeric constant, in header order
set(_string_names "")  # the string constants (checked by tests/fortran/test_fortran.f90)
set(_decls "")   # its Fortran declaration

# _add(<name> <fortran kind> <fortran value> <what it is, for the comment>)
macro(_add name kind value)
  list(APPEND _names "${name}")
  string(APPEND _decls "  integer(${kind}), parameter :: ${name} = ${value}\n")
endmacro()

# A macro's value as Fortran: (kind value) in _kind / _value, or an error naming it.
function(_macro_value header name text)
  string(STRIP "${text}" text)
  if(text MATCHES "^[0-9]+u?$")                        # 64, 65536u
    string(REGEX REPLACE "u$" "" text "${text}")
    set(_kind c_int32_t)
    set(_value "${text}_c_int32_t")
  elseif(text MATCHES "^UINT64_C\\(([0-9]+)\\)$")       # UINT64_C(1)
    set(_kind c_int64_t)
    set(_value "${CMAKE_MATCH_1}_c_int64_t")
  elseif(text STREQUAL "UINT64_MAX")                   # two's complement: all bits set
    set(_kind c_int64_t)
    set(_value "-1_c_int64_t")
  elseif(text STREQUAL "((size_t)-1)")
    set(_kind c_size_t)
    set(_value "-1_c_size_t")
  elseif(text STREQUAL "((uintptr_t)-1)")              # KSTAGE_STREAM_UNORDERED
    set(_kind c_intptr_t)
    set(_value "-1_c_intptr_t")
  elseif(text MATCHES "^\\(1UL << ([0-9]+)UL\\)$")      # DLPack's flag bits
    math(EXPR _bit "1 << ${CMAKE_MATCH_1}")
    set(_kind c_int64_t)
    set(_value "${_bit}_c_int64_t")
  else()
    message(FATAL_ERROR "generate_constants.cmake: ${header}: cannot read the value of ${name} "
                        "('${text}'): teach fortran/generate_constants.cmake this kind of macro")
  endif()
  set(_kind "${_kind}" PARENT_SCOPE)
  set(_value "${_value}" PARENT_SCOPE)
endfunction()

# Macros that are not values (include guards, attributes, initialisers).
set(_not_values KSTAGE_KSTAGE_H_ KSTAGE_API KSTAGE_IMPL_ZERO DLPACK_DLPACK_H_ DLPACK_EXTERN_C
                DLPACK_DLL)

foreach(_header_var KSTAGE_H DLPACK_H)
  set(_header "${${_header_var}}")
  if(_header_var STREQUAL "KSTAGE_H")
    set(_enum_re "^[ \t]*(KSTAGE_[A-Z0-9_]+)[ \t]*=[ \t]*(-?[0-9]+)[ \t]*,?")
    set(_macro_re "^#[ \t]*define[ \t]+(KSTAGE_[A-Z0-9_]+)([ \t]+(.*))?$")
    set(_enum_any "^[ \t]*KSTAGE_[A-Z0-9_]+[ \t]*=")
  else()
    set(_enum_re "^[ \t]*(kDL[A-Za-z0-9_]+)[ \t]*=[ \t]*([0-9]+)U?[ \t]*,?")
    set(_macro_re "^#[ \t]*define[ \t]+(DLPACK_[A-Z0-9_]+)([ \t]+(.*))?$")
    set(_enum_any "^[ \t]*kDL[A-Za-z0-9_]+[ \t]*=")
  endif()
  # One list element per line: brackets, backslashes and semicolons of the C text would
  # otherwise join or split CMake list elements.
  file(READ "${_header}" _text)
  string(REPLACE ";" "<semicolon>" _text "${_text}")
  string(REPLACE "[" "<lb>" _text "${_text}")
  string(REPLACE "]" "<rb>" _text "${_text}")
  string(REPLACE "\\" "<bs>" _text "${_text}")
  string(REPLACE "\n" ";" _lines "${_text}")
  get_filename_component(_header_name "${_header}" NAME)
  string(APPEND _decls "\n  ! ${_header_name}\n")
  foreach(_line IN LISTS _lines)
    if(_line MATCHES "${_enum_re}")
      _add("${CMAKE_MATCH_1}" c_int32_t "${CMAKE_MATCH_2}_c_int32_t")
    elseif(_line MATCHES "${_enum_any}")
      message(FATAL_ERROR "generate_constants.cmake: ${_header}: cannot read the enumerator '${_line}'")
    elseif(_line MATCHES "${_macro_re}")
      set(_name "${CMAKE_MATCH_1}")
      set(_text "${CMAKE_MATCH_3}")
      # A function-like macro or a trailing comment is not a value.
      string(REGEX REPLACE "[ \t]*/\\*.*$" "" _text "${_text}")
      if(_name IN_LIST _not_values OR _name IN_LIST _names OR _name IN_LIST _string_names)
        continue()
      endif()
      # A string (the reserved attribute names): a character constant, outside the value table.
      if(_text MATCHES "^\"([^\"'<>]*)\"$")
        list(APPEND _string_names "${_name}")
        string(APPEND _decls "  character(len=*), parameter :: ${_name} = '${CMAKE_MATCH_1}'\n")
        continue()
      endif()
      _macro_value("${_header}" "${_name}" "${_text}")
      _add("${_name}" "${_kind}" "${_value}")
    endif()
  endforeach()
endforeach()

file(WRITE "${OUT}.tmp"
"! Generated by fortran/generate_constants.cmake from kstage.h and dlpack.h: do not edit.
! Every enumerator and value macro of the two headers, with the C name and value (strings as
! character constants). Unsigned C
! values keep their bits: KSTAGE_TIMEOUT_INFINITE (UINT64_MAX) and KSTAGE_NUL_TERMINATED
! ((size_t)-1) and KSTAGE_STREAM_UNORDERED ((uintptr_t)-1) are -1 here.
module kstage_constants
  use, intrinsic :: iso_c_binding, only: c_int32_t, c_int64_t, c_intptr_t, c_size_t
  implicit none
  public
${_decls}end module kstage_constants
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")

if(DEFINED TABLE_C AND DEFINED TABLE_F90)
  list(LENGTH _names _count)
  set(_c "/* Generated by fortran/generate_constants.cmake: every constant the Fortran module has,
 * valued by the C compiler from the headers. */
#include <kstage/kstage.h>
#include <stdint.h>
#include <string.h>

static const struct { const char* name; int64_t value; } kTable[] = {\n")
  set(_f "! Generated by fortran/generate_constants.cmake: every constant of module kstage_constants.
module kstage_constants_table
  use, intrinsic :: iso_c_binding, only: c_int64_t
  use kstage_constants
  implicit none
  integer, parameter :: constant_count = ${_count}
  character(len=*), parameter :: constant_names(constant_count) = [character(len=40) :: &\n")
  set(_fv "  integer(c_int64_t), parameter :: constant_values(constant_count) = [ &\n")
  set(_i 0)
  foreach(_name IN LISTS _names)
    math(EXPR _i "${_i} + 1")
    set(_sep ", &")
    if(_i EQUAL _count)
      set(_sep "]")
    endif()
    string(APPEND _c "  {\"${_name}\", (int64_t)(uint64_t)(${_name})},\n")
    string(APPEND _f "    \"${_name}\"${_sep}\n")
    string(APPEND _fv "    int(${_name}, c_int64_t)${_sep}\n")
  endforeach()
  string(APPEND _c "};

/* The C value of the constant `name` (length `length`) in *value: 1 when C has it, else 0. */
int kstage_test_c_constant(const char* name, size_t length, int64_t* value) {
  size_t i;
  for (i = 0; i < sizeof kTable / sizeof kTable[0]; ++i) {
    if (strlen(kTable[i].name) == length && memcmp(kTable[i].name, name, length) == 0) {
      *value = kTable[i].value;
      return 1;
    }
  }
  return 0;
}
")
  file(WRITE "${TABLE_C}" "${_c}")
  file(WRITE "${TABLE_F90}" "${_f}${_fv}end module kstage_constants_table\n")
endif()
