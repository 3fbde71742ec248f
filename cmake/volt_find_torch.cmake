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
