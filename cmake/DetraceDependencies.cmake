# Finds every dependency once, as imported targets. Debian packages only (scripts/setup installs
# them); CUDA, CUPTI and NCCL come from /usr/local/cuda.
find_package(Threads REQUIRED)
find_package(SQLite3 REQUIRED)          # SQLite::SQLite3
find_package(fmt REQUIRED)              # fmt::fmt
find_package(nlohmann_json 3 REQUIRED)  # nlohmann_json::nlohmann_json
find_package(CLI11 QUIET CONFIG)        # CLI11::CLI11 (header only)
if(NOT TARGET CLI11::CLI11)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

# zstd and xxhash ship no CMake config on Debian 12: make imported targets from pkg-config paths.
find_path(ZSTD_INCLUDE_DIR zstd.h REQUIRED)
find_library(ZSTD_LIBRARY NAMES zstd REQUIRED)
add_library(detrace::zstd UNKNOWN IMPORTED)
set_target_properties(detrace::zstd PROPERTIES IMPORTED_LOCATION ${ZSTD_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${ZSTD_INCLUDE_DIR})

# xxhash is used header-only (XXH_INLINE_ALL) so no shared library is needed at run time.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(detrace::xxhash INTERFACE IMPORTED)
target_include_directories(detrace::xxhash INTERFACE ${XXHASH_INCLUDE_DIR})
target_compile_definitions(detrace::xxhash INTERFACE XXH_INLINE_ALL)

# CUDA: optional. The build still succeeds without it, minus kernels/ and tracer/.
set(DETRACE_HAVE_CUDA OFF)
if(DETRACE_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 machine code plus compute_90 PTX (CMake's "90" = real + virtual), so newer chips can JIT
    # it. Set before enable_language, which would otherwise pick nvcc's default (sm_75).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)   # CUDA::cudart, CUDA::cuda_driver, CUDA::cublasLt, CUDA::cupti
    # NCCL ships no CMake package: an imported target from /usr/local/cuda.
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(detrace::nccl UNKNOWN IMPORTED)
      set_target_properties(detrace::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
      set(DETRACE_HAVE_NCCL ON)
    else()
      message(WARNING "NCCL not found under /usr/local/cuda: multi-GPU pieces are left out")
      set(DETRACE_HAVE_NCCL OFF)
    endif()
    set(DETRACE_HAVE_CUDA ON)
  else()
    message(STATUS "detrace: no CUDA compiler found; building without kernels/ and tracer/")
  endif()
endif()

set(DETRACE_HAVE_QT OFF)
if(DETRACE_WITH_GUI)
  find_package(Qt6 QUIET COMPONENTS Widgets Charts Concurrent Test)
  if(Qt6_FOUND)
    set(DETRACE_HAVE_QT ON)
  else()
    message(STATUS "detrace: Qt6 Widgets/Charts not found; detrace-view is not built "
                   "(install qt6-base-dev and qt6-charts-dev, e.g. with scripts/setup)")
  endif()
endif()

if(DETRACE_BUILD_TESTS)
  find_package(GTest REQUIRED)          # GTest::gtest, GTest::gmock
endif()
if(DETRACE_BUILD_BENCH)
  find_package(benchmark QUIET)         # benchmark::benchmark
endif()
