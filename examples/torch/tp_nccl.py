#!/usr/bin/env python3
"""A tensor-parallel Qwen2-style decoder stack (random weights, fixed seed, bf16), its weights
sharded by hand across the ranks and its partial outputs summed with NCCL all-reduces, for
recording with detrace on several GPUs.

    detrace record -o tp-a -- torchrun --standalone --nproc-per-node 2 examples/torch/tp_nccl.py
    detrace record -o tp-b -- torchrun --standalone --nproc-per-node 2 examples/torch/tp_nccl.py
    detrace diff tp-a tp-b         # run to run, every rank: expected identical
    detrace record -o bs1  -- torchrun ... examples/torch/tp_nccl.py --batch 1  --save-logits bs1.pt
    detrace record -o bs64 -- torchrun ... examples/torch/tp_nccl.py --batch 64 --compare-logits bs1.pt
    detrace diff bs1 bs64          # batch-size mode: the all-reduces' messages grow 64 times

Without torchrun (RANK unset) it runs as one process, world size 1, with the process group
initialised from defaults (MASTER_ADDR=127.0.0.1, a free MASTER_PORT): the all-reduces are real
NCCL calls over one rank.

Megatron-style sharding, done by hand (no transformers): every rank draws the same full weights
on the CPU from --seed, then rank r of W keeps slice r of them. Per layer:
  RMSNorm -> column-parallel fused QKV projection (with Qwen2's biases; the rank's --heads/W query
  heads and --kv-heads/W key/value heads) -> RoPE -> causal SDPA over the rank's heads with a
  static KV cache -> row-parallel o_proj (the rank's columns of it: a partial sum) -> all-reduce ->
  residual -> RMSNorm -> column-parallel fused gate/up projection (the rank's --intermediate/W
  columns) -> SiLU(gate) * up -> row-parallel down_proj -> all-reduce -> residual.
The embedding, the final norm and the LM head are replicated, so every rank computes the same
logits. Each all-reduce sums a (batch x tokens x --hidden) bf16 tensor in place: 2 per layer.

The request is always row 0 (the same prompt tokens in every run); with --batch N the other N-1
rows are random prompts of the same length, so nothing is padded. The program runs a prefill and
--steps greedy decode steps, with NVTX ranges "prefill", "step {i}" and "layer {j}". Rank 0 prints
a digest of the request's last-token logits (the other ranks print theirs on one line each: with a
replicated head they must agree); --save-logits keeps the request's logits of every step and
--compare-logits prints the largest difference to a saved run (another batch size, or another
world size: TP=2 and TP=1 sum in a different order, so they differ in the last bits).

--allreduce nccl        the all-reduces go through torch.distributed (the default).
--allreduce ipc         a one-shot all-reduce of our own over CUDA IPC buffers: each rank copies its
                        partial into its shared buffer, the ranks meet at a barrier (gloo), and each
                        sums every rank's buffer straight out of peer memory in rank order
                        (examples/planted_shim: fixedOrderReduce). Declared to detrace through
                        detrace/annotate.h, so it is recorded as an AllReduce like NCCL's. Ranks may
                        share a GPU (rank r uses GPU LOCAL_RANK mod the GPU count): TP=4 runs on 2.
--allreduce ipc-racy    the same, but rank --planted-rank sums in arrival order (the planted
                        racy reduction, atomics): a nondeterministic all-reduce on that rank only,
                        from 3 ranks up (two addends commute).
--allreduce none-check  no process group and no all-reduce at all; only at world size 1, where the
                        sum over one rank is the identity: its logits must equal --allreduce nccl's.
--device cpu            the same program on the CPU with the gloo backend (bf16 sums go through
                        fp32 there), to check the sharding on a machine with fewer GPUs than
                        ranks: TP=2 on the CPU must come close to TP=1, not match it bit for bit.
--repeat N              generate N times (the same tokens each time) and print the median time of
                        the runs after the first, for overhead measurements; steps are then
                        numbered on across the repeats.

NCCL's NVLink SHARP and PyTorch's and NVSHMEM's multicast are switched off (os.environ.setdefault
before anything starts: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), as every multi-GPU run of this project keeps them.
"""
import argparse
import ctypes
import hashlib
import os
import socket
import statistics
import sys
import time

