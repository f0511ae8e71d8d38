# cmake -DQKV=path/to/qkv -DWORK=dir -P test_demo.cmake: a miniature `qkv demo` (seconds, not
# minutes) writes everything it promises, `qkv translate` reads its model, and `qkv heatmap`
# renders the attention weights it saved.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${ARGN} exited ${code}:\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${QKV} demo --out ${WORK} --train-sentences 2000 --eval-sentences 24 --steps 40 --batch 16
    --d-model 32 --heads 2 --layers 1 --heatmaps 2 --beam 2 --beam-sentences 4)
message("${out}")
foreach(pattern "exact match" "BLEU" "alignment accuracy" "where it looks" "summary.json"
        "attention diagnostics" "head 1: ")
  if(NOT out MATCHES "${pattern}")
    message(FATAL_ERROR "qkv demo printed no '${pattern}'")
  endif()
endforeach()

file(READ ${WORK}/summary.json summary)
foreach(key exact_match bleu alignment_accuracy train_seconds eval_sentences)
  string(JSON value ERROR_VARIABLE missing GET "${summary}" ${key})
  if(missing)
    message(FATAL_ERROR "summary.json has no \"${key}\": ${summary}")
  endif()
endforeach()
string(JSON sentences GET "${summary}" eval_sentences)
if(NOT sentences EQUAL 24)
  message(FATAL_ERROR "summary.json: eval_sentences ${sentences}, expected 24")
endif()
# One verdict per head (2), over the 24 held-out sentences.
string(JSON count LENGTH "${summary}" diagnostics)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "summary.json: ${count} diagnosed heads, expected 2")
endif()
string(JSON verdict GET "${summary}" diagnostics 1 verdict)
if(NOT verdict MATCHES "^(uniform|diffuse|sharp and right|sharp and wrong)$")
  message(FATAL_ERROR "summary.json: head 1's verdict is '${verdict}'")
endif()
string(JSON count LENGTH "${summary}" heatmaps)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "summary.json: ${count} heatmaps, expected 2")
endif()
foreach(kind png svg weights)
  string(JSON path GET "${summary}" heatmaps 0 ${kind})
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "summary.json names ${path}, which is missing")
  endif()
endforeach()
string(JSON png GET "${summary}" heatmaps 0 png)
file(READ "${png}" signature LIMIT 8 HEX)
if(NOT signature STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "${png} is not a PNG (starts ${signature})")
endif()
string(JSON svg GET "${summary}" heatmaps 0 svg)
file(READ "${svg}" text)
if(NOT text MATCHES "<svg" OR NOT text MATCHES "</svg>[ \n]*$")
  message(FATAL_ERROR "${svg} is not an SVG document")
endif()

run(${QKV} translate --model ${WORK}/model.safetensors --beam 2 --heatmap ${WORK}/cat.svg
    "the black cat sat on the mat")
message("${out}")
if(NOT out MATCHES "ms per token" OR NOT EXISTS ${WORK}/cat.svg)
  message(FATAL_ERROR "qkv translate printed no latency or drew no heatmap:\n${out}")
endif()

string(JSON weights GET "${summary}" heatmaps 0 weights)
run(${QKV} heatmap ${weights} --out ${WORK}/again.png)
if(NOT EXISTS ${WORK}/again.png)
  message(FATAL_ERROR "qkv heatmap wrote no ${WORK}/again.png:\n${out}")
endif()

# A model trained for one step emits <pad> and <bos> (on the development machine, with this
# seed), which Vocabulary::decode skips: the heatmaps still get one row label per row (the labels
# were once taken from the decoded words and ran past their end).
set(tiny --train-sentences 100 --eval-sentences 2 --d-model 8 --heads 1 --layers 1
    --feedforward 8 --heatmaps 1 --beam 1 --beam-sentences 1)
# One thread, as in test_cli_files.cmake: 2 s instead of 28 under ASan on a busy machine.
set(ENV{OMP_NUM_THREADS} 1)
run(${QKV} demo --out ${WORK}/untrained ${tiny} --steps 1 --seed 4294967295)
if(NOT EXISTS ${WORK}/untrained/heatmaps/sentence-1.svg)
  message(FATAL_ERROR "qkv demo drew no heatmap of its untrained model:\n${out}")
endif()
# A time budget with fewer --max-steps than the usual warm-up (150) warms up for a tenth of them.
run(${QKV} demo --out ${WORK}/short ${tiny} --time-budget 1 --max-steps 3)

# Errors name what is wrong and write nothing.
execute_process(COMMAND ${QKV} translate --model ${png} "the cat" RESULT_VARIABLE code
                ERROR_VARIABLE err OUTPUT_QUIET)
if(code EQUAL 0 OR NOT err MATCHES "qkv: ")
  message(FATAL_ERROR "qkv translate on a PNG should fail with a message: ${err}")
endif()
