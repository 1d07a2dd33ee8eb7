#!/usr/bin/env python3
"""A tensor-parallel layer stack emulated on one GPU, combining its shards with the planted racy
reduction or the fixed-order one (kernels/, through examples/planted_shim), for recording with
detrace.

    detrace record -o racy-a -- python3 examples/torch/tp_emulation.py --reduce racy
    detrace record -o racy-b -- python3 examples/torch/tp_emulation.py --reduce racy
    detrace diff racy-a racy-b     # run-to-run: the reduction's output differs, the GEMMs after it see it

Each layer is Megatron-style: RMSNorm, a column-parallel GEMM (each of --tp shards computes its slice
of the up projection), SiLU, a row-parallel GEMM (each shard's partial sum of the down projection),
then the partial outputs of the --tp shards are summed, as an all-reduce would, and added to the
residual. The sum is:
  racy   kernels' planted_racyReduce: bf16 atomics in arrival order (neighbouring blocks add
         different shards of the same elements), so the rounding changes from run to run;
  fixed  kernels' fixedOrderReduce in rank order: the same bits every run;
  torch  partials.sum(0), for comparison.
The shards' outputs live in preallocated buffers, so a step can be captured in a CUDA graph
(--cuda-graph: capture one step, replay it --steps times). Steps are in NVTX ranges "step {i}" and
layers in "layer {j}". The program prints a digest of the request's (row 0's) final hidden state.

The shim library comes from --shim, else $DETRACE_SHIM, else the usual build folders.
"""
import argparse
import ctypes
import hashlib
import os
import sys
from pathlib import Path

import torch

DEV = "cuda"
DTYPES = {"fp32": (torch.float32, 0), "fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2)}
REPO = Path(__file__).resolve().parents[2]
SHIM_NAME = "libdetrace_planted_shim.so"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=4, help="tensor-parallel shards")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096, help="intermediate size (split over the shards)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=16, help="tokens per step; row 0 is the request")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--reduce", choices=["racy", "fixed", "torch"], default="racy")
    p.add_argument("--cuda-graph", action="store_true", help="capture a step in a CUDA graph and replay it")
    p.add_argument("--shim", help=f"path of {SHIM_NAME}")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--check-race", type=int, default=0, metavar="N",
                   help="before running, reduce the same inputs N times and say how many distinct results came out")
    p.add_argument("--no-nvtx", action="store_true", help="leave out the step/layer NVTX ranges")
    return p.parse_args()


def find_shim(explicit):
    candidates = [explicit, os.environ.get("DETRACE_SHIM")]
    for build in ["build-device", "build/dev", "build/h-diff", "build", "build/release"]:
        candidates.append(str(REPO / build / "examples" / "planted_shim" / SHIM_NAME))
    for c in candidates:
        if c and Path(c).is_file():
            return c
    sys.exit(f"tp_emulation: {SHIM_NAME} not found; build the detrace_planted_shim target and pass "
             f"--shim PATH (or set DETRACE_SHIM)")


class Shim:
    """ctypes bindings of examples/planted_shim/shim.cc."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        args = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                ctypes.c_int, ctypes.c_void_p]
        for fn in (lib.detrace_shim_racy_reduce, lib.detrace_shim_fixed_reduce):
            fn.argtypes = args
            fn.restype = ctypes.c_int
        lib.detrace_shim_last_error.restype = ctypes.c_char_p
        self.lib = lib

    def reduce(self, kind: str, inputs, out: torch.Tensor, dtype_code: int) -> None:
        """out = sum of the tensors whose device pointers are in `inputs` (a ctypes uint64 array),
        enqueued on the current stream: no synchronisation, no allocation (graph-capturable)."""
        fn = self.lib.detrace_shim_racy_reduce if kind == "racy" else self.lib.detrace_shim_fixed_reduce
        stream = torch.cuda.current_stream().cuda_stream
        rc = fn(inputs, len(inputs), out.data_ptr(), out.numel(), dtype_code, stream)
        if rc != 0:
            raise RuntimeError(f"detrace shim: {self.lib.detrace_shim_last_error().decode()}")


class ShardedLayer:
    """One layer's weights split over the shards, and its static buffers."""

    def __init__(self, args, dtype, gen):
        h, f, tp = args.hidden, args.ffn, args.tp
        per = f // tp

        def rand(*shape, scale):
            return (torch.randn(*shape, generator=gen, device=DEV) * scale).to(dtype)

        self.norm = torch.ones(h, device=DEV, dtype=dtype)
        self.up = [rand(per, h, scale=h ** -0.5) for _ in range(tp)]      # column-parallel
        self.gate = [rand(per, h, scale=h ** -0.5) for _ in range(tp)]    # column-parallel
        self.down = [rand(h, per, scale=f ** -0.5) for _ in range(tp)]    # row-parallel
        # Static buffers: the shards' partial outputs and their sum.
        self.partials = torch.empty(tp, args.batch, h, device=DEV, dtype=dtype)
        self.reduced = torch.empty(args.batch, h, device=DEV, dtype=dtype)
        self.partial_ptrs = (ctypes.c_uint64 * tp)(*[self.partials[s].data_ptr() for s in range(tp)])


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Model:
    def __init__(self, args, shim):
        self.args = args
        self.dtype, self.code = DTYPES[args.dtype]
        self.shim = shim
        gen = torch.Generator(device=DEV).manual_seed(args.seed)
        self.layers = [ShardedLayer(args, self.dtype, gen) for _ in range(args.layers)]
        self.nvtx = not args.no_nvtx

    def reduce(self, layer: ShardedLayer) -> torch.Tensor:
        if self.args.reduce == "torch":
            return layer.partials.sum(0)
        self.shim.reduce(self.args.reduce, layer.partial_ptrs, layer.reduced, self.code)
        return layer.reduced

    def layer(self, j: int, x: torch.Tensor) -> torch.Tensor:
        L = self.layers[j]
        if self.nvtx:
            torch.cuda.nvtx.range_push(f"layer {j}")
        a = rmsnorm(x, L.norm)
        for s in range(self.args.tp):  # each shard: its slice of the MLP, then its partial output
            up = torch.nn.functional.linear(a, L.up[s])
            gate = torch.nn.functional.linear(a, L.gate[s])
            torch.matmul(torch.nn.functional.silu(gate) * up, L.down[s].t(), out=L.partials[s])
        x = x + self.reduce(L)
        if self.nvtx:
            torch.cuda.nvtx.range_pop()
        return x

    def step(self, x: torch.Tensor) -> torch.Tensor:
        for j in range(len(self.layers)):
            x = self.layer(j, x)
        return x


