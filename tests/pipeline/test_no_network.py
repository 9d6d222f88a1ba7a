"""The local runner needs no network: runs with every non-loopback connection blocked.

Both the default (no ``--runner``) and ``--runner=DirectRunner`` (what Airflow's Beam
operator passes, and what Beam 2.77 would answer by first fetching Prism from GitHub) run
on the project's local engine, make no attempt to reach another host, and give the same
results.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Installed through sitecustomize in the child: refuses and records any attempt to reach a host
# other than this machine (a Prism download, a pip install, a telemetry call, ...).
GUARD = textwrap.dedent(
    """
    import os, socket
    LOG = os.environ["NETWORK_ATTEMPTS_LOG"]
    LOCAL = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "::", "", None}
    def record(what):
        with open(LOG, "a") as handle:
            handle.write(what + "\\n")
    _connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else None
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in LOCAL:
            record(f"connect {address}")
            raise OSError("network access blocked by the test")
        return _connect(self, address)
    def getaddrinfo(host, *args, **kwargs):
        if host not in LOCAL:
            record(f"resolve {host}")
            raise socket.gaierror("name resolution blocked by the test")
        return _getaddrinfo(host, *args, **kwargs)
    socket.socket.connect = connect
    socket.getaddrinfo = getaddrinfo
    """
)


def _run_offline(tmp_path: Path, env: dict[str, str], config: Path, name: str, *extra: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-m", "pipeline.run", "--config", str(config), "--output", str(tmp_path / name), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads((tmp_path / name / "results.json").read_text())


def test_local_run_makes_no_network_attempts(tmp_path, write_jsonl):
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "attempts.log"
    dataset = write_jsonl([{"answer": "Paris", "output": "paris"}, {"answer": "Rome", "output": "Milan"}])
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "dataset": {"path": str(dataset)},
                "metrics": [
                    {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
                    {"type": "rouge", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"},
                    {"type": "bleu", "references": ["{{ item.answer }}"], "candidate": "{{ item.output }}"},
                ],
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "guard"), str(ROOT)]),
        "NETWORK_ATTEMPTS_LOG": str(log),
    }
    default = _run_offline(tmp_path, env, config, "out")
    direct = _run_offline(tmp_path, env, config, "out-direct", "--runner=DirectRunner")
    attempts = log.read_text() if log.exists() else ""
    assert attempts == "", f"a local run tried to reach the network:\n{attempts}"
    for results in (default, direct):
        assert results["counts"] == {"rows": 2, "ok": 2, "errors": 0}
        assert results["run"]["runner"] == "FnApiRunner"  # DirectRunner ran on the same engine
    em = next(s for s in default["aggregate_scores"]["scores"] if s["name"] == "exact-match.exact-match")
    assert (em["count"], em["sum"]) == (2, 1.0)  # "paris" matches "Paris", "Milan" does not match "Rome"
    assert direct["aggregate_scores"] == default["aggregate_scores"]
    # The guard itself works: a connection to a public address is refused and recorded.
    probe = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('93.184.216.34', 80), timeout=1)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "93.184.216.34" in log.read_text()
