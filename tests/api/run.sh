#!/usr/bin/env bash
# Black-box API tests: starts real `keel serve` processes on free ports and runs the
# official OpenAI and Anthropic SDKs (tests/npm/node_modules) under node's test runner.
#   bash tests/api/run.sh [path/to/keel]
# Servers: MAIN serves the test model (and a second id for load/unload) with an API
# key, a small body limit and fault injection (helpers.mjs slowEngine: tests that need a
# generation still running make it slow on purpose instead of hoping it is); LRU serves three models under a budget that holds two.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
KEEL="$(realpath "${1:-$root/build/keel}")"
NODE_MODULES="$root/tests/npm/node_modules"
[ -x "$KEEL" ] || { echo "api tests: no keel binary at $KEEL" >&2; exit 1; }
[ -d "$NODE_MODULES/openai" ] || { echo "api tests: run scripts/setup (npm SDKs missing)" >&2; exit 1; }

work="$(mktemp -d /tmp/keel-api.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# The test model: a tiny random model from `keel make-model` when that subcommand
# works (with the default model's tokenizer), else the built-in default model.
model_src="$root/models/default"
mkdir -p "$work/models"
if "$KEEL" make-model --arch llama --shape tiny --dtype f32 --format safetensors \
     --tokenizer "$model_src" --seed 7 --out "$work/models/tiny" >"$work/make-model.log" 2>&1; then
  test_model="$work/models/tiny"
else
  cp -r "$model_src" "$work/models/tiny"
  test_model="$work/models/tiny"
fi
# Other ids for load/unload and LRU: the same files under other names.
cp -r "$test_model" "$work/models/spare"
mkdir -p "$work/lru"
for n in lru-a lru-b lru-c; do cp -r "$test_model" "$work/lru/$n"; done

