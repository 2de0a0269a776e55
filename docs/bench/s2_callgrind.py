#!/usr/bin/env python3
"""Redis instructions per contended acquisition (docs/benchmarks.md, "The lean hot path, fourth step").

Starts redis-server under callgrind on port 6401, runs WORKERS `leasehold __bench-worker s2`
processes (1 ms holds) against it for SECONDS, counts the holds they report, shuts the server down
and prints one JSON line with the acquisitions and the server's total instructions. Run it for 2 and
6 seconds and divide the difference of the instructions by the difference of the acquisitions:

    python3 docs/bench/s2_callgrind.py target/release/leasehold 2 4
    python3 docs/bench/s2_callgrind.py target/release/leasehold 6 4
    python3 docs/bench/s2_callgrind.py target/release/leasehold 2 4 fifo-floor   # the floor

Needs valgrind and redis-server on PATH; writes the callgrind output under /tmp.
"""
import subprocess, sys, time, json, os, re
if len(sys.argv) < 4:
    sys.exit('usage: s2_callgrind.py LEASEHOLD_BINARY SECONDS WORKERS [leasehold|fifo-floor]')
binary, seconds, workers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
lock = sys.argv[4] if len(sys.argv) > 4 else 'leasehold'
port = 6401
out = f'/tmp/cg.srv.{os.path.basename(binary)}.{lock}.{seconds}'
srv = subprocess.Popen(['valgrind','--tool=callgrind',f'--callgrind-out-file={out}','redis-server','--port',str(port),'--save','','--appendonly','no'],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
for _ in range(200):
    if subprocess.run(['redis-cli','-p',str(port),'ping'],capture_output=True,text=True).stdout.strip()=='PONG': break
    time.sleep(0.2)
ws=[]
for i in range(workers):
    ws.append(subprocess.Popen([binary,'__bench-worker','s2','--redis-url',f'redis://127.0.0.1:{port}','--name','cg','--contender',str(i),'--hold-us','1000','--ttl-ms','10000','--lock',lock],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True))
for w in ws:
    assert w.stdout.readline().strip()=='ready'
end = time.monotonic_ns()+int(seconds*1e9)
for w in ws:
    w.stdin.write(f'go {end}\n'); w.stdin.flush()
acq=0
for w in ws:
    rep=json.loads(w.stdout.readline()); acq+=len(rep['record']['holds'])
    w.stdin.close(); w.wait()
subprocess.run(['redis-cli','-p',str(port),'shutdown','nosave'],capture_output=True)
srv.wait()
total=int(re.search(r'summary: (\d+)',open(out).read()).group(1)) if 'summary' in open(out).read() else None
if total is None:
    total=int(re.search(r'totals: (\d+)',open(out).read()).group(1))
print(json.dumps({'binary':binary,'lock':lock,'seconds':seconds,'acq':acq,'ir':total}))
