#!/usr/bin/env python3
"""Workloads for the tracer's overhead benchmark (bench/tracer/bench_overhead). Prints one line
`RESULT {"workload": ..., "seconds": ..., "cpu_seconds": ...}` with the median wall time of --reps
timed loops, each after a warm-up and bracketed by torch.cuda.synchronize(), and the median CPU
time of the loop's own thread over the same loops (time.thread_time: what the tracer adds to the
launching thread, without the time other processes take the CPU from it).

  launch  a launch-bound loop of tiny kernels (x.add_(1) on 1024 floats, --iters times)
  decode  a small Qwen2 model (transformers, random weights) decoding --iters tokens greedily
          with a KV cache, batch 1, bf16
  cxx     a C++ launch loop (tests/tracer/attach_gpu_app, --app): --iters launches of an empty
          kernel, timing the launch calls only (batches of 256, synchronised between batches);
          the program is this script's child, so it is recorded like the script would be

--kineto runs the timed loops under torch.profiler (CPU + CUDA activities), for comparison.

--toggle DETRACE (the process runs under `detrace record --paused`): each rep times one loop
paused and one loop capturing at --toggle-capture, switching with `detrace attach PID start|stop`
between them (outside the timed region, each switch followed by one untimed loop), so both sides
of the ratio run in the same process; the result is the median of the per-rep ratios.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import time


def launch_loop(iters: int):
    import torch
    x = torch.zeros(1024, device="cuda")

    def run():
        for _ in range(iters):
            x.add_(1.0)
    return run


def decode_loop(iters: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=4096,
                      max_position_embeddings=1024, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    prompt = torch.randint(0, 4096, (1, 16), device="cuda")

    def run():
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            past, logits = out.past_key_values, out.logits
            for _ in range(iters):
                nxt = logits[:, -1:].argmax(-1)
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits
    return run


def cxx_times(args, iters: int) -> None:
    """The C++ loop's own timings ("time N" answers "ns T"), warm-up first."""
    if args.kineto or args.toggle:
        raise SystemExit("cxx: no --kineto or --toggle (the program is not Python)")
    app = subprocess.Popen([args.app], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(line: str) -> str:
        app.stdin.write(line + "\n")
        app.stdin.flush()
        return app.stdout.readline().strip()

    ready = app.stdout.readline().strip()
    if not ready.startswith("ready "):
        raise SystemExit(f"cxx: {args.app} said {ready!r}, not ready")
    ask("time 2000")
    times, cpus = [], []
    for _ in range(args.reps):
        answer = ask(f"time {iters}").split()  # "ns T cpu C"
        if len(answer) != 4 or answer[0] != "ns" or answer[2] != "cpu":
            raise SystemExit(f"cxx: {args.app} said {' '.join(answer)!r}")
        times.append(int(answer[1]) / 1e9)
        cpus.append(int(answer[3]) / 1e9)
    ask("exit")
    app.wait()
    print("RESULT " + json.dumps({"workload": "cxx", "iters": iters,
                                  "seconds": statistics.median(times), "all": times,
                                  "cpu_seconds": statistics.median(cpus)}), flush=True)


def timed(run) -> float:
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def toggled(args, iters: int, run) -> None:
    def attach(*action: str) -> None:
        subprocess.run([args.toggle, "attach", str(os.getpid()), *action], check=True,
                       stdout=subprocess.DEVNULL)

    off, on = [], []
    for _ in range(args.reps):
        off.append(timed(run))
        attach("start", "--capture", args.toggle_capture)
        run()  # untimed: the first loop after a start meets new names and fresh buffers
        on.append(timed(run))
        attach("stop")
        run()
    ratios = [b / a for a, b in zip(off, on)]
    print("RESULT " + json.dumps({"workload": args.workload, "iters": iters,
                                  "seconds": statistics.median(on),
                                  "paused_seconds": statistics.median(off),
                                  "ratio": statistics.median(ratios), "ratios": ratios}),
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=["launch", "decode", "cxx"], required=True)
    p.add_argument("--app", help="cxx: the attach_gpu_app binary")
    p.add_argument("--iters", type=int, default=0, help="default: 20000 launches / 64 tokens")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--kineto", action="store_true")
    p.add_argument("--toggle", metavar="DETRACE", help="detrace binary: time paused vs capturing")
    p.add_argument("--toggle-capture", default="meta", choices=["meta", "digest"])
    args = p.parse_args()
    iters = args.iters or (64 if args.workload == "decode" else 20000)
    if args.workload == "cxx":
        cxx_times(args, iters)
        return
    import torch
    run = launch_loop(iters) if args.workload == "launch" else decode_loop(iters)
    run()  # warm-up: allocator, cuBLAS handles, kernels loaded
    torch.cuda.synchronize()
    if args.toggle:
        toggled(args, iters, run)
        return
    prof = contextlib.nullcontext()
    if args.kineto:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    times, cpus = [], []
    with prof:
        for _ in range(args.reps):
            torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.thread_time()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            cpus.append(time.thread_time() - c0)
    print("RESULT " + json.dumps({"workload": args.workload, "iters": iters,
                                  "seconds": statistics.median(times), "all": times,
                                  "cpu_seconds": statistics.median(cpus)}), flush=True)


if __name__ == "__main__":
    main()
