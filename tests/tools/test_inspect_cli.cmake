# cmake -DQKV=path/to/qkv -DFIXTURE=path/to/heatmap_fixture -DWORK_DIR=... -P test_inspect_cli.cmake
# `qkv inspect` gives the planted heads of heads.safetensors their verdicts (diagonal: sharp and
# right against the file's alignment; uniform; the next key: sharp and wrong), writes them as
# JSON, and refuses a tensor or an alignment that is not there and a file with no weights.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${FIXTURE} ${WORK_DIR} RESULT_VARIABLE code ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "heatmap_fixture exited ${code}: ${err}")
endif()

function(qkv_inspect expect_success)
  execute_process(COMMAND ${QKV} inspect ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect_success AND NOT code EQUAL 0)
    message(FATAL_ERROR "qkv inspect ${ARGN} exited ${code}: ${err}")
  elseif(NOT expect_success AND code EQUAL 0)
    message(FATAL_ERROR "qkv inspect ${ARGN} should fail")
  endif()
  set(out "${out}${err}" PARENT_SCOPE)
  message("qkv inspect ${ARGN}: ${out}${err}")
endfunction()

qkv_inspect(TRUE heads.safetensors --alignment alignment --json report.json)
foreach(pattern "head 0: sharp and right" "head 1: uniform" "head 2: sharp and wrong"
        "argmax on the alignment 100.0% of 5 rows" "argmax on the alignment 0.0% of 5 rows")
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "qkv inspect printed no '${pattern}'")
  endif()
endforeach()
file(READ ${WORK_DIR}/report.json report)
string(JSON count LENGTH "${report}" weights)
if(NOT count EQUAL 3)
  message(FATAL_ERROR "report.json: ${count} heads of weights, expected 3: ${report}")
endif()
string(JSON verdict GET "${report}" weights 2 verdict)
string(JSON accuracy GET "${report}" weights 0 alignment_accuracy)
if(NOT verdict STREQUAL "sharp and wrong" OR NOT accuracy EQUAL 1)
  message(FATAL_ERROR "report.json: head 2 '${verdict}', head 0's accuracy ${accuracy}")
endif()

# Without an alignment the sharp heads are only sharp.
qkv_inspect(TRUE heads.safetensors --tensor weights)
if(NOT out MATCHES "head 0: sharp \\(" OR out MATCHES "alignment")
  message(FATAL_ERROR "qkv inspect without --alignment: ${out}")
endif()

qkv_inspect(FALSE heads.safetensors --tensor nope)
if(NOT out MATCHES "--tensor: expected a tensor of heads.safetensors, got 'nope'")
  message(FATAL_ERROR "qkv inspect --tensor nope: ${out}")
endif()
qkv_inspect(FALSE heads.safetensors --alignment nope)
if(NOT out MATCHES "--alignment")
  message(FATAL_ERROR "qkv inspect --alignment nope: ${out}")
endif()
qkv_inspect(FALSE two.safetensors)
if(NOT out MATCHES "no such tensor")
  message(FATAL_ERROR "qkv inspect two.safetensors: ${out}")
endif()
