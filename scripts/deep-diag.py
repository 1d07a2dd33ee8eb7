import sqlite3, sys, glob
for run in sys.argv[1:]:
    for f in glob.glob(run + "/proc-*.dtrace"):
        db = sqlite3.connect(f)
        print(f)
        for row in db.execute("SELECT e.seq, substr(s.text,1,40), (SELECT count(*) FROM operands o WHERE o.seq=e.seq), (SELECT count(*) FROM launch_params p WHERE p.seq=e.seq) FROM events e LEFT JOIN strings s ON s.id=e.name WHERE e.kind=1"):
            print("  ", row)
        for row in db.execute("SELECT key, value FROM stats WHERE key LIKE 'deep%' OR key LIKE 'finger%' OR key LIKE 'tracer_%'"):
            print("  ", row)
