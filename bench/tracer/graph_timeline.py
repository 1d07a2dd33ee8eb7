#!/usr/bin/env python3
"""Where a replayed CUDA graph's time goes in a recorded run (decode-graph): per graph launch, the
GPU span from its first kernel's start to its last kernel's end, the time some program kernel was
running, and the gaps between one kernel's end and the next one's start, split by whether the
kernel before the gap is a GEMM's last kernel (its parent is a GEMM). The tracer's digest kernels
are not in the trace, but a captured GEMM's digest node that lies on the graph's critical path
shows up as a longer gap after that GEMM. Also the period from one launch's first kernel to the
next one's (the loop's time per token, host included), how many of the program's kernels run
between one GEMM and the next (GEMMs with none between could share a digest node), and the
trace's graph counters.

usage: graph_timeline.py LABEL RUN_DIR     (reads every *.dtrace in RUN_DIR; Python's sqlite3 only)
"""
import collections
import glob
import os
import sqlite3
import statistics
import sys

from gpu_gaps import busy_time

GEMM = 5


def launches(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT e.correlation_id, e.gpu_start_ns, e.gpu_end_ns, e.parent_seq, p.kind, s.text "
        "FROM events e LEFT JOIN events p ON p.seq = e.parent_seq LEFT JOIN strings s ON s.id = e.name "
        "WHERE e.kind = 1 AND e.graph_id IS NOT NULL AND e.gpu_start_ns IS NOT NULL "
        "AND e.gpu_end_ns IS NOT NULL ORDER BY e.gpu_start_ns").fetchall()
    stats = dict(db.execute("SELECT key, value FROM stats WHERE key LIKE 'graph%' "
                            "OR key LIKE 'fingerprints%' OR key LIKE 'tracer_graph%'").fetchall())
    db.close()
    by_launch = collections.defaultdict(list)
    for corr, start, end, parent, parent_kind, name in rows:
        by_launch[corr].append((start, end, parent, parent_kind == GEMM, name or "?"))
    return list(by_launch.values()), stats


def measure(kernels):
    kernels.sort()
    span = max(k[1] for k in kernels) - kernels[0][0]
    busy = busy_time([(k[0], k[1]) for k in kernels])
    after_gemm, after_other = [], []
    for k, nxt in zip(kernels, kernels[1:]):
        gap = max(0, nxt[0] - k[1])
        if k[3] and nxt[2] != k[2]:
            after_gemm.append(gap)  # after a GEMM's last kernel
        else:
            after_other.append(gap)
    return span, busy, after_gemm, after_other


def between_gemms(kernels):
    """The program's kernels between one GEMM's last kernel and the next GEMM's first, per pair."""
    counts, names, since, last_parent = [], [], None, None
    for k in kernels:  # sorted by start
        if k[3]:
            if since is not None and k[2] != last_parent:
                counts.append(len(since))
                names.append(since)
            if k[2] != last_parent:
                since = []
            last_parent = k[2]
        elif since is not None:
            since.append(k[4])
    return counts, names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    label, run = sys.argv[1], sys.argv[2]
    for path in sorted(glob.glob(os.path.join(run, "*.dtrace"))):
        groups, stats = launches(path)
        if not groups:
            print(f"{label}: no kernels replayed from a graph")
            continue
        size = statistics.mode(len(g) for g in groups)  # the decode step's graph
        groups = [g for g in groups if len(g) == size]
        firsts = sorted(min(k[0] for k in g) for g in groups)
        periods = [b - a for a, b in zip(firsts, firsts[1:])]
        m = [measure(g) for g in groups]
        med = lambda xs: statistics.median(xs) / 1000 if xs else float("nan")  # noqa: E731
        gemm_gaps = [x for _, _, a, _ in m for x in a]
        other_gaps = [x for _, _, _, o in m for x in o]
        print(f"{label}: {len(groups)} launches of {size} kernels, {len({k[2] for k in groups[0] if k[3]})} GEMMs each; per launch (medians, us): "
              f"period {med(periods):.1f}, GPU span {med([x[0] for x in m]):.1f}, "
              f"kernels running {med([x[1] for x in m]):.1f}, "
              f"gaps after GEMMs {med([sum(x[2]) for x in m]):.1f} (each {med(gemm_gaps):.2f}), "
              f"other gaps {med([sum(x[3]) for x in m]):.1f} (each {med(other_gaps):.2f})")
        counts, names = between_gemms(groups[0])
        hist = collections.Counter(counts)
        print(f"{label}: program kernels between consecutive GEMMs (kernels: pairs): "
              + ", ".join(f"{n}: {hist[n]}" for n in sorted(hist)))
        short = collections.Counter(" | ".join(x[:40] for x in b) for b in names if len(b) <= 2)
        for text, times in sorted(short.items()):
            print(f"{label}:   {times}x between two GEMMs: {text or '(none)'}")
        print(f"{label}: stats " + " ".join(f"{k}={v}" for k, v in sorted(stats.items())))


if __name__ == "__main__":
    main()
