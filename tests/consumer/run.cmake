# cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=...
#       -DCXX_FLAGS=... -DLINK_FLAGS=... -P run.cmake
# Installs qkv into a scratch prefix and builds, as a user would, the CMakeLists.txt that README.md
# shows under "In your project" (taken from README.md as it stands, so the test is the snippet)
# around app.cpp, then the same file with qkv::viz in place of qkv::qkv around viz_app.cpp. The
# consumers are compiled with the flags qkv was built with, so a sanitized qkv links; those flags
# never name a C++ standard.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
  message("${out}")
endfunction()

file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "In your project, a whole `CMakeLists.txt`:\n\n```cmake\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no \"In your project\" CMakeLists.txt block")
endif()
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```cmake\n" open)
math(EXPR open "${open} + 9")
string(SUBSTRING "${rest}" ${open} -1 rest)
string(FIND "${rest}" "```" close)
string(SUBSTRING "${rest}" 0 ${close} snippet)
if(snippet MATCHES "CXX_STANDARD|cxx_std")
  message(FATAL_ERROR "the README's CMakeLists.txt sets a C++ standard of its own:\n${snippet}")
endif()
string(REPLACE "qkv::qkv" "qkv::viz" viz_snippet "${snippet}")

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(program IN ITEMS app viz_app)
  set(project ${WORK_DIR}/${program})
  if(program STREQUAL "viz_app")
    file(WRITE ${project}/CMakeLists.txt "${viz_snippet}")
  else()
    file(WRITE ${project}/CMakeLists.txt "${snippet}")
  endif()
  configure_file(${SOURCE_DIR}/tests/consumer/${program}.cpp ${project}/main.cpp COPYONLY)
  run(${CMAKE_COMMAND} -S ${project} -B ${project}/build -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")
  run(${CMAKE_COMMAND} --build ${project}/build)
  run(${project}/build/app)
endforeach()