for _key, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                     ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_key, _value)

import torch  # noqa: E402  (after the environment above)
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPE = torch.bfloat16
INIT_STD = 0.02  # transformers' initializer_range for Qwen2
ROPE_THETA = 10000.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1, help="rows in the batch; row 0 is the request")
    p.add_argument("--steps", type=int, default=3, help="greedy decode steps after the prefill")
    p.add_argument("--prompt-len", type=int, default=8, help="prompt tokens per row")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816, help="MLP width (split over the ranks)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16, help="query heads (split over the ranks)")
    p.add_argument("--kv-heads", type=int, default=4, help="key/value heads (split over the ranks)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--allreduce", choices=["nccl", "ipc", "ipc-racy", "none-check"], default="nccl",
                   help="sum the row-parallel partial outputs through torch.distributed (nccl), a "
                        "one-shot all-reduce over CUDA IPC buffers (ipc; ipc-racy: planted "
                        "arrival-order sums on --planted-rank), or (world size 1 only) not at all")
    p.add_argument("--planted-rank", type=int, default=-1,
                   help="with --allreduce ipc-racy: the rank whose sums are racy (default: the last)")
    p.add_argument("--shim", help="path of libdetrace_planted_shim.so (--allreduce ipc*; default: "
                                  "$DETRACE_SHIM or the usual build folders)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: gloo instead of NCCL, to check the sharding without GPUs")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="generate N times and print the median time of the runs after the first")
    p.add_argument("--save-logits", metavar="FILE", help="save the request's last-token logits (torch.save)")
    p.add_argument("--compare-logits", metavar="FILE", help="print the largest difference to saved logits")
    p.add_argument("--no-nvtx", action="store_true", help="leave out the prefill/step/layer NVTX ranges")
    return p.parse_args()


# ----------------------------------------------------------------------------------------------
# The process group.

class World:
    """This process's rank and world size, and the all-reduce of the row-parallel outputs."""

    def __init__(self, rank: int, size: int, local_rank: int, device: torch.device, reduce: bool):
        self.rank, self.size, self.local_rank, self.device = rank, size, local_rank, device
        self.reduce = reduce  # False with --allreduce none-check (world size 1 only)
        self.gloo = device.type == "cpu"
        self.ipc = None  # an IpcAllReduce with --allreduce ipc|ipc-racy

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum `t` over the ranks, in place."""
        if not self.reduce:
            return t
        if self.ipc is not None:
            return self.ipc(t)
        if self.gloo and t.dtype == torch.bfloat16:
            # gloo's bf16 support varies across PyTorch versions; the CPU mode only checks the
            # sharding, so it sums in fp32.
            tmp = t.float()
            dist.all_reduce(tmp)
            t.copy_(tmp)
            return t
        dist.all_reduce(t)
        return t

    def slice(self, n: int) -> slice:
        """Rank r's share of n rows/columns: slice r of W equal parts."""
        per = n // self.size
        return slice(self.rank * per, (self.rank + 1) * per)


SHIM_NAME = "libdetrace_planted_shim.so"


def find_shim(explicit):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [explicit, os.environ.get("DETRACE_SHIM")]
    for build in ["build-device", "build/dev", "build/release", "build"]:
        candidates.append(os.path.join(repo, build, "examples", "planted_shim", SHIM_NAME))
    for c in candidates:
        if c and os.path.isfile(c):
            return c
    sys.exit(f"tp_nccl: {SHIM_NAME} not found; build the detrace_planted_shim target and pass "
             f"--shim PATH (or set DETRACE_SHIM)")


