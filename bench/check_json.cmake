# cmake -DQKV=path/to/qkv -DJSON=out.json -P check_json.cmake: `qkv bench --quick` runs, prints
# its table, and writes JSON with the promised keys, one record per row, every ms > 0.
# Runs `qkv bench ARGS... --json ${JSON}`, prints its table; `out` and `doc` then hold the table
# and the JSON. Fails on a non-zero exit.
macro(run_bench)
  file(REMOVE ${JSON})
  execute_process(COMMAND ${QKV} bench ${ARGN} --json ${JSON}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "qkv bench ${ARGN} exited ${code}:\n${out}\n${err}")
  endif()
  message("${out}")
  file(READ ${JSON} doc)
endmacro()

run_bench(--quick --reps 1)
if(NOT out MATCHES "kernel +pass")
  message(FATAL_ERROR "qkv bench printed no table header")
endif()

foreach(key peak_gflops stream_gbps read_gbps rows)
  string(JSON type ERROR_VARIABLE missing TYPE "${doc}" ${key})
  if(missing)
    message(FATAL_ERROR "${JSON}: no key '${key}'")
  endif()
endforeach()

# --quick: T in {256, 512} x causal and not x fwd and bwd at D 64, plus one decode row.
string(JSON rows LENGTH "${doc}" rows)
if(NOT rows EQUAL 9)
  message(FATAL_ERROR "${JSON}: expected 9 rows, got ${rows}")
endif()
math(EXPR last "${rows} - 1")
set(decode_rows 0)
foreach(i RANGE ${last})
  foreach(key kernel pass B H Tq Tk D causal dtype threads ms gflops peak_fraction
              ceiling_during_row fraction_during_row peak_rss_mb)
    string(JSON type ERROR_VARIABLE missing TYPE "${doc}" rows ${i} ${key})
    if(missing)
      message(FATAL_ERROR "${JSON}: row ${i} has no key '${key}'")
    endif()
  endforeach()
  string(JSON ms GET "${doc}" rows ${i} ms)
  string(JSON rss GET "${doc}" rows ${i} peak_rss_mb)
  # cmake's math() is integer-only: compare the decimal text against zero instead.
  foreach(value ms rss)
    if(NOT "${${value}}" MATCHES "^[0-9.e+-]+$" OR "${${value}}" MATCHES "^[0.]+(e.*)?$")
      message(FATAL_ERROR "${JSON}: row ${i}: ${value} is '${${value}}', expected a number > 0")
    endif()
  endforeach()
  string(JSON tq GET "${doc}" rows ${i} Tq)
  if(tq EQUAL 1)
    math(EXPR decode_rows "${decode_rows} + 1")
    foreach(key gbps read_during_row fraction_of_read_during_row)
      string(JSON type ERROR_VARIABLE missing TYPE "${doc}" rows ${i} ${key})
      if(missing)
        message(FATAL_ERROR "${JSON}: decode row ${i} has no key '${key}'")
      endif()
    endforeach()
  endif()
endforeach()
if(NOT decode_rows EQUAL 1)
  message(FATAL_ERROR "${JSON}: expected 1 decode row, got ${decode_rows}")
endif()

# --decode-group 4: one GQA decode row, 32 query heads over 8 k/v heads, its table's H column
# "32/8", the JSON's Hq 32 beside H 8, and GB/s counted over K and V alone.
run_bench(--decode-only --decode-tk 4096 --decode-group 4 --reps 1)
if(NOT out MATCHES " 32/8 ")
  message(FATAL_ERROR "qkv bench --decode-group 4 printed no 32/8 heads column")
endif()
string(JSON rows LENGTH "${doc}" rows)
string(JSON hq GET "${doc}" rows 0 Hq)
string(JSON h GET "${doc}" rows 0 H)
if(NOT rows EQUAL 1 OR NOT hq EQUAL 32 OR NOT h EQUAL 8)
  message(FATAL_ERROR "${JSON}: expected 1 row of Hq 32 over H 8, got ${rows} rows, Hq ${hq}, H ${h}")
endif()

# --decode-tq 20: one decode row of 20 queries a head, judged against the memory like one query:
# its GB/s and its share of the read sweep are there.
run_bench(--decode-only --decode-tk 4096 --decode-tq 20 --reps 1)
string(JSON rows LENGTH "${doc}" rows)
string(JSON tq GET "${doc}" rows 0 Tq)
string(JSON type ERROR_VARIABLE missing TYPE "${doc}" rows 0 gbps)
if(NOT rows EQUAL 1 OR NOT tq EQUAL 20 OR missing)
  message(FATAL_ERROR "${JSON}: expected 1 decode row of Tq 20 with gbps, got ${rows} rows, Tq ${tq}")
endif()
