#!/usr/bin/env python3
"""Workloads for the tracer's overhead benchmark (bench/tracer/bench_overhead). Prints one line
`RESULT {"workload": ..., "seconds": ..., "cpu_seconds": ...}` with the median wall time of --reps
timed loops, each after a warm-up and bracketed by torch.cuda.synchronize() (Python's garbage
collector runs just before each timed loop and is off during it), and the median CPU
time of the loop's own thread over the same loops (time.thread_time: what the tracer adds to the
launching thread, without the time other processes take the CPU from it).

  launch  a launch-bound loop of tiny kernels (x.add_(1) on 1024 floats, --iters times)
  decode  a small Qwen2 model (transformers, random weights) decoding --iters tokens greedily
          with a KV cache, batch 1, bf16
  decode-graph  the same model and tokens as an engine runs them: one decode step over a static
          KV cache captured in a CUDA graph and replayed per token (greedy sampling outside
          the graph, as in vLLM or SGLang). The step is captured again after each `attach`
          switch (--toggle), so each side replays a graph captured in its own state: the
          capturing side's graph holds the tracer's digest launches. Should the static cache not
          capture, a 16-token window without a cache stands in (the result's "form" says which
          ran, and "check" whether the graph's tokens equal the eager step's)
  cxx     a C++ launch loop (tests/tracer/attach_gpu_app, --app): --iters launches of an empty
          kernel, timing the launch calls only (batches of 256, synchronised between batches);
          the program is this script's child, so it is recorded like the script would be

--kineto runs the timed loops under torch.profiler (CPU + CUDA activities), for comparison.

--toggle DETRACE (the process runs under `detrace record --paused`): each rep times one loop
paused and one loop capturing at --toggle-capture, switching with `detrace attach PID start|stop`
between them (outside the timed region, each switch followed by one untimed loop), so both sides
of the ratio run in the same process; which side goes first alternates from rep to rep; the
result is the median of the per-rep ratios. Each timed
loop also times its steps (a token of the decode loop, 500 launches of the launch loop): the
per-rep ratio of median steps (steady against stalls) and each side's step quantiles come with
the result, so a slowdown spread over every step can be told from a few long stalls, and so do
the main thread's CPU time, page faults and context switches per loop (medians, each side):
whether capturing makes the program's thread work more, fault in fresh memory or block; the
other threads' CPU time per loop comes too (the tracer's work off the program's thread).
--paired null|floor|detrace switches the recording between nearby steps of each of --reps loops
(launch and decode) and prints the median of the pairs' recorded/unrecorded step ratios with a 95%
interval (see paired()): null switches nothing, floor CUPTI's kernel records alone (the process
runs under libdetrace_cupti_floor.so), detrace the capture at --toggle-capture (the process runs
under `detrace record --paused`; the switch goes straight to its control socket).
--burn DUTY (no tracer) toggles the same way between loops alone and loops beside another
process that spins DUTY of every 10 ms: what the machine charges the loop for CPU work elsewhere.
With BENCH_PIN_MAIN=auto in the environment, the reps run with the launching (main) thread alone
on the process's highest CPU and every other thread of the process (the tracer's, CUPTI's,
torch's) kept off that CPU and its hyperthread siblings: whether the tracer's threads slow the
program by sharing its core.
"""
import argparse
import contextlib
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

LAUNCH_STEP = 500  # launches per timed step of the launch loop (--toggle)


def launch_loop(iters: int):
    import torch
    x = torch.zeros(1024, device="cuda")

    def run(steps=None, before=None):
        if steps is None:
            for _ in range(iters):
                x.add_(1.0)
            return
        for i, first in enumerate(range(0, iters, LAUNCH_STEP)):  # a "step": LAUNCH_STEP launches
            if before is not None:  # --paired: may switch the recording between steps
                before(i)
            t0 = time.perf_counter()
            for _ in range(min(LAUNCH_STEP, iters - first)):
                x.add_(1.0)
            steps.append(time.perf_counter() - t0)
    return run


