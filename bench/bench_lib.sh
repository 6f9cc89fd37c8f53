# Shell helpers shared by the benchmark scripts (source it).
#
# On 2 cores anything else running (a build, tests) distorts the timings, a lot: with two
# OpenMP threads on two cores, a third busy process stalls every barrier. wait_idle waits (up
# to RT_BENCH_IDLE_WAIT seconds, default 300) for a second in which the CPUs are under 3% busy;
# each benchmark program also reports how much CPU others took while it ran (others_cpu).

cpu_jiffies() {  # busy total, from /proc/stat's first line
  local _cpu u n s i w q sq st _rest
  read -r _cpu u n s i w q sq st _rest </proc/stat
  echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st))"
}

wait_idle() {
  local start=$SECONDS b0 t0 b1 t1 pct said=-1000
  while :; do
    read -r b0 t0 < <(cpu_jiffies)
    sleep 1
    read -r b1 t1 < <(cpu_jiffies)
    pct=$((100 * (b1 - b0) / (t1 > t0 ? t1 - t0 : 1)))
    ((pct < 3)) && return 0
    if ((SECONDS - start >= ${RT_BENCH_IDLE_WAIT:-300})); then
      echo "WARNING: the machine is still ${pct}% busy; running anyway, the timings will be distorted" >&2
      return 0
    fi
    if ((SECONDS - said >= 30)); then
      echo "waiting for the machine to go idle (${pct}% busy; RT_BENCH_IDLE_WAIT=0 runs at once)..." >&2
      said=$SECONDS
    fi
  done
}
