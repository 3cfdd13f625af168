#!/bin/bash
# usage: [TMPBASE=/dev/shm] wrk.sh FENCE_BINARY [rounds] [secs]   (TMPBASE: where the data dir goes)
# Starts fence serve (embedded bolt store, fresh temp dir, free port), then runs wrk
# alternately on /healthz and on acquire+release pairs, printing req/s and the
# server's CPU microseconds per request (utime+stime from /proc) for each run.
set -e
bin=$1; rounds=${2:-3}; secs=${3:-5}
lua=$(dirname "$0")/pair.lua
dir=$(mktemp -d ${TMPBASE:+-p $TMPBASE}); port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
$bin serve --listen 127.0.0.1:$port --data $dir --log-level error 2>$dir/log &
pid=$!
trap 'kill $pid; wait $pid 2>/dev/null; rm -rf $dir' EXIT
for i in $(seq 50); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
run() { # name, wrk args...
  local name=$1; shift
  local c0=$(cpu)
  local out=$(wrk -t2 -c16 -d${secs}s "$@")
  local c1=$(cpu)
  local reqs=$(echo "$out" | awk '/requests in/{print $1}')
  local rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  local non2xx=$(echo "$out" | awk '/Non-2xx/{print $NF}')
  echo "$name req/s=$rps requests=$reqs non2xx=${non2xx:-0} server-cpu-us/req=$(python3 -c "print(round(($c1-$c0)/$tck*1e6/$reqs,2))")"
}
for r in $(seq $rounds); do
  run healthz http://127.0.0.1:$port/healthz
  run lock -s $lua http://127.0.0.1:$port
done