def decode_loop(iters: int):
    import torch

    _, model = small_qwen2()
    prompt = torch.randint(0, 4096, (1, 16), device="cuda")

    def run(steps=None, before=None):
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            past, logits = out.past_key_values, out.logits
            for i in range(iters):
                if before is not None:  # --paired: may switch the recording between tokens
                    before(i)
                t0 = time.perf_counter()
                nxt = logits[:, -1:].argmax(-1)
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits
                if steps is not None:  # the host's time per token (the loop is launch-bound)
                    steps.append(time.perf_counter() - t0)
    return run


def small_qwen2():
    """The decode loops' model: a small Qwen2 with random weights, bf16, on the GPU."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, vocab_size=4096,
                      max_position_embeddings=1024, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cfg, Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()


def static_cache(cfg, length: int):
    """transformers' StaticCache (its signature changed between 4.x and 5.x)."""
    import torch
    from transformers import StaticCache
    try:
        return StaticCache(config=cfg, max_cache_len=length)
    except TypeError:
        return StaticCache(config=cfg, max_batch_size=1, max_cache_len=length, device="cuda",
                           dtype=torch.bfloat16)


class GraphDecode:
    """decode-graph: one decode step captured in a CUDA graph, replayed once per token.

    form "static": transformers' static KV cache, whose layers keep their length in a device
    tensor that the step advances itself (transformers 5: no cache_position argument any more);
    the step reads its token from a fixed tensor that the loop fills on the GPU (argmax, copy),
    so a loop of --iters tokens makes --iters replays and two small launches each, and no host
    sync. A loop starts by setting the layers' lengths back to the prompt's.
    form "window": no cache; the step runs the model over the last 16 tokens (the form the
    tracer's graph test uses), for a transformers whose static cache does not capture."""

    PROMPT = 16

    def __init__(self, iters: int):
        import torch
        self.torch, self.iters = torch, iters
        self.cfg, self.model = small_qwen2()
        self.prompt = torch.randint(0, self.cfg.vocab_size, (1, self.PROMPT), device="cuda")
        self.graph, self.form, self.check, self.error = None, "static", "", ""
        try:
            self._setup_static()
        except Exception as e:  # noqa: BLE001 - any failure of the static form: fall back
            self.error = f"{type(e).__name__}: {e}"[:300]
            self.form = "window"
            self.graph = None
            self._setup_window()

    # -- static KV cache ---------------------------------------------------------------------
    def _setup_static(self):
        torch = self.torch
        self.cache = static_cache(self.cfg, self.PROMPT + self.iters + 1)
        with torch.no_grad():
            out = self.model(input_ids=self.prompt, past_key_values=self.cache, use_cache=True)
        lengths = [getattr(layer, "cumulative_length", None) for layer in self.cache.layers]
        if not all(isinstance(n, torch.Tensor) for n in lengths):
            raise RuntimeError("this transformers' static cache keeps no device tensor of its length")
        self.lengths = lengths
        self.first = out.logits[:, -1:].argmax(-1)  # the first decoded token, (1, 1)
        self.ids = self.first.clone()
        eager = self._eager_tokens(8)
        self.capture()
        self.check = f"{sum(a == b for a, b in zip(eager, self._graph_tokens(8)))} of 8 tokens equal the eager step's"

    def _step(self):
        return self.model(input_ids=self.ids, past_key_values=self.cache, use_cache=True).logits

    def _eager_tokens(self, n: int) -> list:
        torch, tokens = self.torch, []
        self._reset()
        with torch.no_grad():
            for _ in range(n):
                self.ids.copy_(self._step()[:, -1:].argmax(-1))
                tokens.append(int(self.ids))
        return tokens

    def _graph_tokens(self, n: int) -> list:
        tokens = []
        self._reset()
        for _ in range(n):
            self._advance()
            tokens.append(int(self.ids))
        return tokens

    # -- a 16-token window, no cache ---------------------------------------------------------
    def _setup_window(self):
        self.ids = self.prompt.clone()
        self.first = self.prompt.clone()
        self.capture()
        self.check = "window form: not compared"

    # -- both forms --------------------------------------------------------------------------
    def _reset(self):
        self.ids.copy_(self.first)
        if self.form == "static":
            for n in self.lengths:
                n.fill_(self.PROMPT)

    def capture(self):
        """(Re)captures the step in the tracer's current state: drops the old graph first."""
        torch = self.torch
        self.graph = None
        torch.cuda.synchronize()
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture (cuBLAS workspaces)
                for _ in range(2):
                    self._reset()
                    self._forward()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self._reset()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.logits = self._forward()
        self.graph = graph
        torch.cuda.synchronize()

    def _forward(self):
        if self.form == "static":
            return self._step()
        return self.model(input_ids=self.ids, use_cache=False).logits

    def _advance(self):
        """One token: a replay, then greedy sampling into the step's input."""
        self.graph.replay()
        nxt = self.logits[:, -1:].argmax(-1)
        if self.form == "static":
            self.ids.copy_(nxt)
        else:
            self.ids.copy_(self.torch.cat([self.ids[:, 1:], nxt], dim=1))

    def __call__(self, steps=None):
        self._reset()
        for _ in range(self.iters):
            t0 = time.perf_counter()
            self._advance()
            if steps is not None:
                steps.append(time.perf_counter() - t0)


