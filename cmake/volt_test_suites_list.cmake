# Runs inside CTest (volt_test_suites.cmake): lists the suites of volt_program and adds one test
# per suite. The list is written to volt_list_file and reused until the program changes.
if(NOT EXISTS "${volt_program}")
  add_test("${volt_area}:NOT_BUILT" "${volt_program}")
  return()
endif()
if(NOT EXISTS "${volt_list_file}" OR "${volt_program}" IS_NEWER_THAN "${volt_list_file}")
  execute_process(COMMAND "${volt_program}" --gtest_list_tests
                  OUTPUT_VARIABLE volt_listing RESULT_VARIABLE volt_result TIMEOUT 120)
  if(NOT volt_result EQUAL 0)
    # A program that cannot list its tests fails as a test, with its own message, not silently.
    file(WRITE "${volt_list_file}" "add_test([==[${volt_area}:LIST_TESTS]==] [==[${volt_program}]==] --gtest_list_tests)\n")
  else()
    string(REPLACE "\n" ";" volt_lines "${volt_listing}")
    set(volt_text "")
    foreach(volt_line IN LISTS volt_lines)
      # Suites start in the first column ("Suite." or "Prefix/Suite.  # TypeParam = ..."); their
      # cases are indented.
      if(volt_line MATCHES "^([^ #][^ ]*)\\.")
        set(volt_suite "${CMAKE_MATCH_1}")
        set(volt_name "${volt_area}:${volt_suite}")
        string(APPEND volt_text
               "add_test([==[${volt_name}]==] [==[${volt_program}]==] [==[--gtest_filter=${volt_suite}.*]==])\n"
               "set_tests_properties([==[${volt_name}]==] PROPERTIES LABELS [==[${volt_area}]==] TIMEOUT ${volt_timeout} "
               "SKIP_RETURN_CODE 77)\n")
      endif()
    endforeach()
    file(WRITE "${volt_list_file}" "${volt_text}")
  endif()
endif()
include("${volt_list_file}")
