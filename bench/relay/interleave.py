"""Runs shell commands in interleaved rounds (A B C, A B C, ...) so that load from other
processes on a shared machine hits every variant alike, then prints median and minimum wall
times and each variant's throughput relative to the first (ratio of times; higher is better).
A failed run is counted and left out of the times (srt's proxy drops some transfers).
Usage: interleave.py ROUNDS BYTES name=command [name=command ...]"""
import statistics, subprocess, sys, time

rounds, size = int(sys.argv[1]), int(sys.argv[2])
variants = dict(arg.split("=", 1) for arg in sys.argv[3:])
times = {name: [] for name in variants}
failed = {name: 0 for name in variants}
for _ in range(rounds):
    for name, cmd in variants.items():
        t = time.perf_counter()
        ok = subprocess.run(cmd, shell=True, stderr=subprocess.DEVNULL).returncode == 0
        if ok:
            times[name].append(time.perf_counter() - t)
        else:
            failed[name] += 1
first = next(iter(times.values()))
for name, ts in times.items():
    if not ts:
        print(f"  {name:14} every run failed ({failed[name]})")
        continue
    med, low = statistics.median(ts), min(ts)
    print(f"  {name:14} median {med*1e3:7.1f} ms  min {low*1e3:7.1f} ms  "
          f"{size/med/1e6:6.0f} MB/s (median)  vs {next(iter(times))}: "
          f"{statistics.median(first)/med*100:5.1f} % (medians), {min(first)/low*100:5.1f} % (minimums)"
          + (f"  [{failed[name]} of {rounds} runs failed]" if failed[name] else ""))
