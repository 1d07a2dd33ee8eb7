/* A plain C program that declares its own collectives through detrace/annotate.h, as a rank of a
 * 3-rank group would (rank from argv[1]). No CUDA: the pointers and the stream are never
 * dereferenced by the tracer at the meta level. Prints each token, so a test can tell "recorded"
 * (non-zero) from "not recorded" (0, e.g. without detrace). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "detrace/annotate.h"

int main(int argc, char** argv) {
  int rank = argc > 1 ? atoi(argv[1]) : 0;
  static char buf[4096];
  detrace_collective c = DETRACE_COLLECTIVE_INIT;
  c.name = "oneshot_allreduce";
  c.op = DETRACE_ALLREDUCE;
  c.dtype = DETRACE_BF16;
  c.send = buf;
  c.recv = buf + 2048;
  c.count = 512;
  c.comm_id = 0xfeedull;
  c.rank = rank;
  c.nranks = 3;
  c.stream = (void*)0x1234;
  uint64_t a = detrace_annotate_begin(&c);
  detrace_annotate_end(a);

  /* A reduce-scatter in fp32 whose end also ends a nested begin left open. */
  detrace_collective rs = c;
  rs.name = "twoshot_reduce_scatter";
  rs.op = DETRACE_REDUCESCATTER;
  rs.dtype = DETRACE_F32;
  rs.count = 100;
  uint64_t outer = detrace_annotate_begin(&rs);
  uint64_t inner = detrace_annotate_begin(&c);
  detrace_annotate_end(outer);
  detrace_annotate_end(inner); /* already ended with outer: does nothing */

  /* Invalid: a rank outside [0, nranks). Not recorded, the program carries on. */
  detrace_collective bad = c;
  bad.rank = 7;
  uint64_t b = detrace_annotate_begin(&bad);
  detrace_annotate_end(b);
  detrace_annotate_end(12345); /* never begun: does nothing */

  printf("annotate_seam_app: rank %d tokens %s %s %s %s\n", rank, a ? "recorded" : "0",
         outer ? "recorded" : "0", inner ? "recorded" : "0", b ? "recorded" : "0");
  return 0;
}
