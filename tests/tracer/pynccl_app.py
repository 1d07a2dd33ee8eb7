#!/usr/bin/env python3
"""Calls NCCL the way vLLM's and SGLang's pynccl do, recorded by tests/tracer/gpu_torch_record_test.cc.

The library is loaded with ctypes.CDLL (RTLD_LOCAL) and every function is looked up on its handle
(ctypes' getattr: dlsym(handle, name)); nothing links to it. The NCCL is torch's where torch has
loaded one, else "libnccl.so.2", as vLLM finds it. A world of one rank; the buffers are torch
tensors on the current stream: an out-of-place all-reduce (the receive buffer poisoned first), an
in-place one, an all-gather and two all-reduces with PreMulSum operators (a host scalar of 0.5, a
device one of 0.25); then, as vLLM decodes, an all-reduce captured into a CUDA graph
and the graph replayed three times with new data. What each call read and wrote goes to
--expect-dir:

  expect.json      the calls: op (allreduce, allgather, premulsum-host, premulsum-device), count;
                   the replays and their count
  N-send.bin       the N-th call's send buffer, taken before the call
  N-recv.bin       its receive buffer, taken after it (after a synchronize)
  replayR-*.bin    the same for replay R of the graph

Last, where the NCCL has ncclCommRevoke (2.28.9 and later), the communicator is revoked before it
is destroyed (expect.json's "revoked": what the call answered, null where there is none).
"""
import argparse
import ctypes
import json
import os

