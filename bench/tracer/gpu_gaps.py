#!/usr/bin/env python3
"""Where the GPU's time goes in a recorded run (bench_overhead --diag): how busy the GPU was
between the first and the last kernel, and how long it waited after a GEMM's kernels against after
any other kernel. The tracer's own digest kernels are not in the trace, but they run right after a
GEMM's kernels on its stream: a longer wait there than elsewhere is their GPU time.

usage: gpu_gaps.py LABEL RUN_DIR     (reads every *.dtrace in RUN_DIR; Python's sqlite3 only)
"""
import glob
import os
import sqlite3
import statistics
import sys


def kernels(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT e.stream, e.gpu_start_ns, e.gpu_end_ns, p.kind FROM events e "
        "LEFT JOIN events p ON p.seq = e.parent_seq "
        "WHERE e.kind = 1 AND e.gpu_start_ns IS NOT NULL AND e.gpu_end_ns IS NOT NULL "
        "ORDER BY e.gpu_start_ns").fetchall()
    db.close()
    return rows


def busy_time(intervals):
    """How long some interval of (start, end), sorted by start, was running: their union's length."""
    busy, cur_s, cur_e = 0, intervals[0][0], intervals[0][1]
    for s, e in intervals[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return busy + cur_e - cur_s


def report(label, rows):
    if not rows:
        print(f"{label}: gpu: no kernel records with GPU times")
        return
    busy = busy_time([(s, e) for _, s, e, _ in rows])
    span = max(r[2] for r in rows) - rows[0][1]
    # The wait after a kernel until the next kernel of its stream starts.
    last = {}
    after_gemm, after_other = [], []
    for stream, s, e, parent_kind in rows:
        if stream in last:
            prev_end, prev_gemm = last[stream]
            gap = s - prev_end
            if 0 <= gap < 1_000_000:  # a loop boundary (synchronisation, Python) is not a wait
                (after_gemm if prev_gemm else after_other).append(gap)
        last[stream] = (e, parent_kind == 5)

    def med(v):
        return f"{statistics.median(v) / 1e3:.2f} us (n {len(v)})" if v else "-"

    print(f"{label}: gpu: {len(rows)} kernels, busy {busy / 1e6:.1f} of {span / 1e6:.1f} ms "
          f"({100 * busy / max(span, 1):.0f}%); median wait after a GEMM's kernel {med(after_gemm)}, "
          f"after any other kernel {med(after_other)}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    label, run = sys.argv[1], sys.argv[2]
    rows = []
    for path in sorted(glob.glob(os.path.join(run, "*.dtrace"))):
        try:
            rows += kernels(path)
        except sqlite3.Error as e:
            print(f"{label}: gpu: cannot read {path}: {e}")
    rows.sort(key=lambda r: r[1])
    report(label, rows)


if __name__ == "__main__":
    main()
