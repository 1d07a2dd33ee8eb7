#!/usr/bin/env python3
"""A torch.compile'd PyTorch program recorded by tests/tracer/gpu_torch_record_test.cc.

The small Qwen2 model of torch_record_app.py, compiled with torch.compile (Inductor: Triton
kernels launched through the driver API, GEMMs through cuBLAS), decodes over a fixed window
(static shapes: one compilation). Warm-up steps compile it (and, with --mode reduce-overhead,
record Inductor's CUDA graph); then --steps steps run inside NVTX ranges `step {i}`.

Without --profile it writes to --expect-dir:
  expect.json   what it ran: steps, the logits' shape, hidden size, vocabulary, mode
  logits.bin    the bytes of the last step's logits (the lm_head GEMM's output, bf16)
With --profile it runs the same steps under torch.profiler instead (never under detrace: one
CUPTI subscriber per process) and writes kernels.json: the kernels the steps launched, by name.
Inductor's on-disk cache (TORCHINDUCTOR_CACHE_DIR: kernels and their tuned launch configurations)
gives the profiled and the recorded processes the same kernels; the test runs the recorded ones
with TORCHINDUCTOR_COMPILE_THREADS=1 (no compile workers, which would be recorded too).
"""
import argparse
import json
import os
import sys
import time
from collections import Counter

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_record_app import build_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--expect-dir", required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--window", type=int, default=8, help="tokens per row, fixed")
    p.add_argument("--steps", type=int, default=3, help="recorded decode steps")
    p.add_argument("--warmup", type=int, default=3, help="steps before them (compilation)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--mode", choices=["default", "reduce-overhead"], default="default")
    p.add_argument("--profile", action="store_true",
                   help="count the steps' kernels with torch.profiler (kernels.json)")
    args = p.parse_args()
    os.makedirs(args.expect_dir, exist_ok=True)

    model = build_model(args.hidden, args.layers, args.vocab)
    compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode,
                             dynamic=False)
    gen = torch.Generator(device="cuda").manual_seed(7)
    window = torch.randint(0, args.vocab, (args.batch, args.window), device="cuda", generator=gen)

    def step(name: str):
        torch.cuda.nvtx.range_push(name)
        logits = compiled(input_ids=window, use_cache=False).logits
        nxt = logits[:, -1:].argmax(-1)
        window.copy_(torch.cat([window[:, 1:], nxt], dim=1))
        torch.cuda.nvtx.range_pop()
        return logits

    with torch.no_grad():
        for i in range(args.warmup):
            step(f"warmup {i}")
        torch.cuda.synchronize()
        if args.profile:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                time.sleep(0.2)  # the first step's records well inside the profiler's window
                for i in range(args.steps):
                    step(f"step {i}")
                torch.cuda.synchronize()
                time.sleep(0.2)
            # Kineto's own kernel category; it leaves names over 1,024 characters mangled.
            trace = os.path.join(args.expect_dir, "profile.json")
            prof.export_chrome_trace(trace)
            with open(trace) as f:
                events = json.load(f)["traceEvents"]
            names = Counter(torch._C._demangle(e["name"]) if e["name"].startswith("_Z") else e["name"]
                            for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")
            with open(os.path.join(args.expect_dir, "kernels.json"), "w") as f:
                json.dump({"kernels": dict(sorted(names.items()))}, f, indent=1)
            return
        for i in range(args.steps):
            logits = step(f"step {i}")
        torch.cuda.synchronize()
        last = logits.detach().contiguous()
        last.cpu().view(torch.uint8).numpy().tofile(os.path.join(args.expect_dir, "logits.bin"))

    expect = {
        "steps": args.steps,
        "logits_shape": list(last.shape),
        "hidden": args.hidden,
        "vocab": args.vocab,
        "mode": args.mode,
    }
    with open(os.path.join(args.expect_dir, "expect.json"), "w") as f:
        json.dump(expect, f)


if __name__ == "__main__":
    main()
