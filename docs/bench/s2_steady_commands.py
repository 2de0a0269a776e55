#!/usr/bin/env python3
"""Redis commands per hand-over in the middle of a contended run (docs/benchmarks.md, "The eighth
look"). Starts a private redis-server on port 6402, runs WORKERS `leasehold __bench-worker s2`
processes (1 ms holds) against it for SECONDS, reads `INFO commandstats` at 1/5 and 4/5 of the run
and prints one JSON line: the hand-overs in between (`ZPOPMIN` calls for leasehold, `LPOP` for the
floor) and each command's calls per hand-over. With `monitor` last it also records `MONITOR` for
the whole run (which slows the server) and counts the hand-overs whose record was written a second
time (a `SET` of the fence record without `GET`: release.lua raising a fence the releaser's clock
estimate did not clear).

    python3 docs/bench/s2_steady_commands.py target/release/leasehold 128 10
    python3 docs/bench/s2_steady_commands.py target/release/leasehold 16 10
    python3 docs/bench/s2_steady_commands.py target/release/leasehold 128 4 leasehold monitor

Needs redis-server and redis-cli on PATH.
"""
import json, re, subprocess, sys, tempfile, time

if len(sys.argv) < 4:
    sys.exit('usage: s2_steady_commands.py LEASEHOLD_BINARY WORKERS SECONDS [leasehold|fifo-floor] [monitor]')
binary, workers, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lock = sys.argv[4] if len(sys.argv) > 4 else 'leasehold'
monitor = len(sys.argv) > 5 and sys.argv[5] == 'monitor'
port = 6402
cli = ['redis-cli', '-p', str(port)]
srv = subprocess.Popen(['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no'],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    if subprocess.run(cli + ['ping'], capture_output=True, text=True).stdout.strip() == 'PONG':
        break
    time.sleep(0.1)
mon_out = tempfile.TemporaryFile('w+') if monitor else None
mon = subprocess.Popen(cli + ['monitor'], stdout=mon_out, text=True) if monitor else None
ws = [subprocess.Popen([binary, '__bench-worker', 's2', '--redis-url', f'redis://127.0.0.1:{port}',
                        '--name', 'steady', '--contender', str(i), '--hold-us', '1000',
                        '--ttl-ms', '10000', '--lock', lock],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
      for i in range(workers)]
for w in ws:
    assert w.stdout.readline().strip() == 'ready'


def stats():
    out = subprocess.run(cli + ['info', 'commandstats'], capture_output=True, text=True).stdout
    calls = {}
    for line in out.splitlines():
        if line.startswith('cmdstat_'):
            name, fields = line[len('cmdstat_'):].split(':', 1)
            calls[name] = int(fields.split(',')[0].split('=')[1])
    return calls


end = time.monotonic_ns() + int(secs * 1e9)
for w in ws:
    w.stdin.write(f'go {end}\n')
    w.stdin.flush()
time.sleep(secs * 0.2)
before = stats()
time.sleep(secs * 0.6)
after = stats()
holds = 0
for w in ws:
    holds += len(json.loads(w.stdout.readline())['record']['holds'])
    w.stdin.close()
    w.wait()
if mon:
    mon.terminate()
    mon.wait()
subprocess.run(cli + ['shutdown', 'nosave'], capture_output=True)
srv.wait()
harness = ('info', 'ping', 'hello', 'client|setinfo', 'monitor')
delta = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0) and k not in harness}
handovers = delta.get('zpopmin' if lock == 'leasehold' else 'lpop', 0)
report = {'lock': lock, 'workers': workers, 'seconds': secs, 'holds': holds, 'handovers_mid': handovers,
          'per_handover': {k: round(v / max(handovers, 1), 3) for k, v in sorted(delta.items())}}
if mon:
    mon_out.seek(0)
    text = mon_out.read()
    report['monitor'] = {
        'handovers': text.count('"ZPOPMIN"'),
        'record_written_again': len(re.findall(r'\] "SET" "\{[^"]*\}:fence" "\d+:q:[^"]*" "PX" "\d+"\n', text)),
    }
print(json.dumps(report))
