#!/usr/bin/env python3
"""A PyTorch program recorded by tests/tracer/gpu_torch_record_test.cc.

A small Qwen2 model (transformers, random weights from a config) runs a prefill and a few greedy
decode steps; after every decoder layer its hidden states go through a torch.distributed NCCL
all-reduce with world size 1. The program writes what it did to --expect-dir so the test can
check the trace against it, independently of detrace:

  expect.json      counts: all-reduce calls, nn.Linear calls by (out, in, tokens), graph replays
  allreduce-N.bin  the bytes of the N-th all-reduce's buffer (N < 3), taken before the call
  logits.bin       the bytes of the last lm_head GEMM's output (tokens x vocab, bf16)

--attn eager computes attention with batched GEMMs instead of SDPA's kernel.
--cuda-graph captures one decode step (static KV cache) in a torch.cuda.CUDAGraph and replays it.
"""
import argparse
import json
import os
import socket
from collections import Counter

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(hidden: int, layers: int, vocab: int, attn: str = "sdpa"):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=vocab,
                      max_position_embeddings=512, tie_word_embeddings=False)
    cfg._attn_implementation = attn
    torch.manual_seed(1234)
    return Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expect-dir", required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens per row")
    p.add_argument("--steps", type=int, default=3, help="decode steps after the prefill")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                   help="eager: attention through batched GEMMs (keys and values as cuBLAS's A)")
    args = p.parse_args()
    os.makedirs(args.expect_dir, exist_ok=True)

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1)

    model = build_model(args.hidden, args.layers, args.vocab, args.attn)
    linear_calls: Counter = Counter()
    allreduces = [0]
    capturing = [False]

    def count_linear(mod, inputs, _out):
        if capturing[0]:
            return
        x = inputs[0]
        tokens = x.numel() // x.shape[-1]
        linear_calls[(mod.out_features, mod.in_features, tokens)] += 1

    def allreduce_hook(_mod, _inputs, output):
        h = output[0] if isinstance(output, tuple) else output
        if not capturing[0] and allreduces[0] < 3:
            h.detach().contiguous().cpu().view(torch.uint8).numpy().tofile(
                os.path.join(args.expect_dir, f"allreduce-{allreduces[0]}.bin"))
        dist.all_reduce(h)
        if not capturing[0]:
            allreduces[0] += 1
        return output

    lm_head_out = [None]

    def keep_lm_head(_mod, _inputs, output):
        lm_head_out[0] = output  # during capture: the graph's static output buffer

    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(count_linear)
    model.lm_head.register_forward_hook(keep_lm_head)
    for layer in model.model.layers:
        layer.register_forward_hook(allreduce_hook)

    gen = torch.Generator(device="cuda").manual_seed(7)
    ids = torch.randint(0, args.vocab, (args.batch, args.prompt), device="cuda", generator=gen)
    replays = 0
    with torch.no_grad():
        if not args.cuda_graph:
            out = model(input_ids=ids, use_cache=True)
            past, logits = out.past_key_values, out.logits
            for _ in range(args.steps):
                nxt = logits[:, -1:].argmax(-1)
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits
        else:
            # A decode step without a KV cache over a fixed window: static shapes, graph-safe.
            window = ids.clone()
            static_in = window.clone()
            for _ in range(2):  # warm-up outside capture (cuBLAS workspaces, NCCL setup)
                model(input_ids=static_in, use_cache=False)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            capturing[0] = True
            with torch.cuda.graph(graph):
                static_logits = model(input_ids=static_in, use_cache=False).logits
            capturing[0] = False
            for _ in range(args.steps):
                graph.replay()
                replays += 1
                nxt = static_logits[:, -1:].argmax(-1)
                static_in.copy_(torch.cat([static_in[:, 1:], nxt], dim=1))
            logits = static_logits
        torch.cuda.synchronize()
        last = lm_head_out[0].detach().contiguous()
        last.cpu().view(torch.uint8).numpy().tofile(os.path.join(args.expect_dir, "logits.bin"))

    expect = {
        "allreduce_calls": allreduces[0],
        "linear_calls": [[o, i, t, n] for (o, i, t), n in sorted(linear_calls.items())],
        "graph_replays": replays,
        "logits_shape": list(last.shape),
        "hidden": args.hidden,
        "vocab": args.vocab,
    }
    with open(os.path.join(args.expect_dir, "expect.json"), "w") as f:
        json.dump(expect, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
