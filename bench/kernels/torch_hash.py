#!/usr/bin/env python3
"""torch.hash_tensor (xor reduction) and a torch device copy at the digest's sizes, for a side by
side comparison with bench_kernels' digest rows. Same method: CUDA events around batches of
back-to-back calls, warm-up, median over batches, inputs rotated over >= 256 MiB so the 60 MB L2
does not flatter small sizes. Prints: kernel | size | time_us | GB/s | % of ceiling."""
import statistics
import sys

try:
    import torch
except ImportError:  # pragma: no cover - reported, not fatal
    print("torch_hash.py: torch is not installed; nothing to measure")
    sys.exit(0)

KIB, MIB, GIB = 1024, 1024**2, 1024**3
ROTATION = 256 * MIB
SIZES = [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 256 * MIB, 1 * GIB]


def human(n):
    if n >= GIB and n % GIB == 0:
        return f"{n // GIB} GiB"
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    return f"{n // KIB} KiB"


def median_us(fn, per_call_bytes, reps=15):
    rotation = max(1, ROTATION // max(per_call_bytes, 1))
    batch = min(200, max(1, 64 * MIB // max(per_call_bytes, 1)))
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    call = 0
    times = []
    for rep in range(3 + reps):
        start.record()
        for _ in range(batch):
            fn(call % rotation)
            call += 1
        stop.record()
        stop.synchronize()
        if rep >= 3:
            times.append(start.elapsed_time(stop) * 1000.0 / batch)
    return statistics.median(times)


def hash_fn():
    fn = getattr(torch, "hash_tensor", None)
    if fn is None:
        return None, "torch.hash_tensor is absent in torch " + torch.__version__
    try:  # torch 2.9+: torch.hash_tensor(input, *, mode=0), mode 0 = xor reduction
        fn(torch.zeros(8, dtype=torch.int64, device="cuda"), mode=0)
        return (lambda t: fn(t, mode=0)), None
    except TypeError:
        pass
    try:
        fn(torch.zeros(8, dtype=torch.int64, device="cuda"), reduction="xor")
        return (lambda t: fn(t, reduction="xor")), None
    except Exception as e:  # noqa: BLE001
        return None, f"torch.hash_tensor is not callable as expected: {e}"


def main():
    if not torch.cuda.is_available():
        print("torch_hash.py: no CUDA device")
        return
    pool = torch.empty(GIB + 64 * MIB, dtype=torch.uint8, device="cuda").fill_(0x3C)
    dst = torch.empty(GIB, dtype=torch.uint8, device="cuda")
    rows = []

    n = 512 * MIB
    us = median_us(lambda i: dst[:n].copy_(pool[:n]), 2 * n, reps=9)
    ceiling = 2 * n / (us * 1e-6) / 1e9
    rows.append(("torch copy_ (r+w)", human(n), us, ceiling))

    fn, why = hash_fn()
    if fn is None:
        print(f"torch_hash.py: {why}")
    for size in SIZES:
        stride = (size + 255) // 256 * 256
        views64 = lambda i: pool[i * stride:i * stride + size].view(torch.int64)  # noqa: E731
        us = median_us(lambda i: dst[:size].copy_(pool[i * stride:i * stride + size]), 2 * stride)
        rows.append(("torch copy_ (r+w)", human(size), us, 2 * size / (us * 1e-6) / 1e9))
        if fn is not None:
            us = median_us(lambda i: fn(views64(i)), stride)
            rows.append(("torch.hash_tensor int64 xor", human(size), us, size / (us * 1e-6) / 1e9))
            if size >= 16 * MIB:
                bf = lambda i: pool[i * stride:i * stride + size].view(torch.bfloat16)  # noqa: E731
                us = median_us(lambda i: fn(bf(i)), stride, reps=9)
                rows.append(("torch.hash_tensor bf16 xor", human(size), us, size / (us * 1e-6) / 1e9))

    print(f"\ntorch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'kernel':<34} | {'size':<12} | {'time_us':>10} | {'GB/s':>9} | % of ceiling")
    print("-" * 90)
    for kernel, size, us, gbps in rows:
        print(f"{kernel:<34} | {size:<12} | {us:10.2f} | {gbps:9.1f} | {100 * gbps / ceiling:5.1f}")
    print(f"\nGB/s: bytes read (+ written for copies). Ceiling: the 512 MiB copy, {ceiling:.1f} GB/s.")


if __name__ == "__main__":
    main()
