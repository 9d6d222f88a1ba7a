"""The local runner: Beam's FnApiRunner, whose worker processes leave Ctrl-C to the driver.

With ``--direct_running_mode=multi_processing`` the FnApiRunner starts each worker as
``sh -c "python -m apache_beam.runners.worker.sdk_worker_main"`` in the driver's process
group, so a terminal's Ctrl-C reaches every worker at once and each prints its own
traceback while the driver is still deciding what to do. Here the same worker command runs
with SIGINT ignored (``trap '' INT``, which survives ``exec``), so only the driver sees it
and stops the workers itself; SIGTERM still ends a worker as usual. The FnApiRunner never
tries to download anything (a plain ``DirectRunner`` first fetches Prism). Beam's
``--dry_run`` is honoured here too (the FnApiRunner ignores it and would run the whole job,
paying for every request): the job is built and translated, and nothing runs. The gRPC
servers the FnApiRunner opens for its worker processes bind loopback only
(``pipeline.loopback``): Beam would open them on every interface. So does the LOOPBACK
worker pool that a ``PortableRunner``, ``PrismRunner`` or ``FlinkRunner`` starts in this
process, though its workers are told ``localhost:PORT``: those runners run as
subclasses whose pool binds loopback (``LOOPBACK_RUNNERS``).
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)
from apache_beam.runners.portability.flink_runner import FlinkRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.portable_runner import PortableRunner
from apache_beam.runners.portability.prism_runner import PrismRunner
from apache_beam.runners.runner import PipelineResult, PipelineState
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from pipeline.loopback import loopback_binds

__all__ = ["LOCAL_RUNNER_NAMES", "LOOPBACK_RUNNERS", "LocalRunner", "WORKER_COMMAND", "choose_runner"]

#: ``--runner`` values that mean "this machine's engine" (compared lower-case, as Beam does). A plain
#: ``DirectRunner`` (Airflow's default, and what most Beam users type) would first try to fetch Prism.
LOCAL_RUNNER_NAMES = frozenset({"", "direct", "directrunner", "switchingdirectrunner", "fnapirunner"})

WORKER_COMMAND = f"trap '' INT; exec {shlex.quote(sys.executable)} -m apache_beam.runners.worker.sdk_worker_main"


class LocalRunner(FnApiRunner):  # type: ignore[misc]  # Beam is untyped
    """``FnApiRunner``, with SIGINT-ignoring worker processes in ``multi_processing`` mode, bound to loopback."""

    def run_pipeline(self, pipeline: Any, options: PipelineOptions) -> Any:
        if options.view_as(TestOptions).dry_run:
            pipeline.to_runner_api()  # every transform translates: the job is one a real run would start
            return PipelineResult(PipelineState.DONE)
        if (options.view_as(PortableOptions).environment_type or "").upper() == "EXTERNAL":
            # Worker pools elsewhere connect back to this host's name (Beam's host_from_worker).
            return self._run(pipeline, options)
        with loopback_binds():  # the FnApiRunner runs the whole job inside run_pipeline
            return self._run(pipeline, options)

    def _run(self, pipeline: Any, options: PipelineOptions) -> Any:
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode != "multi_processing":
            return super().run_pipeline(pipeline, options)
        self._default_environment = SubprocessSDKEnvironment.from_command_string(command_string=WORKER_COMMAND)
        # "in_memory" keeps FnApiRunner from replacing the environment; the worker count still
        # comes from --direct_num_workers, and the mode is restored for whoever reads it next.
        direct.direct_running_mode = "in_memory"
        try:
            return super().run_pipeline(pipeline, options)
        finally:
            direct.direct_running_mode = "multi_processing"


class _LoopbackPool:
    """A portable runner whose LOOPBACK worker pool, started in this process, binds loopback only."""

    def run_pipeline(self, pipeline: Any, options: PipelineOptions) -> Any:
        with loopback_binds():  # the pool binds while the job is submitted; the job runs on after
            return super().run_pipeline(pipeline, options)  # type: ignore[misc]  # the runner class after this one


class _PortableRunner(_LoopbackPool, PortableRunner):  # type: ignore[misc]  # Beam is untyped
    pass


class _PrismRunner(_LoopbackPool, PrismRunner):  # type: ignore[misc]
    pass


class _FlinkRunner(_LoopbackPool, FlinkRunner):  # type: ignore[misc]
    pass


#: ``--runner`` values (lower-case) that start a LOOPBACK pool in this process, and the runner that binds it loopback.
LOOPBACK_RUNNERS: dict[str, type[Any]] = {
    "portablerunner": _PortableRunner,
    "prismrunner": _PrismRunner,
    "flinkrunner": _FlinkRunner,
}


def choose_runner(options: PipelineOptions) -> LocalRunner | PortableRunner | None:
    """The runner to hand ``beam.Pipeline``; ``None`` lets Beam pick.

    ``LocalRunner`` for no ``--runner`` or a local name (``LOCAL_RUNNER_NAMES``); for a name
    in ``LOOPBACK_RUNNERS``, Beam's runner with its LOOPBACK pool on loopback.
    """
    name = (options.view_as(StandardOptions).runner or "").lower()
    if name in LOOPBACK_RUNNERS:
        return LOOPBACK_RUNNERS[name]()
    return LocalRunner() if name in LOCAL_RUNNER_NAMES else None
