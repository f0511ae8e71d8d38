# cmake -DQKV=path/to/qkv -DFIXTURE=path/to/heatmap_fixture -DWORK_DIR=... -P test_heatmap_cli.cmake
# `qkv heatmap` draws a [B, H, R, C] tensor of a safetensors file as PNG and SVG, and refuses an
# ambiguous file or a head that is not there.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${FIXTURE} ${WORK_DIR} RESULT_VARIABLE code ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "heatmap_fixture exited ${code}: ${err}")
endif()

function(qkv_heatmap expect_success)
  execute_process(COMMAND ${QKV} heatmap ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect_success AND NOT code EQUAL 0)
    message(FATAL_ERROR "qkv heatmap ${ARGN} exited ${code}: ${err}")
  elseif(NOT expect_success AND code EQUAL 0)
    message(FATAL_ERROR "qkv heatmap ${ARGN} should fail")
  endif()
  set(out "${out}${err}" PARENT_SCOPE)
  message("qkv heatmap ${ARGN}: ${out}${err}")
endfunction()

# The default output: the file's stem + .png in the working directory.
qkv_heatmap(TRUE attention.safetensors --x-labels "the cat sat down" --y-labels "le chat assis"
            --title "batch 0")
if(NOT out MATCHES "attention.png: [1-9][0-9]* x [1-9][0-9]* pixels")
  message(FATAL_ERROR "qkv heatmap did not print the path and size: ${out}")
endif()
file(READ ${WORK_DIR}/attention.png signature LIMIT 8 HEX)
if(NOT signature STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "attention.png does not start with the PNG signature: ${signature}")
endif()

qkv_heatmap(TRUE attention.safetensors --batch 1 --head 1 --out one_head.svg)
file(READ ${WORK_DIR}/one_head.svg svg)
if(NOT svg MATCHES "<svg " OR NOT svg MATCHES ">head 1<")
  message(FATAL_ERROR "one_head.svg is not an SVG of head 1:\n${svg}")
endif()

qkv_heatmap(FALSE two.safetensors)
if(NOT out MATCHES "--tensor" OR NOT out MATCHES "a, b")
  message(FATAL_ERROR "an ambiguous file should name its tensors: ${out}")
endif()
qkv_heatmap(TRUE two.safetensors --tensor b --out b.png)
qkv_heatmap(FALSE attention.safetensors --head 2 --out never.png)
qkv_heatmap(FALSE attention.safetensors --x-labels "too few" --out never.png)
if(EXISTS ${WORK_DIR}/never.png)
  message(FATAL_ERROR "a failed qkv heatmap wrote never.png")
endif()