def check_race(model: Model, repeats: int) -> None:
    """Reduce the same partial outputs `repeats` times and count the distinct results."""
    L = model.layers[0]
    L.partials.normal_(generator=torch.Generator(device=DEV).manual_seed(5))
    seen = set()
    for _ in range(repeats):
        out = model.reduce(L)
        torch.cuda.synchronize()
        seen.add(hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest())
    print(f"tp_emulation: --reduce {model.args.reduce}: {len(seen)} distinct result(s) over {repeats} "
          f"repeats of the same {L.partials.shape[0]} x {L.partials[0].numel()} reduction")


def run_eager(model: Model, x: torch.Tensor) -> torch.Tensor:
    for i in range(model.args.steps):
        if model.nvtx:
            torch.cuda.nvtx.range_push(f"step {i}")
        x = model.step(x)
        if model.nvtx:
            torch.cuda.nvtx.range_pop()
    return x


def run_graph(model: Model, x: torch.Tensor) -> torch.Tensor:
    """Capture one step (static input and output buffers) and replay it for every step."""
    static_in = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    # Warm-up, eager: allocations and cuBLAS workspaces before capture. Its GEMMs are the only ones
    # detrace fingerprints (ops issued during capture get none), so a racy reduction shows there.
    if model.nvtx:
        torch.cuda.nvtx.range_push("warm-up")
    with torch.cuda.stream(side):
        model.step(static_in)
    torch.cuda.current_stream().wait_stream(side)
    if model.nvtx:
        torch.cuda.nvtx.range_pop()
    graph = torch.cuda.CUDAGraph()
    if model.nvtx:
        torch.cuda.nvtx.range_push("capture")
    with torch.cuda.graph(graph):
        static_out = model.step(static_in)
    if model.nvtx:
        torch.cuda.nvtx.range_pop()
    for i in range(model.args.steps):
        if model.nvtx:
            torch.cuda.nvtx.range_push(f"step {i}")
        graph.replay()
        static_in.copy_(static_out)
        if model.nvtx:
            torch.cuda.nvtx.range_pop()
    return static_in


def main() -> int:
    args = parse_args()
    if args.ffn % args.tp != 0:
        print("tp_emulation: --ffn must be a multiple of --tp", file=sys.stderr)
        return 2
    torch.cuda.set_device(0)
    shim = Shim(find_shim(args.shim)) if args.reduce != "torch" else None
    model = Model(args, shim)
    if args.check_race:
        check_race(model, args.check_race)
    dtype = DTYPES[args.dtype][0]
    gen = torch.Generator(device=DEV).manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.hidden, device=DEV, generator=gen).to(dtype)
    with torch.inference_mode():
        x = run_graph(model, x) if args.cuda_graph else run_eager(model, x)
    torch.cuda.synchronize()
    row = x[0].float().cpu()
    print(f"tp_emulation: tp {args.tp}, reduce {args.reduce}{', cuda graph' if args.cuda_graph else ''}, "
          f"{args.layers} layers x {args.steps} steps: request row digest "
          f"{hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16]}, sum {row.sum():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