import torch


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def nccl_path() -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libnccl.so"):
                return path
    return "libnccl.so.2"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expect-dir", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=6000)
    args = p.parse_args()
    os.makedirs(args.expect_dir, exist_ok=True)
    torch.cuda.init()
    nccl = ctypes.CDLL(nccl_path())
    for name in ("ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclAllGather", "ncclCommDestroy"):
        getattr(nccl, name).restype = ctypes.c_int
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    n = args.count
    calls = []

    def record(op, send, recv, run):
        index = len(calls)
        send.cpu().numpy().tofile(f"{args.expect_dir}/{index}-send.bin")
        torch.cuda.synchronize()
        assert run() == 0, op
        torch.cuda.synchronize()
        recv.cpu().numpy().tofile(f"{args.expect_dir}/{index}-recv.bin")
        calls.append({"op": op, "count": send.numel()})

    ncclFloat32, ncclSum = 7, 0
    send = torch.randn(n, device="cuda", generator=gen)
    recv = torch.full((n,), float("nan"), device="cuda")
    record("allreduce", send, recv, lambda: nccl.ncclAllReduce(
        ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()), ctypes.c_size_t(n),
        ncclFloat32, ncclSum, comm, stream))
    inplace = torch.randn(n // 2, device="cuda", generator=gen)
    record("allreduce", inplace, inplace, lambda: nccl.ncclAllReduce(
        ctypes.c_void_p(inplace.data_ptr()), ctypes.c_void_p(inplace.data_ptr()),
        ctypes.c_size_t(n // 2), ncclFloat32, ncclSum, comm, stream))
    part = torch.randn(n // 3, device="cuda", generator=gen)
    gathered = torch.full((n // 3,), float("nan"), device="cuda")
    record("allgather", part, gathered, lambda: nccl.ncclAllGather(
        ctypes.c_void_p(part.data_ptr()), ctypes.c_void_p(gathered.data_ptr()),
        ctypes.c_size_t(n // 3), ncclFloat32, comm, stream))
    # Sums scaled by a PreMulSum operator (as a ReduceScatter averages in FSDP), its scalar on the
    # host (NCCL copies it when making the operator) and in device memory (read when the call runs).
    for name in ("ncclRedOpCreatePreMulSum", "ncclRedOpDestroy"):
        getattr(nccl, name).restype = ctypes.c_int
    ncclScalarDevice, ncclScalarHostImmediate = 0, 1
    host_scalar = ctypes.c_float(0.5)
    device_scalar = torch.tensor([0.25], device="cuda")
    made = []
    for op_name, scalar, residence in (("premulsum-host", ctypes.byref(host_scalar), ncclScalarHostImmediate),
                                       ("premulsum-device", ctypes.c_void_p(device_scalar.data_ptr()),
                                        ncclScalarDevice)):
        op = ctypes.c_int()
        assert nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), scalar, ncclFloat32, residence, comm) == 0
        made.append(op.value)
        scaled = torch.randn(n // 6, device="cuda", generator=gen)
        scaled_out = torch.full((n // 6,), float("nan"), device="cuda")
        record(op_name, scaled, scaled_out, lambda: nccl.ncclAllReduce(
            ctypes.c_void_p(scaled.data_ptr()), ctypes.c_void_p(scaled_out.data_ptr()),
            ctypes.c_size_t(n // 6), ncclFloat32, op.value, comm, stream))
        expected = scaled * (0.5 if residence == ncclScalarHostImmediate else 0.25)
        assert torch.equal(scaled_out, expected), op_name
    for op in made:
        assert nccl.ncclRedOpDestroy(op, comm) == 0
    # As vLLM runs it in a decode step: the all-reduce captured into a CUDA graph on torch's
    # capture stream, the graph replayed with new data each time.
    m = n // 4
    static_in = torch.zeros(m, device="cuda")
    static_out = torch.zeros(m, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture_stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        assert nccl.ncclAllReduce(ctypes.c_void_p(static_in.data_ptr()), ctypes.c_void_p(static_out.data_ptr()),
                                  ctypes.c_size_t(m), ncclFloat32, ncclSum, comm, capture_stream) == 0
    replays = 3
    for r in range(replays):
        static_in.copy_(torch.randn(m, device="cuda", generator=gen))
        static_out.fill_(float("nan"))
        torch.cuda.synchronize()
        static_in.cpu().numpy().tofile(f"{args.expect_dir}/replay{r}-send.bin")
        graph.replay()
        torch.cuda.synchronize()
        static_out.cpu().numpy().tofile(f"{args.expect_dir}/replay{r}-recv.bin")
    del graph
    torch.cuda.synchronize()
    # A call NCCL refuses (a reduction operator it does not have): it wrote nothing, so the trace
    # keeps its send digest and takes none of its receive buffer.
    refused_send = torch.randn(n // 5, device="cuda", generator=gen)
    refused_recv = torch.full((n // 5,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    refused_send.cpu().numpy().tofile(f"{args.expect_dir}/refused-send.bin")
    bad_op = 99
    refused = nccl.ncclAllReduce(ctypes.c_void_p(refused_send.data_ptr()), ctypes.c_void_p(refused_recv.data_ptr()),
                                 ctypes.c_size_t(n // 5), ncclFloat32, bad_op, comm, stream)
    assert refused != 0, "NCCL took a reduction operator it does not have"
    torch.cuda.synchronize()
    # NCCL 2.28.9 and later: the communicator revoked before it is destroyed, as a fault-tolerant
    # engine drops a broken one (NCCL says when it is quiet); None where this NCCL has no revoke.
    revoked = None
    if hasattr(nccl, "ncclCommRevoke"):
        nccl.ncclCommRevoke.restype = ctypes.c_int
        nccl.ncclCommGetAsyncError.restype = ctypes.c_int
        revoked = nccl.ncclCommRevoke(comm, 0)
        state = ctypes.c_int(7)  # ncclInProgress
        while revoked == 0 and state.value == 7:
            assert nccl.ncclCommGetAsyncError(comm, ctypes.byref(state)) == 0
        assert revoked != 0 or state.value == 0, f"the revoked communicator's state: {state.value}"
    assert nccl.ncclCommDestroy(comm) == 0
    with open(f"{args.expect_dir}/expect.json", "w") as f:
        json.dump({"calls": calls, "library": nccl_path(), "replays": replays, "replay_count": m,
                   "refused_count": n // 5, "refused_result": refused, "revoked": revoked}, f)
    print(f"pynccl_app: {len(calls)} calls through {nccl_path()}, done")


if __name__ == "__main__":
    main()
