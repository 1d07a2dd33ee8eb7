#!/usr/bin/env python3
"""Calls cuBLAS through ctypes (ctypes.CDLL, then every function looked up on that handle), as
programs that load cuBLAS themselves do; recorded by tests/tracer/gpu_torch_record_test.cc.

The library is the one torch loaded (found in /proc/self/maps after a torch matmul). One
cublasSgemm_v2, C = A B (column-major, tight leading dimensions), on torch's current stream, C
poisoned first. Its operands' bytes go to --expect-dir: A.bin and B.bin taken before the call,
D.bin (C, the output, which the trace calls D) after it; expect.json gives m, n, k and the
library.
"""
import argparse
import ctypes
import json
import os

import torch


def cublas_path() -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libcublas.so"):
                return path
    raise SystemExit("ctypes_cublas_app: torch loaded no libcublas.so")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expect-dir", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--m", type=int, default=96)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--k", type=int, default=64)
    args = p.parse_args()
    os.makedirs(args.expect_dir, exist_ok=True)
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")  # torch loads cuBLAS
    torch.cuda.synchronize()
    path = cublas_path()
    lib = ctypes.CDLL(path)
    for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSgemm_v2", "cublasDestroy_v2"):
        getattr(lib, name).restype = ctypes.c_int
    handle = ctypes.c_void_p()
    assert lib.cublasCreate_v2(ctypes.byref(handle)) == 0
    assert lib.cublasSetStream_v2(handle, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)) == 0
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    m, n, k = args.m, args.n, args.k
    a = torch.randn(m * k, device="cuda", generator=gen)
    b = torch.randn(k * n, device="cuda", generator=gen)
    c = torch.full((m * n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    a.cpu().numpy().tofile(f"{args.expect_dir}/A.bin")
    b.cpu().numpy().tofile(f"{args.expect_dir}/B.bin")
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    CUBLAS_OP_N = 0
    assert lib.cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, ctypes.byref(one),
                              ctypes.c_void_p(a.data_ptr()), m, ctypes.c_void_p(b.data_ptr()), k,
                              ctypes.byref(zero), ctypes.c_void_p(c.data_ptr()), m) == 0
    torch.cuda.synchronize()
    c.cpu().numpy().tofile(f"{args.expect_dir}/D.bin")  # the output: cuBLAS's C, the trace's D
    assert lib.cublasDestroy_v2(handle) == 0
    with open(f"{args.expect_dir}/expect.json", "w") as f:
        json.dump({"m": m, "n": n, "k": k, "library": path}, f)
    print(f"ctypes_cublas_app: a GEMM through {path}, done")


if __name__ == "__main__":
    main()