# Runs in this shell (not in $(...)), so that its pid lands in pids for the cleanup;
# the URL goes to $work/NAME.url.
start_server() {  # name, args...
  local name="$1"; shift
  "$KEEL" serve --port 0 --threads 1 --workers 8 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  local pid=$!
  for _ in $(seq 1 200); do
    if grep -q "listening on" "$work/$name.log"; then
      sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/$name.log" | head -1 >"$work/$name.url"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "api tests: $name server did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

export KEEL_API_KEY_FOR_TESTS="test-key-$$"
start_server main "$test_model" "$work/models/spare" --api-key "$KEEL_API_KEY_FOR_TESTS" \
  --body-limit 1M --kv-blocks 256 --sse-keepalive 0.5 --heartbeat-timeout 2 --pin tiny \
  --enable-fault-injection
export KEEL_URL="$(cat "$work/main.url")"
# The agent server (claude_code tests): a one-layer scripted model that answers
# "Hello from keel." and ends its turn, with a 64k context (Claude Code's prompt is
# ~15k tokens here, and it asks for 32,000 new tokens, which keel clamps).
"$KEEL" make-model --arch llama --shape tiny --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
  --layers 1 --dtype f32 --format safetensors --tokenizer "$model_src" --seed 7 \
  --out "$work/agent/agent" >"$work/make-agent.log" 2>&1
node -e 'const f=process.argv[1], fs=require("fs"); const c=JSON.parse(fs.readFileSync(f));
  c.max_position_embeddings=65536; fs.writeFileSync(f, JSON.stringify(c, null, 2))' "$work/agent/agent/config.json"
# "thinker": the same, with a Qwen3-style template that opens <think> unless
# enable_thinking is false, replying "Plan first</think>Hello from keel." (reasoning tests).
cp -r "$work/agent/agent" "$work/agent/thinker"
node -e 'const f=process.argv[1], fs=require("fs"); const c=JSON.parse(fs.readFileSync(f));
  c.chat_template="{{ bos_token }}{% for m in messages %}{{ \"<|\" + m.role + \"|>\\n\" + m.content + \"<|eos|>\\n\" }}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";
  fs.writeFileSync(f, JSON.stringify(c, null, 2))' "$work/agent/thinker/tokenizer_config.json"
eos_id=$(node -e 'const c=require(process.argv[1]); console.log([].concat(c.eos_token_id)[0])' "$work/agent/agent/config.json")
script_reply() {  # model dir, reply text
  node "$here/scripted_model.mjs" "$1" "$eos_id" "$("$KEEL" tokenize --model "$1" "$2" | tr -d '[] ')"
}
script_reply "$work/agent/agent" "Hello from keel."
script_reply "$work/agent/thinker" "Plan first</think>Hello from keel."
# "agent-tools": the same as "agent", but keel forces its first reply of a turn to call
# Claude Code's Bash tool with a harmless command (--force-tool-call, tests only), so
# the client runs it and sends the result back (claude_code_tools tests).
cp -r "$work/agent/agent" "$work/agent/agent-tools"
start_server agent "$work/agent/agent" "$work/agent/thinker" "$work/agent/agent-tools" \
  --api-key "$KEEL_API_KEY_FOR_TESTS" --kv-blocks 4096 --log-level debug --enable-fault-injection \
  --force-tool-call 'agent-tools:Bash={"command":"echo keel-tool-ran","description":"Print a marker"}'
export KEEL_AGENT_URL="$(cat "$work/agent.url")"
export KEEL_AGENT_LOG="$work/agent.log"
export KEEL_AGENT_MODEL="agent"
# A loaded model takes its weights plus 64 KV blocks (f32, 16 tokens each); the budget
# holds two loaded models and half of a third's weights, so the third evicts one.
weights=$(du -cb "$test_model"/*.safetensors | tail -1 | cut -f1)
kv=$(node -e 'const c=require(process.argv[1]); const hd=c.head_dim ?? c.hidden_size/c.num_attention_heads;
  console.log(64*16*c.num_hidden_layers*2*(c.num_key_value_heads ?? c.num_attention_heads)*hd*4)' "$test_model/config.json")
budget=$(( 2 * (weights + kv) + weights / 2 ))
# A model too big for the whole budget (a sparse extra weights file; never loaded).
cp -r "$test_model" "$work/lru/huge"
truncate -s $(( budget * 2 )) "$work/lru/huge/zz-padding.safetensors"
# The LRU server takes its settings from a config file and the environment.
printf 'model-dir = "%s"\nkv-blocks = 64\n' "$work/lru" >"$work/lru.toml"
KEEL_MEMORY_BUDGET="$budget" start_server lru --config "$work/lru.toml"
export KEEL_LRU_URL="$(cat "$work/lru.url")"
export KEEL_BIN="$KEEL"
export KEEL_TEST_MODEL="tiny"
export KEEL_TEST_MODEL_PATH="$test_model"
export NODE_PATH="$NODE_MODULES"

status=0
# KEEL_API_TESTS narrows the run to some files (a space-separated list of globs under
# tests/api, e.g. "responses*"); every file by default.
files=()
set -f
read -ra globs <<<"${KEEL_API_TESTS:-*}"
set +f
for g in "${globs[@]}"; do files+=("$here"/$g.test.mjs); done
# KEEL_API_PART=K/N keeps the K-th of N parts of those files (K in 1..N), so that ctest
# runs the suite as N entries side by side, each with servers of its own. The parts are
# balanced by the seconds each file took alone (durations.txt beside this script, two
# cores; 10 for a file it does not list): longest first, each to the lightest part.
if [ -n "${KEEL_API_PART:-}" ]; then
  part=${KEEL_API_PART%/*} parts=${KEEL_API_PART#*/}
  [[ $part =~ ^[0-9]+$ && $parts =~ ^[0-9]+$ && $part -ge 1 && $part -le $parts ]] ||
    { echo "api tests: KEEL_API_PART=$KEEL_API_PART is not K/N with 1 <= K <= N" >&2; exit 1; }
  mapfile -t files < <(printf '%s\n' "${files[@]}" | awk -v part="$part" -v parts="$parts" '
    FNR == NR { secs[$1] = $2; next }
    { n = $0; sub(/.*\//, "", n); sub(/\.test\.mjs$/, "", n)
      w[FNR] = (n in secs) ? secs[n] : 10; f[FNR] = $0; count = FNR }
    END {
      for (i = 1; i <= count; i++) order[i] = i
      for (i = 1; i <= count; i++)  # insertion sort, heaviest first, then by name
        for (j = i; j > 1 && (w[order[j]] > w[order[j-1]] ||
             (w[order[j]] == w[order[j-1]] && f[order[j]] < f[order[j-1]])); j--) {
          t = order[j]; order[j] = order[j-1]; order[j-1] = t }
      for (p = 1; p <= parts; p++) load[p] = 0
      for (i = 1; i <= count; i++) {
        best = 1
        for (p = 2; p <= parts; p++) if (load[p] < load[best]) best = p
        load[best] += w[order[i]]
        if (best == part) print f[order[i]]
      }
    }' "$here/durations.txt" - | sort)
  echo "api tests: part $part of $parts: ${#files[@]} files"
fi
# KEEL_API_TEST_PATTERN narrows it to the tests whose names match (node's
# --test-name-pattern, e.g. "^7:"), for repeating one test in a flake hunt.
pattern=()
[ -n "${KEEL_API_TEST_PATTERN:-}" ] && pattern=(--test-name-pattern="$KEEL_API_TEST_PATTERN")
if [ ${#files[@]} -eq 0 ]; then
  echo "api tests: no test files" >&2  # (node --test without files would run any it finds)
  status=1
else
  node --test --test-concurrency=1 "${pattern[@]}" "${files[@]}" || status=$?
fi

# No orphans: SIGKILL a server that has a loaded engine; the engine must go too.
start_server orphan "$test_model"
orphan_url="$(cat "$work/orphan.url")"
curl -s "$orphan_url/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"tiny","prompt":"x","max_tokens":1}' >/dev/null
engine_pid=$(curl -s "$orphan_url/api/status" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).models[0].pid))')
kill -KILL "${pids[-1]}"
gone=0
for _ in $(seq 1 40); do
  if ! kill -0 "$engine_pid" 2>/dev/null || grep -q '^State:.*Z' "/proc/$engine_pid/status" 2>/dev/null; then gone=1; break; fi
  sleep 0.05
done
if [ "$engine_pid" -gt 0 ] && [ $gone = 1 ]; then
  echo "ok - engine $engine_pid died with its SIGKILLed server"
else
  echo "not ok - engine $engine_pid outlived its SIGKILLed server" >&2
  status=1
fi

# Bounded teardown: SIGTERM with a loaded engine ends within a few seconds.
start_server term "$test_model"
term_url="$(cat "$work/term.url")"
curl -s "$term_url/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"tiny","prompt":"x","max_tokens":1}' >/dev/null
t0=$(date +%s%N)
kill -TERM "${pids[-1]}"
wait "${pids[-1]}" || true
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $ms -lt 5000 ]; then echo "ok - SIGTERM teardown took $ms ms"; else echo "not ok - SIGTERM teardown took $ms ms" >&2; status=1; fi
if [ $status -ne 0 ]; then
  # The engine lines first (a flake's cause is often an engine that ended early, whose
  # lines the tail alone would have lost), then each log's tail.
  for f in "$work"/*.log; do
    echo "== $f: engine lifecycle"
    grep -nE "keel engine|engine pid|died|stalled|exited|killing|restart" "$f" | tail -n 80
    echo "== $f: tail"
    tail -n 40 "$f"
  done >&2
fi
exit $status
