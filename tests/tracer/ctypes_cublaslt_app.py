#!/usr/bin/env python3
"""Calls cublasLtMatmul through ctypes on torch's own libcublasLt with every matrix stored
row-major (CUBLASLT_ORDER_ROW) and padded leading dimensions; recorded by
tests/tracer/gpu_torch_record_test.cc.

Two calls, D = alpha A B + beta C, fp32, A m x k, B k x n, C and D m x n, on torch's stream:
  0. beta = 0, and C a 16-byte tensor that cuBLASLt never reads (a caller may pass any pointer
     then): the trace must show A, B and D only;
  1. beta = 1, C a full m x n matrix: A, B, C and D.
For each call i, every operand's extent (first to last element, the padding between rows
included) goes to --expect-dir as i-NAME.bin: A, B and C before the call, D after it (D is
poisoned with NaN first). expect.json gives m, n, k, the leading dimensions and the library.
"""
import argparse
import ctypes
import json
import os

import torch

CUDA_R_32F = 0
CUBLAS_COMPUTE_32F = 68
CUBLASLT_MATRIX_LAYOUT_ORDER = 1
CUBLASLT_ORDER_ROW = 1


def library(prefix: str) -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(prefix):
                return path
    raise SystemExit(f"ctypes_cublaslt_app: torch loaded no {prefix}")


def rows(t: torch.Tensor, r: int, c: int, ld: int) -> torch.Tensor:
    """The r x c row-major matrix stored in t's extent, ld elements from one row to the next."""
    return torch.nn.functional.pad(t, (0, r * ld - t.numel())).reshape(r, ld)[:, :c]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expect-dir", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--m", type=int, default=24)
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--pad", type=int, default=8, help="elements added to every leading dimension")
    args = p.parse_args()
    os.makedirs(args.expect_dir, exist_ok=True)
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")  # torch loads cuBLAS(Lt)
    torch.cuda.synchronize()
    path = library("libcublasLt.so")
    lt = ctypes.CDLL(path)
    for name in ("cublasLtCreate", "cublasLtDestroy", "cublasLtMatmulDescCreate",
                 "cublasLtMatmulDescDestroy", "cublasLtMatrixLayoutCreate",
                 "cublasLtMatrixLayoutDestroy", "cublasLtMatrixLayoutSetAttribute", "cublasLtMatmul"):
        getattr(lt, name).restype = ctypes.c_int
    handle, desc = ctypes.c_void_p(), ctypes.c_void_p()
    assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0
    m, n, k, pad = args.m, args.n, args.k, args.pad
    lda, ldb, ldc = k + pad, n + pad, n + pad

    def layout(rows: int, cols: int, ld: int) -> ctypes.c_void_p:
        lay = ctypes.c_void_p()
        assert lt.cublasLtMatrixLayoutCreate(ctypes.byref(lay), CUDA_R_32F, ctypes.c_uint64(rows),
                                             ctypes.c_uint64(cols), ctypes.c_int64(ld)) == 0
        order = ctypes.c_int32(CUBLASLT_ORDER_ROW)
        assert lt.cublasLtMatrixLayoutSetAttribute(lay, CUBLASLT_MATRIX_LAYOUT_ORDER,
                                                   ctypes.byref(order), ctypes.sizeof(order)) == 0
        return lay

    la, lb, lc = layout(m, k, lda), layout(k, n, ldb), layout(m, n, ldc)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    extent = lambda rows, cols, ld: (rows - 1) * ld + cols  # noqa: E731
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    save = lambda t, i, name: t.cpu().numpy().tofile(f"{args.expect_dir}/{i}-{name}.bin")  # noqa: E731
    for i, beta_value in enumerate((0.0, 1.0)):
        a = torch.randn(extent(m, k, lda), device="cuda", generator=gen)
        b = torch.randn(extent(k, n, ldb), device="cuda", generator=gen)
        c = (torch.randn(extent(m, n, ldc), device="cuda", generator=gen) if beta_value
             else torch.randn(4, device="cuda", generator=gen))
        d = torch.full((extent(m, n, ldc),), float("nan"), device="cuda")
        torch.cuda.synchronize()
        save(a, i, "A")
        save(b, i, "B")
        if beta_value:
            save(c, i, "C")
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(beta_value)
        st = lt.cublasLtMatmul(handle, desc, ctypes.byref(alpha), ctypes.c_void_p(a.data_ptr()), la,
                               ctypes.c_void_p(b.data_ptr()), lb, ctypes.byref(beta),
                               ctypes.c_void_p(c.data_ptr()), lc, ctypes.c_void_p(d.data_ptr()), lc,
                               None, None, ctypes.c_size_t(0), stream)
        assert st == 0, f"cublasLtMatmul with row-major layouts returned {st}"
        torch.cuda.synchronize()
        save(d, i, "D")
        # The program's own check that the layouts mean what the test says they mean.
        want = rows(a, m, k, lda) @ rows(b, k, n, ldb)
        if beta_value:
            want += rows(c, m, n, ldc)
        torch.testing.assert_close(rows(d, m, n, ldc), want, rtol=1e-3, atol=1e-3)
    for lay in (la, lb, lc):
        assert lt.cublasLtMatrixLayoutDestroy(lay) == 0
    assert lt.cublasLtMatmulDescDestroy(desc) == 0
    assert lt.cublasLtDestroy(handle) == 0
    with open(f"{args.expect_dir}/expect.json", "w") as f:
        json.dump({"m": m, "n": n, "k": k, "lda": lda, "ldb": ldb, "ldc": ldc, "library": path}, f)
    print(f"ctypes_cublaslt_app: two row-major matmuls through {path}, done")


if __name__ == "__main__":
    main()
