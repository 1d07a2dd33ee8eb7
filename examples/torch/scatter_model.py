#!/usr/bin/env python3
"""A small model with run-to-run nondeterminism from PyTorch itself: a float `index_add_` with
repeated indices, which PyTorch's CUDA kernel accumulates with atomics in arrival order.

    detrace record -o a --deep ops:1:3 -- python3 examples/torch/scatter_model.py
    detrace record -o b --deep ops:1:3 -- python3 examples/torch/scatter_model.py
    detrace diff a b           # names PyTorch's index_add kernel as where the runs part
    detrace bisect -- python3 examples/torch/scatter_model.py    # finds it on its own

Each of --layers blocks is: RMSNorm, an up projection (GEMM), SiLU, a down projection (GEMM), then
a segment mix: the tokens' vectors are summed per segment with `index_add_` (--tokens tokens into
--segments segments, so every segment gets many additions), the segment sums are gathered back to
their tokens and added to the residual. The model is float32 (--dtype; the GEMMs are cuBLAS SGEMMs,
TF32 off), so the last-bit differences of the atomics reach the next GEMM and the output: in bf16
most of them round away. The weights and the input come from --seed, so only the atomics' order
differs between runs. With --layers 2 the library ops are: block 0's up and down GEMMs (ops 0, 1), block 1's (2, 3),
then the head (4): block 0's index_add_ runs between ops 1 and 2. Steps are NVTX ranges "step {i}".

--expandable sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before torch loads, so the caching
allocator maps memory with cuMemCreate + cuMemMap instead of cudaMalloc. The program prints a
digest of the final output.
"""
import argparse
import hashlib
import os
import sys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--segments", type=int, default=16)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--expandable", action="store_true",
                   help="use the caching allocator's expandable segments (cuMemCreate + cuMemMap)")
    p.add_argument("--deterministic-mix", action="store_true",
                   help="sum the segments with a sorted segment reduction instead (no atomics)")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    if args.expandable:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    dev = "cuda"
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    def weight(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=gen) / cols ** 0.5
        return w.to(device=dev, dtype=dtype)

    layers = [(weight(args.intermediate, args.hidden), weight(args.hidden, args.intermediate))
              for _ in range(args.layers)]
    head = weight(args.hidden, args.hidden)
    # Wide magnitudes make the rounding of a sum depend on its order.
    x0 = (torch.randn(args.tokens, args.hidden, generator=gen) *
          torch.exp(2 * torch.randn(args.tokens, 1, generator=gen))).to(dev, dtype)
    segment = (torch.arange(args.tokens) % args.segments).to(dev)
    order = torch.argsort(segment, stable=True)
    counts = torch.bincount(segment, minlength=args.segments)

    def mix(h: torch.Tensor) -> torch.Tensor:
        h32 = h.float()
        if args.deterministic_mix:
            sums = torch.segment_reduce(h32[order], "sum", lengths=counts, axis=0)
        else:
            sums = torch.zeros(args.segments, args.hidden, device=dev).index_add_(0, segment, h32)
        return (sums[segment] / args.tokens).to(dtype)

    def rmsnorm(h: torch.Tensor) -> torch.Tensor:
        h32 = h.float()
        return (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)

    out = None
    with torch.no_grad():
        for step in range(args.steps):
            torch.cuda.nvtx.range_push(f"step {step}")
            h = x0
            for j, (up, down) in enumerate(layers):
                torch.cuda.nvtx.range_push(f"layer {j}")
                a = torch.nn.functional.silu(rmsnorm(h) @ up.t())
                h = h + a @ down.t()
                h = h + mix(h)
                torch.cuda.nvtx.range_pop()
            out = rmsnorm(h) @ head.t()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
    digest = hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()[:16]
    print(f"output digest {digest}")
    print(f"allocator {'expandable segments' if args.expandable else 'cudaMalloc segments'}: "
          f"{torch.cuda.memory_reserved() >> 20} MiB reserved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
