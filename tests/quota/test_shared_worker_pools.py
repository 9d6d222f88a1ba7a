"""The shared rate on the portable runner with two EXTERNAL worker pools (as Flink on Kubernetes runs them).

The worker pools and the job service are the fixtures of ``tests/scheduling/test_worker_pools.py``;
every SDK worker the pools start draws from the one budget in a real redis-server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from beameval.testserver.harness import ServerProcess
from tests.pipeline.test_runners import grpc_binds, job_service  # noqa: F401 - fixtures, reused
from tests.quota.redis_server import redis_server
from tests.quota.test_shared_limits import RPM, eval_config, exact_matches
from tests.scheduling.test_worker_pools import SDK_WORKERS, _started_workers, worker_pools  # noqa: F401


@pytest.mark.slow
def test_external_worker_pools_share_one_rate_through_redis(
    job_service: str,  # noqa: F811 - the fixture imported above
    worker_pools: tuple[int, list[Path]],  # noqa: F811
    clean_server: ServerProcess,
    write_jsonl: Any,
    model_target: Any,
    run_eval: Any,
    tmp_path: Path,
) -> None:
    port, logs = worker_pools
    clean_server.configure(quota={"requests_per_minute": RPM})
    with redis_server(tmp_path) as redis:
        config = eval_config(write_jsonl, model_target, 80, {"requests_per_minute": RPM, "shared": redis.url})
        result = run_eval(
            config,
            "--runner=PortableRunner",
            f"--job_endpoint={job_service}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{port}",
            f"--direct_num_workers={SDK_WORKERS}",
        )
        keys = redis.run_keys()
    assert result.code == 0, result.stderr
    assert sum(_started_workers(logs)) == SDK_WORKERS  # the pools ran the workers
    assert result.results["counts"] == {"rows": 80, "ok": 80, "errors": 0}
    assert result.score("exact-match.exact-match")["sum"] == exact_matches(80)
    assert clean_server.stats()["by_status"] == {"200": 80}  # one budget for both: never a 429
    job = json.loads((result.output / "_responses" / "job.json").read_text())["id"]
    assert len(keys) == 1 and job in keys[0]  # the job's key: kept across --resume