class IpcAllReduce:
    """A one-shot all-reduce over CUDA IPC buffers (examples/planted_shim). Two buffers per rank,
    used in turn: a rank overwrites buffer k % 2 only after every rank passed the barrier of call
    k + 1, which each reaches after its call k finished reading (it waits for its stream first)."""

    COMM_ID = 0x1BC0A11  # any number equal on every rank: names the group in the trace

    def __init__(self, world: "World", max_elems: int, racy_rank: int, shim_path: str):
        self.world, self.racy_rank = world, racy_rank
        lib = ctypes.CDLL(shim_path)
        u64, u64p = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)
        sig = {"detrace_shim_ipc_alloc": [u64, u64p, ctypes.c_char_p],
               "detrace_shim_ipc_open": [ctypes.c_char_p, u64p],
               "detrace_shim_ipc_close": [u64], "detrace_shim_free": [u64],
               "detrace_shim_copy": [u64, u64, u64, ctypes.c_void_p],
               "detrace_shim_oneshot_allreduce": [u64p, ctypes.c_int, ctypes.c_int, u64, u64,
                                                  ctypes.c_int, ctypes.c_int, u64, ctypes.c_void_p]}
        for name, argtypes in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        lib.detrace_shim_last_error.restype = ctypes.c_char_p
        self.lib = lib
        self.bytes = max_elems * torch.finfo(DTYPE).bits // 8
        self.own, self.opened, self.ptrs = [], [], []
        handles = []
        for _ in range(2):
            ptr, handle = ctypes.c_uint64(), ctypes.create_string_buffer(64)
            self.check(lib.detrace_shim_ipc_alloc(self.bytes, ctypes.byref(ptr), handle), "ipc_alloc")
            self.own.append(ptr.value)
            handles.append(handle.raw)
        everyone = [None] * world.size
        dist.all_gather_object(everyone, handles)
        for k in range(2):
            ptrs = []
            for r in range(world.size):
                if r == world.rank:
                    ptrs.append(self.own[k])
                    continue
                ptr = ctypes.c_uint64()
                self.check(lib.detrace_shim_ipc_open(everyone[r][k], ctypes.byref(ptr)), "ipc_open")
                self.opened.append(ptr.value)
                ptrs.append(ptr.value)
            self.ptrs.append((ctypes.c_uint64 * world.size)(*ptrs))
        self.calls = 0

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            sys.exit(f"tp_nccl: rank {self.world.rank}: {what}: {self.lib.detrace_shim_last_error().decode()}")

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        assert t.is_contiguous() and t.dtype == DTYPE and t.numel() * 2 <= self.bytes
        k = self.calls % 2
        self.calls += 1
        stream = torch.cuda.current_stream()
        self.check(self.lib.detrace_shim_copy(self.own[k], t.data_ptr(), t.numel() * 2,
                                              stream.cuda_stream), "copy")
        stream.synchronize()
        dist.barrier()
        racy = int(self.world.rank == self.racy_rank)
        self.check(self.lib.detrace_shim_oneshot_allreduce(
            self.ptrs[k], self.world.size, self.world.rank, t.data_ptr(), t.numel(), 2, racy,
            self.COMM_ID, stream.cuda_stream), "oneshot_allreduce")
        return t

    def close(self) -> None:
        """After the last call: every rank done reading before any mapping goes away."""
        torch.cuda.synchronize()
        dist.barrier()
        for p in self.opened:
            self.lib.detrace_shim_ipc_close(p)
        dist.barrier()
        for p in self.own:
            self.lib.detrace_shim_free(p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_world(args: argparse.Namespace) -> World:
    """Under torchrun, RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* come from it; alone, world size 1 with
    defaults. --allreduce none-check starts no process group."""
    alone = "RANK" not in os.environ
    if alone:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
        os.environ.setdefault("LOCAL_RANK", "0")
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        # --allreduce ipc* lets ranks share GPUs (LOCAL_RANK mod the GPU count); NCCL needs one each.
        gpu = local_rank % torch.cuda.device_count() if args.allreduce.startswith("ipc") else local_rank
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
    else:
        device = torch.device("cpu")
    if args.allreduce == "none-check":
        if size != 1:
            sys.exit("tp_nccl: --allreduce none-check runs only at world size 1 (without the "
                     "all-reduces the ranks would keep partial sums)")
        return World(rank, size, local_rank, device, reduce=False)
    if args.allreduce.startswith("ipc"):
        if args.device != "cuda":
            sys.exit("tp_nccl: --allreduce ipc* needs --device cuda")
        dist.init_process_group("gloo")  # handles and barriers only; the sums are the IPC kernels
        world = World(dist.get_rank(), dist.get_world_size(), local_rank, device, reduce=True)
        racy = -2  # no rank
        if args.allreduce == "ipc-racy":
            racy = args.planted_rank if args.planted_rank >= 0 else world.size - 1
            if racy >= world.size:
                sys.exit(f"tp_nccl: --planted-rank {racy} is not a rank of world size {world.size}")
        max_elems = args.batch * max(args.prompt_len, 1) * args.hidden
        world.ipc = IpcAllReduce(world, max_elems, racy, find_shim(args.shim))
        return world
    backend = "nccl" if args.device == "cuda" else "gloo"
    try:
        # device_id binds the communicator to this GPU and creates it now, not at the first call.
        dist.init_process_group(backend, device_id=device if args.device == "cuda" else None)
    except TypeError:  # a PyTorch without device_id
        dist.init_process_group(backend)
    return World(dist.get_rank(), dist.get_world_size(), local_rank, device, reduce=True)


def check_shapes(args: argparse.Namespace, world: World) -> None:
    w = world.size
    problems = []
    if args.hidden % args.heads:
        problems.append("--hidden must be a multiple of --heads")
    elif (args.hidden // args.heads) % 2:
        problems.append("the head size (--hidden / --heads) must be even (RoPE)")
    if args.heads % args.kv_heads:
        problems.append("--heads must be a multiple of --kv-heads")
    for name, n in (("--heads", args.heads), ("--kv-heads", args.kv_heads),
                    ("--intermediate", args.intermediate)):
        if n % w:
            problems.append(f"{name} ({n}) must be a multiple of the world size ({w})")
    if args.batch < 1 or args.prompt_len < 1 or args.steps < 0 or args.repeat < 1:
        problems.append("--batch, --prompt-len and --repeat must be at least 1, --steps at least 0")
    if problems:
        sys.exit("tp_nccl: " + "; ".join(problems))


# ----------------------------------------------------------------------------------------------
# The model.

def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Qwen2RMSNorm: in fp32, then back to the input's dtype, times the weight."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rope:
    """cos/sin tables for positions 0..max_len-1 (transformers' default RoPE, cast to bf16)."""

    def __init__(self, head_dim: int, max_len: int, device: torch.device):
        inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(device=device, dtype=DTYPE)
        self.sin = emb.sin().to(device=device, dtype=DTYPE)

    def __call__(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """x: (batch, heads, tokens, head_dim), its tokens at positions pos, pos+1, ..."""
        t = x.shape[2]
        cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]
        return x * cos + rotate_half(x) * sin


class Weights:
    """Draws full weights, in a fixed order, from one CPU generator: the same on every rank."""

    def __init__(self, seed: int):
        self.gen = torch.Generator().manual_seed(seed)

    def __call__(self, *shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.gen) * INIT_STD).to(DTYPE)


class Layer:
    """One decoder layer: this rank's shards of the projections, and its share of the KV cache."""

    def __init__(self, args, world: World, draw: Weights, max_len: int):
        h, f = args.hidden, args.intermediate
        d = h // args.heads
        self.head_dim = d
        self.q_heads, self.kv_heads = args.heads // world.size, args.kv_heads // world.size
        # The full weights, every rank alike (nn.Linear layout: out_features x in_features).
        q_w, k_w, v_w = draw(args.heads * d, h), draw(args.kv_heads * d, h), draw(args.kv_heads * d, h)
        q_b, k_b, v_b = draw(args.heads * d), draw(args.kv_heads * d), draw(args.kv_heads * d)
        o_w = draw(h, args.heads * d)
        gate_w, up_w, down_w = draw(f, h), draw(f, h), draw(h, f)
        # This rank's slices. Column-parallel: rows of the weight (output features); row-parallel:
        # columns (input features), so each rank's o_proj/down_proj output is a partial sum.
        qs, kvs, fs = world.slice(args.heads * d), world.slice(args.kv_heads * d), world.slice(f)
        dev = world.device

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.contiguous().to(dev)

        self.qkv_w = put(torch.cat([q_w[qs], k_w[kvs], v_w[kvs]]))
        self.qkv_b = put(torch.cat([q_b[qs], k_b[kvs], v_b[kvs]]))
        self.o_w = put(o_w[:, qs])
        self.gate_up_w = put(torch.cat([gate_w[fs], up_w[fs]]))
        self.down_w = put(down_w[:, fs])
        self.in_norm = torch.ones(h, device=dev, dtype=DTYPE)
        self.post_norm = torch.ones(h, device=dev, dtype=DTYPE)
        cache = (args.batch, self.kv_heads, max_len, d)
        self.k_cache = torch.zeros(cache, device=dev, dtype=DTYPE)
        self.v_cache = torch.zeros(cache, device=dev, dtype=DTYPE)

    def attention(self, x: torch.Tensor, pos: int, rope: Rope) -> torch.Tensor:
        """The rank's heads; returns its partial o_proj output (batch, tokens, hidden)."""
        b, t, _ = x.shape
        d, hq, hkv = self.head_dim, self.q_heads, self.kv_heads
        qkv = F.linear(x, self.qkv_w, self.qkv_b)
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q = q.view(b, t, hq, d).transpose(1, 2)
        k = k.view(b, t, hkv, d).transpose(1, 2)
        v = v.view(b, t, hkv, d).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        keys, values = self.k_cache[:, :, :pos + t], self.v_cache[:, :, :pos + t]
        if hq != hkv:  # grouped-query attention: query head i reads key/value head i // (hq/hkv)
            keys = keys.repeat_interleave(hq // hkv, dim=1)
            values = values.repeat_interleave(hq // hkv, dim=1)
        # The prefill (pos 0, t tokens) is causal; a decode step's one token sees the whole cache.
        # (SDPA's is_causal aligns the mask top-left, right only when the query starts at 0.)
        assert t == 1 or pos == 0, "a multi-token call must start at position 0"
        o = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
        o = o.transpose(1, 2).reshape(b, t, hq * d)
        return F.linear(o, self.o_w)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """The rank's MLP columns; returns its partial down_proj output."""
        gate, up = F.linear(x, self.gate_up_w).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down_w)

    def __call__(self, x: torch.Tensor, pos: int, rope: Rope, world: World) -> torch.Tensor:
        x = x + world.all_reduce_(self.attention(rmsnorm(x, self.in_norm), pos, rope))
        return x + world.all_reduce_(self.mlp(rmsnorm(x, self.post_norm)))


class Ranges:
    """NVTX push/pop, or nothing (--no-nvtx, or on the CPU)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def push(self, name: str) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_push(name)

    def pop(self) -> None:
        if self.enabled:
            torch.cuda.nvtx.range_pop()


class Model:
    def __init__(self, args, world: World, ranges: Ranges):
        self.world, self.ranges = world, ranges
        max_len = args.prompt_len + args.steps
        draw = Weights(args.seed)
        dev = world.device
        self.embed = draw(args.vocab, args.hidden).to(dev)   # replicated
        self.layers = [Layer(args, world, draw, max_len) for _ in range(args.layers)]
        self.norm = torch.ones(args.hidden, device=dev, dtype=DTYPE)
        self.lm_head = draw(args.vocab, args.hidden).to(dev)  # replicated
        self.rope = Rope(args.hidden // args.heads, max_len, dev)

    def __call__(self, ids: torch.Tensor, pos: int) -> torch.Tensor:
        """ids: (batch, tokens) at positions pos...; returns each row's last-token logits."""
        x = F.embedding(ids, self.embed)
        for j, layer in enumerate(self.layers):
            self.ranges.push(f"layer {j}")
            x = layer(x, pos, self.rope, self.world)
            self.ranges.pop()
        return F.linear(rmsnorm(x[:, -1, :], self.norm), self.lm_head)


def prompts(args: argparse.Namespace, device: torch.device) -> torch.Tensor:
    """Row 0: the request (the same in every run); rows 1..: other requests of the same length."""
    request = torch.randint(0, args.vocab, (1, args.prompt_len),
                            generator=torch.Generator().manual_seed(args.seed + 1))
    others = torch.randint(0, args.vocab, (args.batch - 1, args.prompt_len),
                           generator=torch.Generator().manual_seed(args.seed + 2))
    return torch.cat([request, others]).to(device)


def generate(model: Model, ids: torch.Tensor, steps: int, ranges: Ranges):
    """Prefill, then greedy steps with the static KV cache. Returns row 0's last-token logits of
    each call (prefill first)."""
    per_step = []
    ranges.push("prefill")
    logits = model(ids, 0)
    ranges.pop()
    per_step.append(logits[0].float().cpu())
    pos = ids.shape[1]
    for i in range(steps):
        nxt = logits.argmax(dim=-1, keepdim=True)
        ranges.push(f"step {i}")
        logits = model(nxt, pos)
        ranges.pop()
        pos += 1
        per_step.append(logits[0].float().cpu())
    return per_step


# ----------------------------------------------------------------------------------------------
# Reporting.

def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


def kib(n_bytes: int) -> str:
    return f"{n_bytes / 1024:g} KiB"


def report(args, world: World, per_step, seconds) -> None:
    last = per_step[-1]
    if world.rank != 0:
        print(f"tp_nccl: rank {world.rank}: request's last-token logits digest {digest(last)}")
        return
    elem = torch.finfo(DTYPE).bits // 8
    msgs = (f"all-reduces of {kib(args.batch * args.prompt_len * args.hidden * elem)} (prefill) / "
            f"{kib(args.batch * args.hidden * elem)} (step), 2 per layer" if world.reduce
            else "no all-reduce (none-check)")
    print(f"tp_nccl: world size {world.size} ({args.device}), batch {args.batch}, {args.layers} layers, "
          f"{args.steps} step(s), {msgs}: request's last-token logits digest {digest(last)}, "
          f"argmax {int(last.argmax())}, max |logit| {last.abs().max():.4f}")
    if len(seconds) > 1:
        timed = seconds[1:]
        print(f"tp_nccl: generate median {statistics.median(timed) * 1e3:.3f} ms over {len(timed)} "
              f"timed run(s) after a warm-up (all: {', '.join(f'{s * 1e3:.1f}' for s in seconds)} ms)")
    else:
        print(f"tp_nccl: generate took {seconds[0] * 1e3:.3f} ms (one run, no warm-up)")
    if args.save_logits:
        torch.save({"per_step": per_step, "args": vars(args), "world_size": world.size}, args.save_logits)
    if args.compare_logits:
        other = torch.load(args.compare_logits)["per_step"]
        for i, (a, b) in enumerate(zip(per_step, other)):
            d = (a - b).abs()
            print(f"  {'prefill' if i == 0 else f'step {i - 1}'}: max |diff| {d.max():.6f}, "
                  f"{int((d > 0).sum())} of {d.numel()} logits differ, "
                  f"bit-identical {bool(torch.equal(a, b))}")


def main() -> int:
    args = parse_args()
    world = init_world(args)
    check_shapes(args, world)
    ranges = Ranges(enabled=not args.no_nvtx and args.device == "cuda")
    model = Model(args, world, ranges)
    ids = prompts(args, world.device)
    seconds = []
    with torch.inference_mode():
        for _ in range(args.repeat):
            if args.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            per_step = generate(model, ids, args.steps, ranges)
            if args.device == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    report(args, world, per_step, seconds)
    if world.ipc is not None:
        world.ipc.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
