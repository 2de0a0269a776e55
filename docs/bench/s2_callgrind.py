#!/usr/bin/env python3
"""Instructions per contended acquisition, of the server or of one client (docs/benchmarks.md, "The
lean hot path, fourth step" and "sixth step").

Server (the default): starts redis-server under callgrind on port 6401, runs WORKERS `leasehold
__bench-worker s2` processes (1 ms holds) against it for SECONDS, counts the holds they report,
shuts the server down and prints one JSON line with the acquisitions and the server's total
instructions. Client (`client` last): starts a plain redis-server on port 6401 and runs the first
worker under callgrind instead; prints that worker's holds, its instructions and its calls of
`malloc`. Either way, run it for 2 and 6 seconds and divide the difference of the instructions (or
of the mallocs) by the difference of the acquisitions (`acq`; the client's are its own holds), which
takes out the start-up:

    python3 docs/bench/s2_callgrind.py target/release/leasehold 2 4
    python3 docs/bench/s2_callgrind.py target/release/leasehold 6 4
    python3 docs/bench/s2_callgrind.py target/release/leasehold 2 4 fifo-floor   # the floor
    python3 docs/bench/s2_callgrind.py target/release/leasehold 2 4 leasehold client

Needs valgrind (callgrind_annotate for the mallocs) and redis-server on PATH; writes the callgrind
output under /tmp.
"""
import subprocess, sys, time, json, os, re
if len(sys.argv) < 4:
    sys.exit('usage: s2_callgrind.py LEASEHOLD_BINARY SECONDS WORKERS [leasehold|fifo-floor] [client]')
binary, seconds, workers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
lock = sys.argv[4] if len(sys.argv) > 4 else 'leasehold'
client = len(sys.argv) > 5 and sys.argv[5] == 'client'
port = 6401
side = 'client' if client else 'srv'
out = f'/tmp/cg.{side}.{os.path.basename(binary)}.{lock}.{seconds}'
callgrind = ['valgrind', '--tool=callgrind', f'--callgrind-out-file={out}']
server = ['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no']
srv = subprocess.Popen(server if client else callgrind + server,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(200):
    if subprocess.run(['redis-cli','-p',str(port),'ping'],capture_output=True,text=True).stdout.strip()=='PONG': break
    time.sleep(0.2)
def worker(i):
    cmd = [binary,'__bench-worker','s2','--redis-url',f'redis://127.0.0.1:{port}','--name','cg','--contender',str(i),'--hold-us','1000','--ttl-ms','10000','--lock',lock]
    return callgrind + cmd if client and i == 0 else cmd
ws=[]
for i in range(workers):
    ws.append(subprocess.Popen(worker(i),stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True))
for w in ws:
    assert w.stdout.readline().strip()=='ready'
end = time.monotonic_ns()+int(seconds*1e9)
for w in ws:
    w.stdin.write(f'go {end}\n'); w.stdin.flush()
holds=[]
for w in ws:
    rep=json.loads(w.stdout.readline()); holds.append(len(rep['record']['holds']))
    w.stdin.close(); w.wait()
subprocess.run(['redis-cli','-p',str(port),'shutdown','nosave'],capture_output=True)
srv.wait()
text=open(out).read()
total=int((re.search(r'summary: (\d+)',text) or re.search(r'totals: (\d+)',text)).group(1))
if not client:
    print(json.dumps({'binary':binary,'lock':lock,'seconds':seconds,'acq':sum(holds),'ir':total}))
    sys.exit(0)
# The calls of glibc's malloc, summed over its callers.
tree=subprocess.run(['callgrind_annotate','--tree=caller',out],capture_output=True,text=True).stdout
mallocs=None
for block in re.split(r'\n\s*\n', tree):
    if re.search(r'\*\s+\S*malloc\.c:malloc \[', block):
        mallocs=sum(int(m.group(1).replace(',','')) for m in re.finditer(r'<.*\((\d[\d,]*)x\)', block))
        break
print(json.dumps({'binary':binary,'lock':lock,'side':'client','seconds':seconds,'acq':holds[0],'ir':total,'mallocs':mallocs}))
