#!/usr/bin/env python3
# The fixed overhead of `revl exec -- true`, two builds interleaved in one run:
#   python3 scripts/exec-overhead-ab.py OLD_REVL NEW_REVL [RUNS]
# (docs/performance.md, "The sandbox that holds").
import subprocess, time, statistics, os, json, sys, tempfile
bins = {"v2": sys.argv[1], "v3": sys.argv[2]}
N = int(sys.argv[3]) if len(sys.argv) > 3 else 40
base = tempfile.mkdtemp(prefix="revl-ab-", dir="/var/tmp")
sess = {}
for k, b in bins.items():
    ws = os.path.join(base, k + "-ws"); os.makedirs(ws)
    st = os.path.join(base, k + "-store")
    out = subprocess.run([b, "--store", st, "--json", "new", "--workspace", ws], capture_output=True, check=True)
    sess[k] = (b, st, json.loads(out.stdout)["session"])
def t(cmd):
    s = time.perf_counter(); subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True); return time.perf_counter() - s
res = {"plain true": [], "v2 exec -- true": [], "v3 exec -- true": []}
for i in range(N):
    res["plain true"].append(t(["true"]))
    for k in ("v2", "v3"):
        b, st, sid = sess[k]
        res[f"{k} exec -- true"].append(t([b, "--store", st, "--json", "exec", sid, "--", "true"]))
for k, v in res.items():
    v.sort()
    print(f"{k:20s} min {v[0]*1000:7.2f} median {statistics.median(v)*1000:7.2f} ms  p10 {v[len(v)//10]*1000:7.2f}  p90 {v[9*len(v)//10]*1000:7.2f}")
