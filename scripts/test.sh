#!/usr/bin/env bash
# The project's one test command: sets up what the tests need, then runs pytest, ruff and mypy.
#
#   bash scripts/test.sh                 # everything (what .ci/run runs)
#   bash scripts/test.sh --fast          # pytest -m "not slow", no Airflow environment
#   bash scripts/test.sh --fast -k cache # any other argument goes to pytest
#   bash scripts/test.sh --setup-only    # install and build, run nothing
#   bash scripts/test.sh --dry-run       # say what would be installed and run, do nothing
#   PYTEST_WORKERS=0 bash scripts/test.sh  # pytest in one process (default: 2 workers, pytest-xdist)
#
# What it installs, each step only when missing (and printing a line when it does):
#   - Debian packages `chromium` (the report tests open the HTML reports in a headless
#     browser) and `redis-server` (the shared-quota tests), with apt-get, as root or through
#     passwordless sudo; `apt-get update` runs at most once, when the package lists are empty
#     or an install fails without them fresh;
#   - the virtual environment $VENV (default .venv in the repository) holding the evaluator,
#     editable, with its `test` and `gcp` extras; reinstalled when setup.py or pyproject.toml
#     changes;
#   - unless --fast: the Airflow DAG test's own environment in $AIRFLOW_VENV (default
#     /tmp/airflow-venv, outside the repository; Airflow 3.3.2 and providers, about 2.2 GB,
#     2-5 minutes the first time, in the background while the other tests run; reused
#     after), see tests/scheduling/airflow_env.py;
#   - Prism, Beam's portable runner in Go, for the tests in tests/runners/: built with
#     `go install github.com/apache/beam/sdks/v2/go/cmd/prism@vVERSION` (VERSION: the
#     installed apache-beam's) into $PRISM_CACHE (default ~/.cache/beameval/prism-vVERSION,
#     outside the repository; about 70 s and 66 MB the first time, in the background while
#     the other tests run), see tests/runners/prism_env.py. Without a Go toolchain nothing
#     is built and those tests are skipped, naming the reason.
# Every check runs even when an earlier one fails; the exit code is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
fast=0 setup_only=0 dry_run=0
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --fast) fast=1 ;;
    --setup-only) setup_only=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) pytest_args+=("$arg") ;;
  esac
done

say() { printf '[test.sh] %s\n' "$*"; }
# A command as one could paste it: arguments with spaces or shell characters in single quotes.
shown() {
  local words=() word
  for word in "$@"; do
    if [[ $word =~ ^[][A-Za-z0-9_./=:,+@-]+$ ]]; then words+=("$word"); else words+=("'$word'"); fi
  done
  echo "${words[*]}"
}
# Runs a step, or only shows it with --dry-run.
step() {
  if [ "$dry_run" = 1 ]; then say "would run: $(shown "$@")"; else "$@"; fi
}
die() { say "$*" >&2; exit 2; }

# 1. System packages.
missing=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null \
    || die "the tests need ${missing[*]} and this machine has no apt-get: install them with its package manager, then rerun."
  if [ "$(id -u)" = 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo)
  else
    die "the tests need ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}' (this script is not root and cannot use sudo without a password), then rerun."
  fi
  apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
  say "installing ${missing[*]} with apt-get (Debian packages, system-wide) ..."
  updated=0
  if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
    step "${apt[@]}" update -qq || die "apt-get update failed"
    updated=1
  fi
  if ! step "${apt[@]}" install -y -qq "${missing[@]}"; then
    [ "$updated" = 0 ] || die "apt-get install ${missing[*]} failed"
    step "${apt[@]}" update -qq && step "${apt[@]}" install -y -qq "${missing[@]}" \
      || die "apt-get install ${missing[*]} failed"
  fi
fi

# 2. The virtual environment with the evaluator and its test tools.
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtual environment $VENV ..."
  step "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed (Debian: apt-get install python3-venv)"
