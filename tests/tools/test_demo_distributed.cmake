# cmake -DQKV=path/to/qkv -DMPIEXEC=mpirun -DWORK=dir -P test_demo_distributed.cmake: a miniature
# `qkv demo --distributed` on 2 ranks writes its summary (rank 0 alone), with "ranks": 2, and its
# last loss is the one-process run's to f32 rounding (the same batches, the update of the whole
# batch).
file(REMOVE_RECURSE ${WORK})
set(args --train-sentences 2000 --eval-sentences 24 --steps 40 --batch 16 --d-model 32 --heads 2
         --layers 1 --heatmaps 2 --beam 2 --beam-sentences 4)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${ARGN} exited ${code}:\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${MPIEXEC} -np 2 --oversubscribe ${QKV} demo --distributed --out ${WORK}/two ${args})
message("${out}")
if(NOT out MATCHES "data parallel: 2 ranks")
  message(FATAL_ERROR "qkv demo --distributed printed no 'data parallel: 2 ranks'")
endif()
run(${QKV} demo --out ${WORK}/one ${args})

file(READ ${WORK}/two/summary.json two)
file(READ ${WORK}/one/summary.json one)
string(JSON ranks GET "${two}" ranks)
if(NOT ranks EQUAL 2)
  message(FATAL_ERROR "summary.json: ranks ${ranks}, expected 2")
endif()
string(JSON loss_two GET "${two}" final_loss)
string(JSON loss_one GET "${one}" final_loss)
# cmake has no floating point: the losses in units of 1e-5 (they lie between 0.1 and 10), as
# integers, at most 2 apart.
function(hundred_thousandths value var)
  if(NOT value MATCHES "^([0-9])\\.([0-9][0-9][0-9][0-9][0-9])")
    message(FATAL_ERROR "final loss ${value}: expected d.ddddd...")
  endif()
  math(EXPR units "${CMAKE_MATCH_1} * 100000 + 1${CMAKE_MATCH_2} - 100000")
  set(${var} ${units} PARENT_SCOPE)
endfunction()
hundred_thousandths("${loss_two}" units_two)
hundred_thousandths("${loss_one}" units_one)
math(EXPR gap "${units_two} - ${units_one}")
if(gap GREATER 2 OR gap LESS -2)
  message(FATAL_ERROR "final loss ${loss_two} on 2 ranks, ${loss_one} in one process")
endif()
