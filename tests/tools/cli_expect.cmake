# The checks of qkv's exit status convention, included by test_cli.cmake and test_cli_files.cmake.
# Each runs `${QKV} ARGS...` in ${WORK} and fails the test when qkv does not:
#   expect_help(USAGE <line> ARGS ...)            exit 0, the usage on stdout, nothing on stderr
#   expect_usage_error(USAGE <line> NAMES <text> ARGS ...)
#                                                  exit 2, nothing on stdout, stderr starting with
#                                                  a line that contains <text>, then the usage
#   expect_file_error(NAMES <file> ARGS ...)       exit 1, nothing on stdout, stderr exactly one
#                                                  line "qkv: ..." that contains <file>
# <line> is the start of the usage line, "Usage: qkv demo" for the demo command.

function(run_qkv)
  execute_process(COMMAND ${QKV} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE code
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(JOIN " " shown ${ARGN})
  message("qkv ${shown}: exit ${code}\n${err}")
  set(code "${code}" PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

function(fail what)
  string(JOIN " " shown ${ARGS})
  message(FATAL_ERROR "qkv ${shown}: ${what}\nexit status ${code}\nstdout:\n${out}\nstderr:\n${err}")
endfunction()

function(expect_help)
  cmake_parse_arguments(PARSE_ARGV 0 "" "" "USAGE" "ARGS")
  set(ARGS "${_ARGS}")
  run_qkv(${ARGS})
  string(FIND "${out}" "${_USAGE} " usage)
  if(NOT code EQUAL 0 OR usage EQUAL -1 OR NOT err STREQUAL "")
    fail("expected exit status 0, '${_USAGE}' on stdout and nothing on stderr")
  endif()
endfunction()

function(expect_usage_error)
  cmake_parse_arguments(PARSE_ARGV 0 "" "" "USAGE;NAMES" "ARGS")
  set(ARGS "${_ARGS}")
  run_qkv(${ARGS})
  string(FIND "${err}" "\n" end)
  string(SUBSTRING "${err}" 0 ${end} first_line)
  string(FIND "${first_line}" "${_NAMES}" named)
  string(FIND "${err}" "\n${_USAGE} " usage)
  if(NOT code EQUAL 2 OR NOT out STREQUAL "" OR named EQUAL -1 OR usage EQUAL -1)
    fail("expected exit status 2, nothing on stdout, a first line on stderr naming '${_NAMES}' "
         "and then '${_USAGE}'")
  endif()
endfunction()

function(expect_file_error)
  cmake_parse_arguments(PARSE_ARGV 0 "" "" "NAMES" "ARGS")
  set(ARGS "${_ARGS}")
  run_qkv(${ARGS})
  string(FIND "${err}" "\n" end)
  string(LENGTH "${err}" length)
  math(EXPR last "${length} - 1")
  string(FIND "${err}" "${_NAMES}" named)
  string(FIND "${err}" "qkv: " start)
  if(NOT code EQUAL 1 OR NOT out STREQUAL "" OR NOT start EQUAL 0 OR NOT end EQUAL last
     OR named EQUAL -1)
    fail("expected exit status 1, nothing on stdout and one line 'qkv: ...' naming '${_NAMES}' "
         "on stderr")
  endif()
endfunction()
