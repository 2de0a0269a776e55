#!/usr/bin/env python3
"""`leasehold cron` at scale (docs/scheduled-jobs.md, "Scale"): DAEMONS daemons over one private
redis-server run JOBS jobs on a minute schedule (`* * * * *`, jitter 20 s) for MINUTES minutes.
Each run appends `JOB SLOT` to one file; at the end every slot of every job that came due while
the daemons ran must appear exactly once.

Measured, per daemon: CPU while idle (from /proc/PID/stat, over the seconds 35 to 55 of each
minute, after the slot's runs, jittered up to 20 s, have ended), the largest RSS (VmHWM), and the
store requests per job per slot (the server's `INFO commandstats`: the calls of the commands a
client sends, a script call counting one, divided by the slots run): overall (start-up included:
the catch-up's history reads) and in the steady state (between the first and the last idle
window). Prints one JSON line.

    python3 docs/bench/cron_idle.py target/release/leasehold 1 1000 3
    python3 docs/bench/cron_idle.py target/release/leasehold 3 100 10

Needs redis-server on PATH; uses port 6402 and a directory under /tmp.
"""
import json, os, re, signal, subprocess, sys, tempfile, time

if len(sys.argv) < 5:
    sys.exit('usage: cron_idle.py LEASEHOLD_BINARY DAEMONS JOBS MINUTES')
binary, daemons, jobs, minutes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
port = 6402
work = tempfile.mkdtemp(prefix='leasehold-cron-bench-')
out = os.path.join(work, 'runs')
jobs_file = os.path.join(work, 'jobs.toml')
tick = os.sysconf('SC_CLK_TCK')

with open(jobs_file, 'w') as f:
    f.write('[defaults]\njitter = "20s"\nttl = "10s"\n')
    for i in range(jobs):
        f.write(f'\n[job.j{i:04}]\nschedule = "* * * * *"\n'
                f'shell = "echo $LEASEHOLD_JOB $LEASEHOLD_SLOT >> {out}"\n')

redis = subprocess.Popen(['redis-server', '--port', str(port), '--bind', '127.0.0.1',
                          '--save', '', '--appendonly', 'no', '--dir', work],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
procs = []
try:
    time.sleep(0.5)
    cli = ['redis-cli', '-p', str(port)]
    subprocess.run(cli + ['CONFIG', 'RESETSTAT'], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, LEASEHOLD_STORE=f'redis://127.0.0.1:{port}', RUST_LOG='error')
    for d in range(daemons):
        log = open(os.path.join(work, f'daemon{d}.log'), 'w')
        procs.append(subprocess.Popen([binary, '-q', 'cron', '--holder', f'd{d}', jobs_file],
                                      env=env, stdout=subprocess.DEVNULL, stderr=log))
    started = time.time()

    def cpu(p):
        with open(f'/proc/{p.pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    def hwm(p):
        with open(f'/proc/{p.pid}/status') as f:
            return int(re.search(r'VmHWM:\s+(\d+)', f.read()).group(1)) / 1024

    # Requests: what a client sends (a script call is one); commands: every command the server ran,
    # those inside the scripts included.
    REQUESTS = ('evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'time', 'info', 'scan', 'ping', 'hello',
                'client', 'select', 'auth', 'blpop', 'wait', 'script')

    def commands_now(requests_only=True):
        stats = subprocess.run(cli + ['INFO', 'commandstats'], capture_output=True, text=True).stdout
        total = 0
        for name, calls in re.findall(r'cmdstat_([a-z_|]+):calls=(\d+)', stats):
            if name.startswith('config') or name == 'commandstats':
                continue
            if not requests_only or name.split('|')[0] in REQUESTS:
                total += int(calls)
        return total

    idle_cpu, idle_wall = [0.0] * daemons, 0.0
    # (time, commands so far) at each idle window: the steady state is between the first and last.
    marks = []
    end = started + 60 * minutes + 2
    while time.time() < end:
        now = time.time()
        sec = now % 60
        if 35 <= sec < 36 and now > started + 40:
            marks.append((now, commands_now()))
            before = [cpu(p) for p in procs]
            t0 = time.time()
            time.sleep(20)
            idle_wall += time.time() - t0
            for i, p in enumerate(procs):
                idle_cpu[i] += cpu(p) - before[i]
        else:
            time.sleep(0.5)
    rss = [hwm(p) for p in procs]
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=60)
    commands = commands_now(requests_only=False)
    requests = commands_now()
    lines = open(out).read().split() if os.path.exists(out) else []
    runs = {}
    for j, s in zip(lines[0::2], lines[1::2]):
        runs[(j, s)] = runs.get((j, s), 0) + 1
    slots = sorted({int(s) for (_, s) in runs})
    # Slots wholly inside the run (the first and last minute may be cut by start and stop).
    inner = [s for s in slots if s > started + 1 and s < end - 62]
    twice = sum(1 for (j, s), n in runs.items() if n > 1)
    missing = sum(1 for s in inner for i in range(jobs) if (f'j{i:04}', str(s)) not in runs)
    steady = None
    if len(marks) >= 2:
        (t0, c0), (t1, c1) = marks[0], marks[-1]
        between = sum(n for (_, sl), n in runs.items() if t0 < int(sl) < t1)
        steady = round((c1 - c0) / max(1, between), 2)
    print(json.dumps({
        'daemons': daemons, 'jobs': jobs, 'minutes': minutes,
        'runs': sum(runs.values()), 'slots_checked': len(inner) * jobs,
        'slots_run_twice': twice, 'slots_missing': missing,
        'idle_cpu_percent_per_daemon': [round(100 * c / idle_wall, 3) for c in idle_cpu] if idle_wall else None,
        'max_rss_mb_per_daemon': [round(r, 1) for r in rss],
        'store_requests': requests, 'store_commands_run_in_scripts_included': commands,
        'store_requests_per_job_per_slot_overall': round(requests / max(1, sum(runs.values())), 2),
        'store_requests_per_job_per_slot_steady': steady,
    }))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    redis.terminate()
    redis.wait()
