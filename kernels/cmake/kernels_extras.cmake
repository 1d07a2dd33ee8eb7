# Pieces of detrace_kernels that a plain glob of src/ cannot express. Included from
# kernels/CMakeLists.txt after the detrace_kernels target exists.

# 1. The digest kernels run inside the traced process, so they are not compiled into the library
#    as runtime-registered CUDA code: fatbin/digest_kernels.cu becomes a fatbin (sm_90 machine code
#    plus compute_90 PTX for newer chips), embedded as a byte array and loaded with the driver API
#    (src/digest.cc).
set(DETRACE_DIGEST_FATBIN ${CMAKE_CURRENT_BINARY_DIR}/digest_kernels.fatbin)
set(DETRACE_DIGEST_EMBED ${CMAKE_CURRENT_BINARY_DIR}/digest_kernels_fatbin.cc)
add_custom_command(
  OUTPUT ${DETRACE_DIGEST_FATBIN}
  COMMAND ${CMAKE_CUDA_COMPILER} -fatbin -std=c++17 -O3 --expt-relaxed-constexpr
          -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
          -I${CMAKE_CURRENT_SOURCE_DIR}/include -I${CMAKE_CURRENT_SOURCE_DIR}/src
          -o ${DETRACE_DIGEST_FATBIN} ${CMAKE_CURRENT_SOURCE_DIR}/fatbin/digest_kernels.cu
  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fatbin/digest_kernels.cu
          ${CMAKE_CURRENT_SOURCE_DIR}/include/detrace/kernels/xxh64.h
          ${CMAKE_CURRENT_SOURCE_DIR}/src/digest_params.h
  COMMENT "Compiling the digest kernels to a fatbin (sm_90 + compute_90 PTX)"
  VERBATIM)
add_custom_command(
  OUTPUT ${DETRACE_DIGEST_EMBED}
  COMMAND ${CMAKE_COMMAND} -DINPUT=${DETRACE_DIGEST_FATBIN} -DOUTPUT=${DETRACE_DIGEST_EMBED}
          -DSYMBOL=kDigestFatbin -DNAMESPACE=detrace::kernels::detail
          -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/embed_binary.cmake
  DEPENDS ${DETRACE_DIGEST_FATBIN} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/embed_binary.cmake
  COMMENT "Embedding the digest fatbin"
  VERBATIM)
target_sources(detrace_kernels PRIVATE ${DETRACE_DIGEST_EMBED})

# 2. Bit-exact CPU twins: the deterministic kernels and their CPU twins must perform the same IEEE
#    operations in the same order, so neither side may contract a*b+c into an FMA. The kernels use
#    __fadd_rn/__fmul_rn (never contracted); -fmad=false guards any plain operator left in them.
set_source_files_properties(
  ${CMAKE_CURRENT_SOURCE_DIR}/src/reduce.cu ${CMAKE_CURRENT_SOURCE_DIR}/src/rmsnorm.cu
  PROPERTIES COMPILE_OPTIONS "-fmad=false")
set_source_files_properties(
  ${CMAKE_CURRENT_SOURCE_DIR}/src/reduce_cpu.cc ${CMAKE_CURRENT_SOURCE_DIR}/src/rmsnorm_cpu.cc
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