def graph_form(run) -> dict:
    """decode-graph: which form ran, its check against the eager step, and why the static form
    fell back (empty for the other workloads)."""
    if not isinstance(run, GraphDecode):
        return {}
    return {"form": run.form, "check": run.check, "fallback_reason": run.error}


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


@contextlib.contextmanager
def no_gc():
    """Python's collector off for a timed loop (collected just before): its pauses land on one
    side of a comparison or the other and widen the spread of both."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


USAGE_FIELDS = ("cpu_ms", "others_cpu_ms", "minflt", "majflt", "nvcsw", "nivcsw")


def thread_usage() -> tuple:
    """The calling thread's CPU time (ms), the CPU time of the process's other threads (ms: the
    tracer's, CUPTI's, torch's), the calling thread's page faults (minor, major) and context
    switches (voluntary: it blocked, on a lock or in the kernel; involuntary: preempted) so far."""
    r = resource.getrusage(resource.RUSAGE_THREAD)
    a = resource.getrusage(resource.RUSAGE_SELF)
    mine = (r.ru_utime + r.ru_stime) * 1e3
    return (time.thread_time() * 1e3, (a.ru_utime + a.ru_stime) * 1e3 - mine, r.ru_minflt,
            r.ru_majflt, r.ru_nvcsw, r.ru_nivcsw)


def timed(run, steps=None, usage=None) -> float:
    """One loop's wall time; with `usage` (a list), appends the loop's thread_usage() deltas."""
    import torch
    torch.cuda.synchronize()
    with no_gc():
        u0 = thread_usage()
        t0 = time.perf_counter()
        run() if steps is None else run(steps)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        if usage is not None:
            usage.append([b - a for a, b in zip(u0, thread_usage())])
        return t


def quantiles(xs) -> dict:
    """p10/p50/p90/p99/max of step times, in microseconds."""
    xs = sorted(xs)
    def at(q: float) -> float:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6, 1)
    return {"p10": at(0.10), "p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)}


def cpu_list(text: str) -> set:
    """CPUs of a kernel list such as "3,11" or "0-7"."""
    cpus = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def threads() -> dict:
    """This process's threads: tid -> name."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            pass  # the thread has exited
    return out


def pin_main_alone() -> str:
    """The main thread alone on the highest CPU this process may use; every other thread (now,
    and those they start later) off it and its hyperthread siblings. Says what it did."""
    cpus = os.sched_getaffinity(0)
    main_cpu = max(cpus)
    with open(f"/sys/devices/system/cpu/cpu{main_cpu}/topology/thread_siblings_list") as f:
        siblings = cpu_list(f.read())
    rest = cpus - siblings
    if not rest:
        raise SystemExit(f"BENCH_PIN_MAIN: no CPU left for the other threads besides {siblings}")
    main_tid = threading.get_native_id()
    for tid in threads():
        if tid != main_tid:
            try:
                os.sched_setaffinity(tid, rest)
            except OSError:
                pass  # the thread has exited
    os.sched_setaffinity(0, {main_cpu})
    return (f"main thread on CPU {main_cpu} (its siblings {sorted(siblings)}), "
            f"{len(threads()) - 1} other threads on {len(rest)} other CPUs")


def threads_on(cpu: int) -> str:
    """Threads other than main that may run on `cpu` (started by main after pin_main_alone)."""
    main_tid = threading.get_native_id()
    shared = []
    for tid, name in threads().items():
        try:
            if tid != main_tid and cpu in os.sched_getaffinity(tid):
                shared.append(name)
        except OSError:
            pass
    return f"threads besides main allowed on CPU {cpu} at the end: {shared or 'none'}"


def usage_medians(loops) -> dict:
    """Per field of USAGE_FIELDS, the median over timed loops (the main thread's counts)."""
    return {f: statistics.median(u[i] for u in loops) for i, f in enumerate(USAGE_FIELDS)} if loops else {}


BURNER = """
import sys, time
duty, period = float(sys.argv[1]), 0.01
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < duty * period:
        pass
    time.sleep(period * (1 - duty))
"""


def toggled(args, iters: int, run) -> None:
    pinned = pin_main_alone() if os.environ.get("BENCH_PIN_MAIN") == "auto" else ""
    burner = None
    def attach(*action: str) -> None:
        nonlocal burner
        if args.burn is None:
            subprocess.run([args.toggle, "attach", str(os.getpid()), *action], check=True,
                           stdout=subprocess.DEVNULL)
        elif action[0] == "start":  # --burn: another process's CPU work stands in for a capture
            burner = subprocess.Popen([sys.executable, "-c", BURNER, str(args.burn)])
        else:
            burner.kill()
            burner.wait()

    off, on = [], []
    off_steps, on_steps = [], []  # every step of every timed loop, each side
    off_usage, on_usage = [], []  # per timed loop: the main thread's faults and switches
    step_ratios = []  # per rep: median step capturing / median step paused
    recapture = getattr(run, "capture", None)  # decode-graph: capture the step in each state
    def switch(*action: str) -> None:
        attach(*action)
        if recapture is not None:
            recapture()

    def capturing(steps) -> float:
        switch("start", "--capture", args.toggle_capture)
        run()  # untimed: the first loop after a start meets new names and fresh buffers
        t = timed(run, steps, on_usage)
        switch("stop")
        run()  # untimed, as on the other side
        return t

    for rep in range(args.reps):
        a, b = [], []
        # Which side goes first alternates (paused first in even reps), so that a drift of the
        # machine's speed within a rep does not favour one side.
        if rep % 2 == 0:
            off.append(timed(run, a, off_usage))
            on.append(capturing(b))
        else:
            on.append(capturing(b))
            off.append(timed(run, a, off_usage))
        off_steps += a
        on_steps += b
        step_ratios.append(statistics.median(b) / statistics.median(a))
    if pinned:
        pinned += "; " + threads_on(max(os.sched_getaffinity(0)))
    ratios = [b / a for a, b in zip(off, on)]
    print("RESULT " + json.dumps({"workload": args.workload, "iters": iters, **graph_form(run),
                                  "seconds": statistics.median(on),
                                  "paused_seconds": statistics.median(off),
                                  "ratio": statistics.median(ratios), "ratios": ratios,
                                  "paused_all": off, "capturing_all": on,
                                  "step_ratios": step_ratios,
                                  "paused_steps_us": quantiles(off_steps),
                                  "capturing_steps_us": quantiles(on_steps),
                                  "pinned": pinned,
                                  "paused_usage": usage_medians(off_usage),
                                  "capturing_usage": usage_medians(on_usage)}),
          flush=True)


def median_ci95(xs) -> tuple:
    """A 95% confidence interval for the median of xs from order statistics (distribution-free:
    the ranks n/2 -/+ 0.98 sqrt(n), 1-based)."""
    import math
    xs = sorted(xs)
    n = len(xs)
    half = 0.98 * n ** 0.5
    lo, hi = max(math.floor(n / 2 - half), 1), min(math.ceil(n / 2 + 1 + half), n)
    return xs[lo - 1], xs[hi - 1]


def median_ci95_by_loop(loops, resamples: int = 2000) -> tuple:
    """A 95% interval for the median of all pairs that does not take the pairs as independent:
    the loops (each a list of pair ratios) are resampled with replacement, the pooled median taken
    each time, and the 2.5th and 97.5th percentiles of those medians returned (a cluster
    bootstrap: pairs of one loop share its drift). Seeded, so a result can be recomputed."""
    import random
    rng = random.Random(0)
    loops = [xs for xs in loops if xs]
    if len(loops) < 2:
        return float("nan"), float("nan")
    medians = []
    for _ in range(resamples):
        pooled = []
        for _ in range(len(loops)):
            pooled += loops[rng.randrange(len(loops))]
        medians.append(statistics.median(pooled))
    medians.sort()
    return medians[int(0.025 * resamples)], medians[min(int(0.975 * resamples), resamples - 1)]


class Recording:
    """--paired's switch: turns the recording on or off between two steps of a loop, in this
    process and without a child process, so that it can switch every few milliseconds.
      null     switches nothing (both sides alike: the method's own bias and spread)
      floor    CUPTI's kernel records alone: libdetrace_cupti_floor.so (loaded through
               CUDA_INJECTION64_PATH) enables and disables them (detrace_floor_records)
      detrace  `detrace attach`'s own request (start capture=LEVEL / stop) sent straight to this
               process's control socket (the run directory's proc-<pid>.dtrace-control names it);
               a stop waits for the records of launches made (0.3-0.5 s), so every detrace
               switch, start or stop, is padded to SWITCH_PAD_S: both sides of a pair then
               follow the same idle time (a step after an idle machine runs slower); the result
               says how many switches took longer than the pad (0.4 s until 2026-12-04)"""

    SWITCH_PAD_S = 0.6

    def __init__(self, kind: str, level: str):
        self.kind, self.level, self.lib, self.socket = kind, level, None, None
        self.on = None  # unknown until the first switch
        self.longest_switch_s = 0.0
        self.over_pad = 0  # switches that took longer than SWITCH_PAD_S
        if kind == "floor":
            import ctypes
            self.lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
            self.lib.detrace_floor_records.argtypes = [ctypes.c_int]
        elif kind == "detrace":
            pointer = os.path.join(os.environ["DETRACE_OUT_DIR"], f"proc-{os.getpid()}.dtrace-control")
            with open(pointer) as f:
                self.socket = next(line[7:].strip() for line in f if line.startswith("socket="))
            self.set(False)  # `record --paused`: already off; checks the socket answers

    def _ask(self, line: str) -> None:
        import socket
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.socket)
            s.sendall(line.encode() + b"\n")
            reply = s.makefile().readline()
        if not reply.startswith("ok"):
            raise SystemExit(f"--paired: {line!r} answered {reply.strip()!r}")

    def set(self, on: bool) -> None:
        if on == self.on:
            return  # a pair may begin in the state the previous one ended in
        self.on = on
        if self.kind == "floor":
            if self.lib.detrace_floor_records(int(on)) != 0:
                raise SystemExit("--paired floor: CUPTI refused to switch the kernel records")
        elif self.kind == "detrace":
            t0 = time.perf_counter()
            self._ask(f"start capture={self.level}" if on else "stop")
            took = time.perf_counter() - t0
            self.longest_switch_s = max(self.longest_switch_s, took)
            self.over_pad += took > self.SWITCH_PAD_S
            time.sleep(max(0.0, self.SWITCH_PAD_S - took))


