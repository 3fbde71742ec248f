# What the LibTorch we build against carries. Debian's libtorch-dev 1.13 is CPU-only with Gloo;
# the LibTorch inside PyTorch's CUDA wheels adds CUDA and NCCL. Code for CUDA/NCCL is compiled
# only when this file finds them, and skipped cleanly otherwise.

# c10d's Gloo process group header includes <gloo/...>; Debian ships those in libgloo-dev.
find_path(VOLT_GLOO_INCLUDE_DIR gloo/rendezvous/store.h HINTS ${TORCH_INCLUDE_DIRS})
if(NOT VOLT_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "volt: gloo headers (gloo/rendezvous/store.h) not found. "
                      "On Debian install libgloo-dev (tools/setup.sh does).")
endif()
target_include_directories(volt PUBLIC ${VOLT_GLOO_INCLUDE_DIR})
target_compile_definitions(volt PUBLIC USE_C10D_GLOO)

if(TARGET torch_cuda OR CAFFE2_USE_CUDA)
  set(VOLT_WITH_CUDA ON)
  target_compile_definitions(volt PUBLIC VOLT_WITH_CUDA=1 USE_C10D_NCCL)
  message(STATUS "volt: LibTorch has CUDA: CUDA and NCCL code paths compiled in")
else()
  set(VOLT_WITH_CUDA OFF)
  message(STATUS "volt: LibTorch is CPU-only: CUDA and NCCL code paths skipped")
endif()
