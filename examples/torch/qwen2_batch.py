#!/usr/bin/env python3
"""A small Qwen2-style model from transformers (random weights, fixed seed), run on one request alone
or inside a batch, for recording with detrace.

    detrace record -o bs1  -- python3 examples/torch/qwen2_batch.py --batch 1  --save-logits bs1.pt
    detrace record -o bs64 -- python3 examples/torch/qwen2_batch.py --batch 64 --compare-logits bs1.pt
    detrace diff bs1 bs64          # batch-size mode: where the request's rows stop matching, and why

The request is always row 0 (the same prompt tokens in every run); with --batch N the other N-1 rows
are random prompts of the same length, so no padding is needed. The program runs a prefill and
--steps greedy decode steps with a KV cache. Each decode step is inside an NVTX range "step {i}" (the
prefill inside "prefill") and each decoder layer inside "layer {j}", so `detrace diff` can say where
a divergence sits. It prints a digest of the request's last-token logits; --save-logits keeps them
and --compare-logits prints the largest difference to a saved run (on an H200 the request's logits
alone and in a batch of 64 differed by up to 0.02, while two batched runs were bit-identical; with
the defaults, hidden 1024, cuBLAS picks other kernels at n=1 and the prefill's logits differ by 0.018,
while at hidden 512 the two were bit-identical).

--world-size-1-allreduce  initialise torch.distributed (NCCL, world size 1) and all-reduce each
                          layer's hidden states, as tensor-parallel engines do, so the trace holds
                          NCCL collectives (a sum over one rank: the values do not change).
--cuda-graph              capture the decode step in a CUDA graph (static KV cache) and replay it.
"""
import argparse
import hashlib
import inspect
import os
import socket
import sys

import torch

DEV = "cuda"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1, help="rows in the batch; row 0 is the request")
    p.add_argument("--steps", type=int, default=3, help="greedy decode steps after the prefill")
    p.add_argument("--prompt-len", type=int, default=8, help="prompt tokens per row")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa", help="attention implementation")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--save-logits", metavar="FILE", help="save the request's last-token logits (torch.save)")
    p.add_argument("--compare-logits", metavar="FILE", help="print the largest difference to saved logits")
    p.add_argument("--world-size-1-allreduce", action="store_true",
                   help="all-reduce each layer's output through NCCL with world size 1")
    p.add_argument("--cuda-graph", action="store_true", help="capture the decode step in a CUDA graph")
    p.add_argument("--no-nvtx", action="store_true", help="leave out the step/layer NVTX ranges")
    return p.parse_args()


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(256, args.prompt_len + args.steps + 8),
        tie_word_embeddings=False,
        use_sliding_window=False,
    )
    config._attn_implementation = args.attn
    torch.manual_seed(args.seed)  # the weights: the same in every run
    model = Qwen2ForCausalLM(config)
    return model.to(device=DEV, dtype=torch.bfloat16).eval()


def prompts(args: argparse.Namespace) -> torch.Tensor:
    """Row 0: the request (the same in every run); rows 1..: other requests of the same length."""
    request = torch.randint(0, args.vocab, (1, args.prompt_len),
                            generator=torch.Generator().manual_seed(args.seed + 1))
    others = torch.randint(0, args.vocab, (max(args.batch - 1, 0), args.prompt_len),
                           generator=torch.Generator().manual_seed(args.seed + 2))
    return torch.cat([request, others]).to(DEV)


def layers_of(model: torch.nn.Module):
    return model.model.layers


def hidden_of(output):
    """A decoder layer returns its hidden states, alone or first in a tuple (transformers versions)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def add_layer_hooks(model: torch.nn.Module, nvtx: bool, allreduce: bool) -> None:
    """NVTX range "layer {j}" around each decoder layer, and the all-reduce after it. (A hook that
    returns a value replaces the layer's input or output, so these return None.)"""
    def push(j):
        def hook(module, args):
            torch.cuda.nvtx.range_push(f"layer {j}")
        return hook

    def pop(module, args, output):
        torch.cuda.nvtx.range_pop()

    def all_reduce(module, args, output):
        import torch.distributed as dist

        dist.all_reduce(hidden_of(output))  # in place: a sum over one rank changes nothing

    for j, layer in enumerate(layers_of(model)):
        if nvtx:
            layer.register_forward_pre_hook(push(j))
        if allreduce:
            layer.register_forward_hook(all_reduce)
        if nvtx:
            layer.register_forward_hook(pop)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_world_size_1() -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device(DEV, 0))


