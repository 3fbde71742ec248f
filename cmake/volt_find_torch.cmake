# Finds LibTorch (the CMake package "Torch") for volt's own build and for an installed volt's
# voltConfig.cmake. Which LibTorch: the one CMAKE_PREFIX_PATH or Torch_DIR names, else the
# system's (Debian's libtorch-dev 1.13). Two things in LibTorch's own package need help:
#
# - TorchConfig.cmake looks for libtorch.so and libc10.so with find_library, which searches the
#   system's library directories before the package's own. With Debian's libtorch-dev installed,
#   a LibTorch named on CMAKE_PREFIX_PATH (e.g. PyTorch's wheel: .../torch/share/cmake) was given
#   Debian's libtorch.so beside its own libtorch_cpu.so: two LibTorch versions in one program.
#   Torch_ROOT makes find_package search the package's own prefix first, so it is derived here
#   from the TorchConfig.cmake that CMAKE_PREFIX_PATH or Torch_DIR leads to.
# - A CUDA LibTorch 2.x sets the CUDA language standard to the C++ one (20 here), which CMake
#   3.25 cannot give nvcc 13, and fails in its GPU-architecture probe. volt compiles no CUDA
#   sources: the standard LibTorch itself is built with (17) serves the probe.
#
# After find_package, volt_check_torch() fails the configuration if the libraries still come
# from two installations, naming both.
macro(volt_prepare_torch_search)
  if(NOT DEFINED Torch_ROOT AND NOT DEFINED ENV{Torch_ROOT})
    set(volt_torch_config_dir "")
    foreach(volt_dir IN LISTS Torch_DIR CMAKE_PREFIX_PATH)
      foreach(volt_candidate "${volt_dir}" "${volt_dir}/Torch" "${volt_dir}/share/cmake/Torch")
        if(NOT volt_torch_config_dir AND EXISTS "${volt_candidate}/TorchConfig.cmake")
          set(volt_torch_config_dir "${volt_candidate}")
        endif()
      endforeach()
    endforeach()
    if(volt_torch_config_dir)
      get_filename_component(Torch_ROOT "${volt_torch_config_dir}/../../.." ABSOLUTE)
    endif()
  endif()
  if(NOT DEFINED CMAKE_CUDA_STANDARD)
    set(CMAKE_CUDA_STANDARD 17)
  endif()
endmacro()

function(volt_check_torch)
  if(NOT TARGET torch_cpu OR NOT TORCH_LIBRARY)
    return()
  endif()
  get_target_property(volt_torch_cpu torch_cpu IMPORTED_LOCATION)
  if(NOT volt_torch_cpu)
    get_target_property(volt_torch_cpu torch_cpu IMPORTED_LOCATION_RELEASE)
  endif()
  if(NOT volt_torch_cpu)
    return()
  endif()
  get_filename_component(volt_torch_cpu_dir "${volt_torch_cpu}" DIRECTORY)
  get_filename_component(volt_torch_dir "${TORCH_LIBRARY}" DIRECTORY)
  get_filename_component(volt_torch_cpu_dir "${volt_torch_cpu_dir}" REALPATH)
  get_filename_component(volt_torch_dir "${volt_torch_dir}" REALPATH)
  if(NOT volt_torch_cpu_dir STREQUAL volt_torch_dir)
    message(FATAL_ERROR "volt: LibTorch's package mixed two installations: libtorch.so from "
                        "${volt_torch_dir} but libtorch_cpu.so from ${volt_torch_cpu_dir}. Name the one "
                        "you mean with -DTorch_ROOT=<the directory holding lib/ and share/cmake/Torch> "
                        "and configure a fresh build directory.")
  endif()
endfunction()

# Note [LibTorch's copy of libstdc++]
# In a shared LibTorch, libtorch.so itself holds no code of LibTorch's: it only links
# libtorch_cpu.so (and libtorch_cuda.so), and LibTorch's `torch_library` target forces it into
# every program (--no-as-needed). PyTorch's wheels build it with a newer GCC whose
# libstdc++_nonshared.a parts (std::filesystem, the chrono time zones, C++20 string streams, ...)
# are linked into it, exported unversioned and incomplete: as one of a program's shared
# libraries they interpose the system's libstdc++ for the whole process, and
# std::filesystem::remove_all(path, error_code&) called a helper the copy lacks, at address 0.
# (Listing libstdc++.so.6 first among the program's libraries did not hold on every toolchain:
# Ubuntu 24.04's links still put libtorch.so first.) So volt does not link libtorch.so where it
# defines nothing but such copies: volt::torch carries what `torch` carries (its libraries,
# include directories and compile options) without the file itself. libtorch_cpu.so's own
# copies are complete; tests/core/one_libstdcxx_test.cpp checks that the calls work.
function(volt_define_torch_target)
  if(TARGET volt::torch)
    return()
  endif()
  add_library(volt::torch INTERFACE IMPORTED)
  set(libraries ${TORCH_LIBRARIES})
  find_program(VOLT_READELF readelf)
  if(VOLT_READELF AND TORCH_LIBRARY AND TARGET torch)
    execute_process(COMMAND ${VOLT_READELF} --dyn-syms -W ${TORCH_LIBRARY} OUTPUT_VARIABLE symbols ERROR_QUIET)
    string(REGEX MATCHALL "(GLOBAL|WEAK) +DEFAULT +[0-9]+ [^\n]+" defined "${symbols}")
    set(copies_libstdcxx FALSE)
    set(only_copies TRUE)
    foreach(entry IN LISTS defined)
      string(REGEX REPLACE "^[A-Z]+ +DEFAULT +[0-9]+ " "" name "${entry}")
      if(name MATCHES "^_ZNSt10filesystem")
        set(copies_libstdcxx TRUE)
      elseif(NOT name MATCHES "^(_ZN?K?R?O?St|_ZT[ISV]St|_edata$|_end$|__bss_start$|_init$|_fini$)")
        set(only_copies FALSE)
      endif()
    endforeach()
    if(copies_libstdcxx AND only_copies)
      get_target_property(torch_libraries torch INTERFACE_LINK_LIBRARIES)
      # torch_library is `torch` again, with libtorch.so forced in (--no-as-needed).
      list(REMOVE_ITEM libraries torch_library)
      list(TRANSFORM libraries REPLACE "^torch$" "${torch_libraries}")
      foreach(property INTERFACE_INCLUDE_DIRECTORIES INTERFACE_COMPILE_OPTIONS INTERFACE_COMPILE_DEFINITIONS)
        get_target_property(value torch ${property})
        if(value)
          set_property(TARGET volt::torch PROPERTY ${property} "${value}")
        endif()
      endforeach()
      message(STATUS "volt: ${TORCH_LIBRARY} holds only copies of parts of a newer libstdc++: volt links "
                     "LibTorch without it (Note [LibTorch's copy of libstdc++])")
    endif()
  endif()
  set_property(TARGET volt::torch PROPERTY INTERFACE_LINK_LIBRARIES "${libraries}")
endfunction()
