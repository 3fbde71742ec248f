# What the LibTorch we build against carries. Debian's libtorch-dev 1.13 is CPU-only with Gloo;
# the LibTorch inside PyTorch's CUDA wheels adds CUDA and NCCL. Code for CUDA/NCCL is compiled
# only when this file finds them, and skipped cleanly otherwise.

# c10d's Gloo process group header includes <gloo/...>; Debian ships those in libgloo-dev.
# Paths found on this machine are build-time only: the installed package finds its own.
include(${CMAKE_CURRENT_LIST_DIR}/volt_find_gloo.cmake)
if(NOT VOLT_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR ${VOLT_GLOO_MISSING_MESSAGE})
endif()
target_include_directories(volt PUBLIC $<BUILD_INTERFACE:${VOLT_GLOO_INCLUDE_DIR}>)
target_compile_definitions(volt PUBLIC USE_C10D_GLOO)

# Note [Inline all_reduce] (distributed/transports/inline_gloo_all_reduce.h) calls Gloo itself.
# That is safe only when LibTorch links the shared libgloo (Debian's does: libtorch_cpu.so NEEDS
# libgloo.so.0), so that there is one Gloo in the process. A LibTorch with Gloo linked in
# statically (PyTorch's wheels: libtorch_cpu.so holds a newer Gloo and ships no headers for it)
# would meet a second copy whose types it does not share: there the inline path is compiled out,
# libgloo is not linked, and every all_reduce goes through the process group (Note [Gloo headers
# for a LibTorch with its own Gloo] in distributed/c10d_compat.h).
set(VOLT_INLINE_GLOO OFF)
get_filename_component(volt_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
find_library(VOLT_TORCH_CPU_LIBRARY NAMES torch_cpu HINTS ${volt_torch_lib_dir} NO_DEFAULT_PATH)
find_program(VOLT_READELF readelf)
if(VOLT_TORCH_CPU_LIBRARY AND VOLT_GLOO_LIBRARY AND VOLT_READELF)
  execute_process(COMMAND ${VOLT_READELF} -d ${VOLT_TORCH_CPU_LIBRARY} OUTPUT_VARIABLE volt_torch_needed
                  ERROR_QUIET)
  if(volt_torch_needed MATCHES "NEEDED[^\n]*libgloo")
    set(VOLT_INLINE_GLOO ON)
  endif()
endif()
if(VOLT_INLINE_GLOO)
  target_link_libraries(volt PUBLIC $<BUILD_INTERFACE:${VOLT_GLOO_LIBRARY}>)
  target_compile_definitions(volt PUBLIC VOLT_WITH_INLINE_GLOO=1)
  message(STATUS "volt: small Gloo all_reduces run inline (LibTorch links ${VOLT_GLOO_LIBRARY})")
else()
  message(STATUS "volt: LibTorch does not link a shared libgloo: every all_reduce goes through the process group")
endif()

# The configuration's summary names what a reader of a CI log needs to know: which LibTorch,
# with which CUDA, and whether the CUDA and NCCL code paths are compiled in.
if(TARGET torch_cuda OR CAFFE2_USE_CUDA)
  set(VOLT_WITH_CUDA ON)
  target_compile_definitions(volt PUBLIC VOLT_WITH_CUDA=1 USE_C10D_NCCL)
  message(STATUS "volt: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}) with CUDA ${CUDA_VERSION}: "
                 "CUDA and NCCL code paths compiled in")
else()
  set(VOLT_WITH_CUDA OFF)
  message(STATUS "volt: LibTorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX}) is CPU-only: CUDA and NCCL code paths skipped")
endif()