fi
stamp="$VENV/.beameval-test-install"
wanted=$(cat setup.py pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  say "installing the evaluator (editable) with its test and gcp extras into $VENV ..."
  pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  step "${pip[@]}" --upgrade pip || die "upgrading pip in $VENV failed"
  step "${pip[@]}" -e ".[test,gcp]" || die "pip install -e '.[test,gcp]' into $VENV failed"
  [ "$dry_run" = 1 ] || echo "$wanted" >"$stamp"
fi
export PATH="$PWD/$VENV/bin:$PATH"

# 3. The Airflow DAG test's environment (too slow to build inside pytest's per-test timeout).
# When the checks follow, it builds in the background while pytest runs (its 2-5 minutes
# saved on a fresh machine): the DAG tests' fixture takes the same file lock
# (tests/scheduling/airflow_env.py), so a DAG test that comes early waits for the build.
airflow_build=
if [ "$fast" = 0 ]; then
  if [ "$setup_only" = 1 ] || [ "$dry_run" = 1 ]; then
    step "$VENV/bin/python" tests/scheduling/airflow_env.py || die "building the Airflow test environment failed"
  else
    "$VENV/bin/python" tests/scheduling/airflow_env.py &
    airflow_build=$!
  fi
fi

# 4. Prism for the portable-runner tests (tests/runners/prism_env.py says whether it builds,
# reuses, or skips for want of Go); in the background like the Airflow environment, and the
# Prism tests' fixture takes the same file lock.
prism_build=
if [ "$setup_only" = 1 ] || [ "$dry_run" = 1 ]; then
  step "$VENV/bin/python" tests/runners/prism_env.py || die "building Prism failed"
else
  "$VENV/bin/python" tests/runners/prism_env.py &
  prism_build=$!
fi

[ "$dry_run" = 1 ] || say "set-up took $SECONDS s (builds in the background go on)"
[ "$setup_only" = 0 ] || { say "set-up done"; exit 0; }

# 5. The checks.
first_failure=0
check() {
  local name=$1
  shift
  [ "$dry_run" = 1 ] || say "$name: $(shown "$@")"
  local began=$SECONDS
  step "$@"
  local rc=$?
  [ "$dry_run" = 1 ] || say "$name took $((SECONDS - began)) s"
  if [ "$rc" = 5 ] && [ "$name" = pytest ]; then
    say "pytest collected no tests: the selection (${pytest_args[*]:-none}) matched nothing" >&2
  elif [ "$rc" != 0 ]; then
    say "$name failed (exit $rc)" >&2
  fi
  [ "$rc" = 0 ] || [ "$first_failure" != 0 ] || first_failure=$rc
}
# Two pytest workers (pytest-xdist), whole files each: most tests wait on a subprocess or a
# server, so two of them share the 2 cores well (about 14 minutes instead of 28 on a loaded
# machine). PYTEST_WORKERS=0 runs them one by one.
workers=${PYTEST_WORKERS:-2}
parallel=()
[ "$workers" = 0 ] || parallel=(-n "$workers" --dist loadfile)
if [ "$fast" = 1 ]; then
  check pytest "$VENV/bin/python" -m pytest "${parallel[@]}" -m "not slow" "${pytest_args[@]}"
else
  check pytest "$VENV/bin/python" -m pytest "${parallel[@]}" "${pytest_args[@]}"
fi
if [ -n "$airflow_build" ] && ! wait "$airflow_build"; then
  say "building the Airflow test environment failed (log: ${AIRFLOW_VENV:-/tmp/airflow-venv}.build.log)" >&2
  [ "$first_failure" != 0 ] || first_failure=2
fi
if [ -n "$prism_build" ] && ! wait "$prism_build"; then
  say "building Prism failed (its log is named above; tests/runners/prism_env.py)" >&2
  [ "$first_failure" != 0 ] || first_failure=2
fi
check ruff "$VENV/bin/ruff" check .
check ruff-format "$VENV/bin/ruff" format --check .
check mypy "$VENV/bin/mypy" beameval pipeline transforms
if [ "$dry_run" = 1 ]; then
  say "dry run: nothing was installed or run"
elif [ "$first_failure" = 0 ]; then
  say "all checks passed in $SECONDS s"
else
  say "some checks failed"
fi
exit "$first_failure"
