# detrace_warnings(target): the project's warning set, for host C++ sources only.
function(detrace_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wold-style-cast -Wcast-align -Wunused -Woverloaded-virtual
      -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough>)
endfunction()
