#!/usr/bin/env bash
# Load progress on CUDA (issue 22), in one call of about 60 s on the GPU machine: a 1B
# bf16 model made with keel make-model, dropped from the page cache, then loaded by
# `keel serve --device cuda` while /api/status is polled every 100 ms. Checks that the
# phases come in order ("reading weights" counted in bytes up to the files' size, then
# "uploading to device"), that progress is null once ready, that the log has a few
# progress lines, and that a request is then served. Writes $OUT/progress.json (every
# poll), $OUT/serve.log and a verdict line per check.
#   here:  KEEL_DEVCARRY=.devcarry scripts/device/package.sh build keel
#   there: (carry .devcarry) bash scripts/device/progress_h200.sh [budget_s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-progress}
budget=${1:-90}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# KEEL_PROGRESS_DEVICE=cpu KEEL_PROGRESS_SHAPE=tiny: a dry run of this script on the CPU.
device=${KEEL_PROGRESS_DEVICE:-cuda}
shape=${KEEL_PROGRESS_SHAPE:-1b}
model=/tmp/keel-progress-models/llama-$shape
if [ ! -f "$model/config.json" ]; then
  stamp "make-model $shape (bf16)"
  timeout "$(cap 60)" "$B/keel" make-model --shape "$shape" --dtype bf16 --out "$model" || exit 1
fi
# Cold files, so that "reading weights" reads the disk (clean pages can be dropped).
sync
python3 - "$model" <<'PY'
import os, sys
for f in os.listdir(sys.argv[1]):
    fd = os.open(os.path.join(sys.argv[1], f), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
stamp "keel serve --device $device, load while polling /api/status"
"$B/keel" serve --device "$device" --port 0 --cache-dir /tmp/keel-progress-cache "$model" \
  >"$out/serve.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 1 300); do
  url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve.log" | head -1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { tail -20 "$out/serve.log"; exit 1; }
timeout "$(cap 60)" python3 - "$url" "$model" "$out" "$device" <<'PY'
import json, os, sys, threading, time, urllib.request
url, model, out, device = sys.argv[1:5]
second = 'preparing weights' if device == 'cpu' else 'uploading to device'
def get(p):
    return json.load(urllib.request.urlopen(url + p, timeout=10))
def post(p, body):
    r = urllib.request.Request(url + p, json.dumps(body).encode(), {'content-type': 'application/json'})
    return json.load(urllib.request.urlopen(r, timeout=120))
mid = get('/api/status')['models'][0]['id']
weights = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith('.safetensors'))
t = threading.Thread(target=lambda: post(f'/v1/models/{mid}/load', {}))
t0 = time.time(); t.start()
polls = []
while True:
    m = get('/api/status')['models'][0]
    polls.append({'t': round(time.time() - t0, 3), 'state': m['state'], 'progress': m['progress']})
    if m['state'] == 'ready' or time.time() - t0 > 50: break
    time.sleep(0.1)
t.join()
json.dump(polls, open(os.path.join(out, 'progress.json'), 'w'), indent=1)
phases = [p['progress']['phase'] for p in polls if p['progress']]
order = [x for i, x in enumerate(phases) if i == 0 or phases[i - 1] != x]
print('phases seen, in order:', order)
for p in polls:
    if p['progress']: print(p['t'], p['state'], p['progress']['phase'], p['progress']['done'], p['progress']['total'], p['progress']['fraction'])
def check(ok, what): print(('PASS ' if ok else 'FAIL ') + what)
reading = [p['progress'] for p in polls if p['progress'] and p['progress']['phase'] == 'reading weights']
check(polls[-1]['state'] == 'ready' and polls[-1]['progress'] is None, 'ready, and no progress once ready')
check(len(reading) >= 1 and all(r['total'] == weights and r['unit'] == 'bytes' for r in reading), f'reading weights counted in bytes of {weights}')
check(all(b['done'] >= a['done'] for a, b in zip(reading, reading[1:])), 'reading weights never goes back')
check(second in order and 'reading weights' in order and order.index(second) > order.index('reading weights'), f'{second} after reading weights')
log = open(os.path.join(out, 'serve.log')).read().splitlines()
lines = [l for l in log if f"loading '{mid}': " in l]
print('\n'.join(lines))
check(2 <= len(lines) <= 30, f'{len(lines)} progress lines in the log')
r = post('/v1/completions', {'model': mid, 'prompt': 'Hello', 'max_tokens': 8})
check(r['usage']['completion_tokens'] > 0, 'a request is served after the load')
PY
echo "poller exit $?"
stamp "done"