def paired(args, iters: int, run) -> None:
    """--paired: within each loop, the recording switches before every other step; a pair is two
    nearby steps (a step: a token of the decode loop, 500 launches of the launch loop), neither
    the first after a switch (that one meets fresh buffers), one recorded and one not, in
    alternating order. The machine's speed drifts over seconds and moves between processes, but
    little within the pair, so the median of the pairs' ratios says what recording costs a step:
    with a 95% interval from order statistics (pairs taken as independent) and one from
    resampling whole loops (median_ci95_by_loop), which also counts what a loop's pairs share;
    every loop's ratios come with the result. The state changes only
    where it must (a pair may begin in the state the previous one ended in), so a timed step is
    at least the second after its switch."""
    import torch
    rec = Recording(args.paired, args.toggle_capture)
    on_first = [True]

    def before(i: int) -> None:  # steps 4k .. 4k+3 are pair k: switch before 4k and 4k+2
        k, j = divmod(i, 4)
        if j == 0:
            on_first[0] = k % 2 == 0
            rec.set(on_first[0])
        elif j == 2:
            rec.set(not on_first[0])

    ratios, on_steps, off_steps, loops = [], [], [], []
    for _ in range(args.reps):
        steps = []
        torch.cuda.synchronize()
        with no_gc():
            run(steps, before)
            torch.cuda.synchronize()
        rec.set(False)
        for k in range(len(steps) // 4):
            first, second = steps[4 * k + 1], steps[4 * k + 3]
            on, off = (first, second) if k % 2 == 0 else (second, first)
            ratios.append(on / off)
            on_steps.append(on)
            off_steps.append(off)
        loops.append(ratios[len(ratios) - len(steps) // 4:])
    lo, hi = median_ci95(ratios)
    loop_lo, loop_hi = median_ci95_by_loop(loops)
    q = statistics.quantiles(ratios, n=4)
    print("RESULT " + json.dumps({"workload": args.workload, "iters": iters, "paired": args.paired,
                                  "level": args.toggle_capture, "pairs": len(ratios),
                                  "ratio": statistics.median(ratios), "ratio_ci95": [lo, hi],
                                  "ratio_ci95_by_loop": [loop_lo, loop_hi],
                                  "ratio_quartiles": [q[0], q[2]],
                                  "ratio_of_means": sum(on_steps) / sum(off_steps),
                                  "longest_switch_s": rec.longest_switch_s,
                                  "switches_over_pad": rec.over_pad,
                                  "on_steps_us": quantiles(on_steps),
                                  "off_steps_us": quantiles(off_steps),
                                  "loop_ratios": [[round(x, 5) for x in xs] for xs in loops]}),
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=["launch", "decode", "decode-graph", "cxx"], required=True)
    p.add_argument("--app", help="cxx: the attach_gpu_app binary")
    p.add_argument("--iters", type=int, default=0, help="default: 20000 launches / 64 tokens")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--kineto", action="store_true")
    p.add_argument("--toggle", metavar="DETRACE", help="detrace binary: time paused vs capturing")
    p.add_argument("--toggle-capture", default="meta", choices=["meta", "digest"])
    p.add_argument("--paired", choices=["null", "floor", "detrace"],
                   help="switch the recording between steps of each loop and compare pairs of "
                        "nearby steps (see Recording and paired())")
    p.add_argument("--burn", type=float, metavar="DUTY",
                   help="no tracer: time loops alone against loops beside a process that spins "
                        "DUTY of every 10 ms (what other CPU work on the machine costs the loop)")
    args = p.parse_args()
    iters = args.iters or (64 if args.workload.startswith("decode") else 20000)
    if args.workload == "cxx":
        cxx_times(args, iters)
        return
    import torch
    if args.workload == "launch":
        run = launch_loop(iters)
    elif args.workload == "decode":
        run = decode_loop(iters)
    else:
        run = GraphDecode(iters)
    run()  # warm-up: allocator, cuBLAS handles, kernels loaded
    torch.cuda.synchronize()
    if args.paired:
        if args.workload not in ("launch", "decode"):
            raise SystemExit("--paired: the launch and decode workloads only")
        paired(args, iters, run)
        return
    if args.toggle or args.burn is not None:
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
            with no_gc():
                t0, c0 = time.perf_counter(), time.thread_time()
                run()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                cpus.append(time.thread_time() - c0)
    print("RESULT " + json.dumps({"workload": args.workload, "iters": iters, **graph_form(run),
                                  "seconds": statistics.median(times), "all": times,
                                  "cpu_seconds": statistics.median(cpus)}), flush=True)


if __name__ == "__main__":
    main()