class Ranges:
    """NVTX push/pop, or nothing with --no-nvtx."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def push(self, name: str) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_push(name)

    def pop(self) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_pop()


def decode_eager(model, ids, args, ranges: Ranges):
    """Prefill, then greedy steps with transformers' dynamic KV cache. Returns row 0's last logits
    of each step (prefill first)."""
    per_step = []
    ranges.push("prefill")
    out = model(input_ids=ids, use_cache=True)
    ranges.pop()
    past = out.past_key_values
    logits = out.logits[:, -1, :]
    per_step.append(logits[0].float().cpu())
    for i in range(args.steps):
        nxt = logits.argmax(dim=-1, keepdim=True)
        ranges.push(f"step {i}")
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        ranges.pop()
        past = out.past_key_values
        logits = out.logits[:, -1, :]
        per_step.append(logits[0].float().cpu())
    return per_step


def static_cache(model, batch: int, max_len: int):
    """transformers' StaticCache, built with whichever arguments this version takes."""
    from transformers import StaticCache

    wanted = {"config": model.config, "max_batch_size": batch, "max_cache_len": max_len,
              "device": torch.device(DEV), "dtype": torch.bfloat16}
    accepted = inspect.signature(StaticCache.__init__).parameters
    if any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
        kwargs = wanted
    else:
        kwargs = {k: v for k, v in wanted.items() if k in accepted}
    return StaticCache(**kwargs)


def decode_graph(model, ids, args, ranges: Ranges):
    """Prefill eagerly into a static KV cache, then capture one decode step in a CUDA graph and
    replay it for every step (the graph's inputs are static buffers updated in place)."""
    batch, length = ids.shape
    cache = static_cache(model, batch, length + args.steps + 1)
    per_step = []
    ranges.push("prefill")
    positions = torch.arange(length, device=DEV)
    out = model(input_ids=ids, past_key_values=cache, cache_position=positions, use_cache=True)
    ranges.pop()
    logits = out.logits[:, -1, :]
    per_step.append(logits[0].float().cpu())
    # Static inputs of the decode step.
    tok = logits.argmax(dim=-1, keepdim=True)
    cache_position = torch.tensor([length], device=DEV, dtype=torch.long)
    position_ids = torch.full((batch, 1), length, device=DEV, dtype=torch.long)

    def step():
        o = model(input_ids=tok, past_key_values=cache, cache_position=cache_position,
                  position_ids=position_ids, use_cache=True)
        return o.logits[:, -1, :]

    # Warm up on a side stream (allocations, cuBLAS workspaces), as torch.cuda.graphs asks. The
    # warm-up writes position `length` of the cache, which the first replay writes again.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    ranges.push("warm-up")
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    ranges.pop()
    graph = torch.cuda.CUDAGraph()
    ranges.push("capture")
    with torch.cuda.graph(graph):
        static_logits = step()
    ranges.pop()
    for i in range(args.steps):
        ranges.push(f"step {i}")
        graph.replay()
        ranges.pop()
        per_step.append(static_logits[0].float().cpu())
        tok.copy_(static_logits.argmax(dim=-1, keepdim=True))
        cache_position += 1
        position_ids += 1
    return per_step


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def report(args, per_step) -> None:
    last = per_step[-1]
    print(f"qwen2_batch: batch {args.batch}, {args.steps} step(s), attn {args.attn}"
          f"{', cuda graph' if args.cuda_graph else ''}"
          f"{', all-reduce (world size 1)' if args.world_size_1_allreduce else ''}: request's last-token "
          f"logits digest {digest(last)}, argmax {int(last.argmax())}, max |logit| {last.abs().max():.4f}")
    if args.save_logits:
        torch.save({"per_step": per_step, "args": vars(args)}, args.save_logits)
    if args.compare_logits:
        other = torch.load(args.compare_logits)["per_step"]
        for i, (a, b) in enumerate(zip(per_step, other)):
            d = (a - b).abs()
            print(f"  {'prefill' if i == 0 else f'step {i - 1}'}: max |diff| {d.max():.6f}, "
                  f"{int((d > 0).sum())} of {d.numel()} logits differ, bit-identical {bool(torch.equal(a, b))}")


def main() -> int:
    args = parse_args()
    if args.batch < 1:
        print("qwen2_batch: --batch must be at least 1", file=sys.stderr)
        return 2
    torch.cuda.set_device(0)
    if args.world_size_1_allreduce:
        init_world_size_1()
    model = build_model(args)
    nvtx = not args.no_nvtx
    add_layer_hooks(model, nvtx, args.world_size_1_allreduce)
    ids = prompts(args)
    with torch.inference_mode():
        if args.cuda_graph:
            per_step = decode_graph(model, ids, args, Ranges(nvtx))
        else:
            per_step = decode_eager(model, ids, args, Ranges(nvtx))
    torch.cuda.synchronize()
    report(args, per_step)
    if args.world_size_1_allreduce:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
