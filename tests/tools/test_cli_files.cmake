# cmake -DQKV=path/to/qkv -DBAD_FILES=path/to/bad_files -DWORK=dir -DBENCH=ON|OFF
#       -P test_cli_files.cmake
# A file qkv cannot use (missing, a folder, unreadable, empty, truncated, corrupt, a model without
# a tensor the translator needs) or cannot write gives exit status 1 and one line on stderr,
# "qkv: ..." naming the file, and nothing on stdout. The broken files are made from the outputs
# of a miniature `qkv demo` by bad_files.
include(${CMAKE_CURRENT_LIST_DIR}/cli_expect.cmake)
# One thread: a model of width 8 gains nothing from two, and on a busy machine OpenMP's waiting
# threads made the miniature demo 28 s instead of 2 under ASan (2 vCPUs, load 11, 2026-11-23).
set(ENV{OMP_NUM_THREADS} 1)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

run_qkv(demo --out demo --train-sentences 200 --eval-sentences 2 --steps 2 --batch 4 --d-model 8
        --heads 1 --layers 1 --feedforward 8 --heatmaps 1 --beam 1 --beam-sentences 1)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the miniature qkv demo failed:\n${out}\n${err}")
endif()
set(model ${WORK}/demo/model.safetensors)
set(weights ${WORK}/demo/heatmaps/sentence-1.safetensors)
execute_process(COMMAND ${BAD_FILES} ${WORK} ${model} RESULT_VARIABLE code ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "bad_files exited ${code}: ${err}")
endif()
file(MAKE_DIRECTORY ${WORK}/folder.safetensors ${WORK}/folder.png)
file(WRITE ${WORK}/a_file "")

set(unusable missing.safetensors folder.safetensors empty.safetensors truncated.safetensors
    random.safetensors past_end.safetensors array.safetensors newline.safetensors)
# Root reads any file, so an unreadable one is only tested for other users.
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT uid STREQUAL "0")
  file(COPY_FILE ${weights} ${WORK}/unreadable.safetensors)
  file(CHMOD ${WORK}/unreadable.safetensors PERMISSIONS OWNER_WRITE)
  list(APPEND unusable unreadable.safetensors)
endif()

foreach(name ${unusable} no_tensor.safetensors layers.safetensors)
  expect_file_error(NAMES ${name} ARGS translate --model ${name} "the black cat")
endforeach()
# A valid safetensors file that is not a translator: no config in its metadata.
expect_file_error(NAMES ${weights} ARGS translate --model ${weights} "the black cat")
foreach(name ${unusable})
  expect_file_error(NAMES ${name} ARGS heatmap ${name} --out never.png)
endforeach()
if(EXISTS ${WORK}/never.png)
  message(FATAL_ERROR "a failed qkv heatmap wrote never.png")
endif()

# Outputs that cannot be written, refused before any work.
expect_file_error(NAMES no/such/folder/x.png ARGS heatmap ${weights} --out no/such/folder/x.png)
expect_file_error(NAMES folder.png ARGS heatmap ${weights} --out folder.png)
expect_file_error(NAMES no/such/folder/cat.svg
                  ARGS translate --model ${model} --heatmap no/such/folder/cat.svg "the cat")
expect_file_error(NAMES a_file ARGS demo --out a_file)
if(BENCH)
  expect_file_error(NAMES no/such/folder/r.json
                    ARGS bench --quick --reps 1 --json no/such/folder/r.json)
  expect_file_error(NAMES no/such/folder/v.png
                    ARGS bench --variants --quick --reps 1 --plot no/such/folder/v.png)
endif()
