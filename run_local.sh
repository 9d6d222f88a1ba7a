#!/usr/bin/env bash
# Install the evaluator into .venv (if needed) and run the example QA evaluation.
#
# With no MODEL_URL it starts the project's own OpenAI-compatible test server on
# 127.0.0.1 (deterministic answers, 20 ms latency) and stops it afterwards. Set
# MODEL_URL (base URL, e.g. https://api.openai.com/v1), MODEL_NAME and API_KEY_ENV
# (the NAME of the variable holding the key) to evaluate a real endpoint instead.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-out/local_qa}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv ..."
  "$PYTHON" -m venv .venv
fi
echo "installing the evaluator into .venv ..."
.venv/bin/python -m pip install -q --disable-pip-version-check ".[test]"

server_pid=""
cleanup() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

mkdir -p "$OUT_DIR"
if [ -z "${MODEL_URL:-}" ]; then
  log="$OUT_DIR/../local_server.log"
  .venv/bin/python -m beameval.testserver --host 127.0.0.1 --port 0 --latency-ms 20 \
    --answers data/sample_model_answers.jsonl >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 150); do
    port=$(sed -n 's/^LISTENING \([0-9]*\)$/\1/p' "$log" | head -n 1)
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "${port:-}" ]; then echo "the local test server did not start; see $log" >&2; exit 1; fi
  MODEL_URL="http://127.0.0.1:$port/v1"
  MODEL_NAME=${MODEL_NAME:-local-test-model}
  echo "local test server listening on 127.0.0.1:$port"
fi

config="$OUT_DIR/../local_qa.yaml"
sed -e "s|\${MODEL_URL}|$MODEL_URL|" \
    -e "s|\${MODEL_NAME}|${MODEL_NAME:-model}|" \
    -e "s|\${API_KEY_ENV}|${API_KEY_ENV:-null}|" examples/local_qa.yaml >"$config"

.venv/bin/python -m pipeline.run --config "$config" --output "$OUT_DIR" --overwrite
echo "outputs: $OUT_DIR/results.json, $OUT_DIR/rows/, $OUT_DIR/errors/"
