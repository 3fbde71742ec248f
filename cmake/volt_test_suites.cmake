# Registers a GoogleTest program with CTest as one test per test *suite* (`<area>:<Suite>`, run
# as `program --gtest_filter=<Suite>.*`), not one per test case as gtest_discover_tests does.
# Why: every process that loads LibTorch spends ~1.1 s starting (Debian's loads ~290 shared
# libraries, the CUDA wheel's ~1 GB of them), and the suite had 754 cases in 150 suites: one
# process per suite saves ~600 starts per run of the suite, ~6 minutes on two cores, for each
# LibTorch the CI tests. The cases of a suite share a process, as GoogleTest runs them anyway
# when a program is run by hand. Run one case with the program itself:
# `build/tests/<area>_tests --gtest_filter=Suite.Case`.
#
# Like gtest_discover_tests(DISCOVERY_MODE PRE_TEST), the suites are listed when CTest starts
# (`--gtest_list_tests`, again only after the program was rebuilt), so a build need not run it.
function(volt_add_test_suites target area)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "TIMEOUT" "")
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 1500)
  endif()
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  file(GENERATE OUTPUT "${include_file}" CONTENT
"set(volt_program [==[$<TARGET_FILE:${target}>]==])
set(volt_area [==[${area}]==])
set(volt_timeout ${arg_TIMEOUT})
set(volt_list_file [==[${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake]==])
include([==[${PROJECT_SOURCE_DIR}/cmake/volt_test_suites_list.cmake]==])
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
