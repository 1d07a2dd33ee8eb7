/* detrace/annotate.h: declare a collective that detrace cannot see on its own.
 *
 * detrace records NCCL's collectives by interposing NCCL. A collective made of the program's own
 * kernels (a one-shot all-reduce over CUDA IPC buffers, a fused all-reduce + norm kernel) is just
 * a kernel launch to the tracer: its inputs are other ranks' memory and its meaning is unknown.
 * Two calls around it make it a collective in the trace like NCCL's: numbered per communicator
 * (so `detrace diff` matches it across ranks and runs), its send buffer fingerprinted before it
 * and its receive buffer after it (`--capture digest`), both copied under `--capture full` (so
 * `detrace replay` can re-run the sum with fixed-order alternatives), and the kernels launched
 * between the two calls on this thread recorded as its children.
 *
 *     detrace_collective c = DETRACE_COLLECTIVE_INIT;
 *     c.name = "oneshot_allreduce"; c.op = DETRACE_ALLREDUCE; c.dtype = DETRACE_BF16;
 *     c.send = my_partial; c.recv = out; c.count = n;
 *     c.comm_id = group_id; c.rank = rank; c.nranks = world; c.stream = stream;
 *     uint64_t token = detrace_annotate_begin(&c);
 *     launch_my_allreduce(...);                    // kernels on c.stream
 *     detrace_annotate_end(token);
 *
 * Header only, C or C++, nothing to link: the helpers look the tracer's functions up in the
 * process (dlsym), so a program built with them runs unchanged, at the cost of one cached lookup,
 * when it is not recorded. Calls are made on the thread that launches the collective's kernels;
 * begin/end pairs nest like brackets. The calls never synchronise, allocate device memory or
 * fail the program: a token of 0 means "not recorded" and is fine to pass to end.
 */
#ifndef DETRACE_ANNOTATE_H_
#define DETRACE_ANNOTATE_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The operation. Buffer sizes follow NCCL's conventions: an all-reduce sends and receives
 * `count` elements; a reduce-scatter sends count * nranks and receives count; an all-gather sends
 * count and receives count * nranks. Reductions are sums. */
enum detrace_coll_op { DETRACE_ALLREDUCE = 0, DETRACE_REDUCESCATTER = 1, DETRACE_ALLGATHER = 2 };

/* Element types of the buffers. */
enum detrace_dtype { DETRACE_F32 = 0, DETRACE_F16 = 1, DETRACE_BF16 = 2 };

typedef struct detrace_collective {
  uint32_t struct_size; /* sizeof(detrace_collective), set by DETRACE_COLLECTIVE_INIT */
  const char* name;     /* the implementation's name, e.g. "oneshot_allreduce"; copied */
  int op;               /* enum detrace_coll_op */
  int dtype;            /* enum detrace_dtype */
  const void* send;     /* device pointers */
  void* recv;
  size_t count;         /* elements, as above */
  uint64_t comm_id;     /* the same on every rank of the group, different for each group */
  int rank;             /* this process's rank in the group, 0 <= rank < nranks */
  int nranks;
  void* stream;         /* the cudaStream_t its kernels are launched on (NULL: the legacy stream) */
} detrace_collective;

#define DETRACE_COLLECTIVE_INIT \
  { (uint32_t)sizeof(detrace_collective), NULL, 0, 0, NULL, NULL, 0, 0, 0, 1, NULL }

/* Exported by libdetrace_tracer.so. */
typedef uint64_t (*detrace_collective_begin_fn)(const detrace_collective* c);
typedef void (*detrace_collective_end_fn)(uint64_t token);

/* Looks the tracer up once (threads racing here find the same answer); afterwards each call
 * costs two loads and a branch. */
static inline void detrace_annotate_lookup_(detrace_collective_begin_fn* begin,
                                            detrace_collective_end_fn* end) {
  static int looked = 0;
  static detrace_collective_begin_fn b = NULL;
  static detrace_collective_end_fn e = NULL;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    detrace_collective_begin_fn fb =
        (detrace_collective_begin_fn)dlsym(RTLD_DEFAULT, "detrace_collective_begin");
    detrace_collective_end_fn fe =
        (detrace_collective_end_fn)dlsym(RTLD_DEFAULT, "detrace_collective_end");
    if (fb == NULL || fe == NULL) fb = NULL, fe = NULL;
    __atomic_store_n(&b, fb, __ATOMIC_RELAXED);
    __atomic_store_n(&e, fe, __ATOMIC_RELAXED);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  *begin = __atomic_load_n(&b, __ATOMIC_RELAXED);
  *end = __atomic_load_n(&e, __ATOMIC_RELAXED);
}

/* Call before launching the collective's kernels; returns 0 when nothing is recorded. */
static inline uint64_t detrace_annotate_begin(const detrace_collective* c) {
  detrace_collective_begin_fn b;
  detrace_collective_end_fn e;
  detrace_annotate_lookup_(&b, &e);
  return b != NULL ? b(c) : 0;
}

/* Call after the kernels were launched (not after they finished: nothing waits for the GPU). */
static inline void detrace_annotate_end(uint64_t token) {
  detrace_collective_begin_fn b;
  detrace_collective_end_fn e;
  detrace_annotate_lookup_(&b, &e);
  if (e != NULL && token != 0) e(token);
}

#ifdef __cplusplus
}
#endif

#endif /* DETRACE_ANNOTATE_H_ */
