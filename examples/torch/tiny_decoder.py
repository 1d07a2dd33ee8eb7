#!/usr/bin/env python3
"""A tiny decoder-style stack in PyTorch (random weights, fixed seed), for recording with detrace.

    detrace record -o runA -- python3 examples/torch/tiny_decoder.py --batch 1
    detrace record -o runB -- python3 examples/torch/tiny_decoder.py --batch 8   # same request + 7 others
    detrace diff runA runB

The request under test is always row 0 of the batch (the same token embeddings in every run); the
other rows are random. Each layer: RMSNorm, QKV-like projection, a mixing matmul, a gated MLP, all
in bf16 through cuBLAS. --nondet adds an index_add_ on float data (atomics in arrival order), a
real source of run-to-run nondeterminism, before the MLP of layer 1.
"""
import argparse

import torch


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1, help="rows (tokens) in the batch; row 0 is the request")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--nondet", action="store_true", help="add a nondeterministic index_add_")
    args = p.parse_args()

    torch.manual_seed(1234)
    dev = "cuda"
    h = args.hidden
    layers = []
    for _ in range(args.layers):
        layers.append({
            "norm1": torch.ones(h, device=dev, dtype=torch.bfloat16),
            "qkv": torch.randn(3 * h, h, device=dev, dtype=torch.bfloat16) / h**0.5,
            "out": torch.randn(h, h, device=dev, dtype=torch.bfloat16) / h**0.5,
            "norm2": torch.ones(h, device=dev, dtype=torch.bfloat16),
            "up": torch.randn(4 * h, h, device=dev, dtype=torch.bfloat16) / h**0.5,
            "gate": torch.randn(4 * h, h, device=dev, dtype=torch.bfloat16) / h**0.5,
            "down": torch.randn(h, 4 * h, device=dev, dtype=torch.bfloat16) / (4 * h) ** 0.5,
        })
    request = torch.randn(1, h, device=dev, dtype=torch.bfloat16)
    gen = torch.Generator(device=dev).manual_seed(99)
    others = torch.randn(max(args.batch - 1, 0), h, device=dev, dtype=torch.bfloat16, generator=gen)
    x = torch.cat([request, others], dim=0)

    for step in range(args.steps):
        for i, L in enumerate(layers):
            a = rmsnorm(x, L["norm1"])
            q, k, v = torch.nn.functional.linear(a, L["qkv"]).chunk(3, dim=-1)
            mixed = torch.nn.functional.linear(torch.nn.functional.silu(q) * k + v, L["out"])
            x = x + mixed
            if args.nondet and i == 1:
                # A float sum of a million values into one slot with atomics (index_add_): the
                # rounding depends on the order the atomics land in, which varies run to run. The
                # sum then scales the hidden state, so the difference flows into the next GEMM.
                vals = torch.randn(1 << 20, device=dev, generator=torch.Generator(device=dev).manual_seed(7))
                total = torch.zeros(1, device=dev).index_add_(0, torch.zeros(vals.numel(), dtype=torch.long, device=dev), vals)
                x = (x.float() * (1 + 1e-2 * total)).to(torch.bfloat16)
            b = rmsnorm(x, L["norm2"])
            up = torch.nn.functional.linear(b, L["up"])
            gate = torch.nn.functional.linear(b, L["gate"])
            x = x + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, L["down"])
    torch.cuda.synchronize()
    digest = x[0].float().sum().item()
    print(f"tiny_decoder: batch {args.batch}, request row sum {digest:.6f}")


if __name__ == "__main__":
    main()
