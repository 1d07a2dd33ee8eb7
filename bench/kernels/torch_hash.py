#!/usr/bin/env python3
"""torch.hash_tensor (xor reduction) and a torch device copy at the digest's sizes, for a side by
side comparison with bench_kernels' digest rows. Same method: CUDA events around batches of
back-to-back calls, warm-up, median over batches, inputs rotated over >= 256 MiB so the 60 MB L2
does not flatter small sizes. Prints: kernel | size | time_us | GB/s | % of ceiling.

Written to finish whatever the torch build offers: each measurement runs on its own and a failure
(no torch.hash_tensor, a dtype it refuses, a CUDA error) is printed and skipped, and the script
always exits 0. Memory: one input pool sized to what the rotation reads (ROTATION, or the largest
size) and one copy destination of the largest size, allocated once."""
import statistics
import sys
import traceback

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
    probe = torch.zeros(8, dtype=torch.int64, device="cuda")
    errors = []
    # torch 2.9+: torch.hash_tensor(input, dim=None, *, keepdim=False, mode=0), mode 0 = xor.
    for kwargs in ({"mode": 0}, {}):
        try:
            fn(probe, **kwargs)
            torch.cuda.synchronize()
            return (lambda t, kw=kwargs: fn(t, **kw)), None
        except Exception as e:  # noqa: BLE001 - any failure means "try the next form"
            errors.append(f"{kwargs}: {type(e).__name__}: {e}")
    return None, "torch.hash_tensor is not callable as expected: " + "; ".join(errors)


def measure(rows, kernel, size, fn, per_call_bytes, counted_bytes, reps=15):
    """Appends (kernel, size, us, GB/s) to rows, or prints why it could not be measured."""
    try:
        us = median_us(fn, per_call_bytes, reps)
        rows.append((kernel, human(size), us, counted_bytes / (us * 1e-6) / 1e9))
    except Exception as e:  # noqa: BLE001 - report and go on with the next measurement
        print(f"torch_hash.py: {kernel} {human(size)} failed: {type(e).__name__}: {e}")
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a sticky CUDA error: nothing more can run
            raise


def main():
    if not torch.cuda.is_available():
        print("torch_hash.py: no CUDA device")
        return
    largest = max(SIZES)
    stride_of = lambda size: (size + 255) // 256 * 256  # noqa: E731
    # Calls rotate over max(1, ROTATION // per_call_bytes) buffers of `stride` bytes each.
    pool_bytes = max(max(1, ROTATION // stride_of(s)) * stride_of(s) for s in SIZES)
    pool = torch.full((pool_bytes,), 0x3C, dtype=torch.uint8, device="cuda")
    dst = torch.empty(largest, dtype=torch.uint8, device="cuda")
    rows = []

    n = min(512 * MIB, largest)
    measure(rows, "torch copy_ (r+w)", n, lambda i: dst[:n].copy_(pool[:n]), 2 * n, 2 * n, reps=9)
    ceiling = rows[0][3] if rows else float("nan")

    fn, why = hash_fn()
    if fn is None:
        print(f"torch_hash.py: {why}")
    for size in SIZES:
        stride = stride_of(size)
        reps = 9 if size >= 256 * MIB else 15

        def piece(i, size=size, stride=stride):
            i %= max(1, pool_bytes // stride)
            return pool[i * stride:i * stride + size]

        measure(rows, "torch copy_ (r+w)", size, lambda i, s=size, p=piece: dst[:s].copy_(p(i)),
                stride, 2 * size, reps)
        if fn is None:
            continue
        measure(rows, "torch.hash_tensor int64 xor", size,
                lambda i, p=piece: fn(p(i).view(torch.int64)), stride, size, reps)
        if size >= 16 * MIB:
            measure(rows, "torch.hash_tensor bf16 xor", size,
                    lambda i, p=piece: fn(p(i).view(torch.bfloat16)), stride, size, 9)

    print(f"\ntorch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'kernel':<34} | {'size':<12} | {'time_us':>10} | {'GB/s':>9} | % of ceiling")
    print("-" * 90)
    for kernel, size, us, gbps in rows:
        print(f"{kernel:<34} | {size:<12} | {us:10.2f} | {gbps:9.1f} | {100 * gbps / ceiling:5.1f}")
    print(f"\nGB/s: bytes read (+ written for copies). Ceiling: the {human(n)} copy, "
          f"{ceiling:.1f} GB/s.")


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001 - a benchmark helper: report, never fail the caller's chain
        traceback.print_exc()
        print("torch_hash.py: stopped early (see the error above)")
    sys.exit(0)
