# cmake -DQKV=path/to/qkv -DPLOT=dir/v.svg -P check_plot.cmake: `qkv bench --variants --plot`
# writes one picture per pass measured (here --pass fwd: v-fwd.svg, no v-bwd.svg, no v.svg) with a
# line per variant (8 sparse, 6 linear) and the two reference lines, and its legend names each of
# them.
get_filename_component(dir ${PLOT} DIRECTORY)
get_filename_component(stem ${PLOT} NAME_WE)
set(fwd ${dir}/${stem}-fwd.svg)
set(bwd ${dir}/${stem}-bwd.svg)
file(REMOVE ${PLOT} ${fwd} ${bwd})
execute_process(COMMAND ${QKV} bench --variants --quick --reps 1 --pass fwd --plot ${PLOT}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "qkv bench --variants --plot exited ${code}:\n${out}\n${err}")
endif()
message("${out}")
if(NOT EXISTS ${fwd} OR EXISTS ${bwd} OR EXISTS ${PLOT})
  message(FATAL_ERROR "expected ${fwd} alone")
endif()
string(FIND "${out}" "plot: ${fwd}" said)
if(said EQUAL -1)
  message(FATAL_ERROR "qkv bench did not print the plot's path")
endif()
file(READ ${fwd} svg)
string(REGEX MATCHALL "<path class=\"series\"" paths "${svg}")
list(LENGTH paths count)
if(NOT count EQUAL 16)
  message(FATAL_ERROR "${fwd}: expected 16 series (8 sparse, 6 linear, ~ T, ~ T^2), got ${count}")
endif()
foreach(name full causal window longformer bigbird document strided window_lambda "linear elu"
        "linear elu_causal" "linear favor64" "linear favor64_causal" "linear favor256"
        "linear favor256_causal" "~ T" "~ T^2")
  string(FIND "${svg}" ">${name}</text>" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${fwd}: the legend does not name '${name}'")
  endif()
endforeach()
