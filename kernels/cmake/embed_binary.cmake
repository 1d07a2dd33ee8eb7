# Turns a binary file into a C++ source that defines it as a byte array.
#   cmake -DINPUT=in.fatbin -DOUTPUT=out.cc -DSYMBOL=kName -DNAMESPACE=a::b -P embed_binary.cmake
# Defines `extern const unsigned char SYMBOL[]` (64-byte aligned, as the driver's image loaders
# expect at least 8) and `extern const std::size_t SYMBOLSize` in NAMESPACE.
foreach(var INPUT OUTPUT SYMBOL NAMESPACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_binary.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
if(size EQUAL 0)
  message(FATAL_ERROR "embed_binary.cmake: ${INPUT} is empty")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){20})" "\\1\n" bytes "${bytes}")
get_filename_component(input_name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${input_name} by kernels/cmake/embed_binary.cmake: do not edit.
#include <cstddef>

namespace ${NAMESPACE} {
alignas(64) extern const unsigned char ${SYMBOL}[] = {
${bytes}
};
extern const std::size_t ${SYMBOL}Size = ${size};
}  // namespace ${NAMESPACE}
")
# Only touch OUTPUT when it changes, so an unchanged fatbin does not rebuild the library.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
