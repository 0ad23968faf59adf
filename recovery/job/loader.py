"""Loading a job's plan from a ``MODULE:ATTRIBUTE`` reference.

The attribute is a pipeline object (anything with ``plan(job_id) -> JobPlan``) or a
function returning one. Loading by reference, on every executor, means user code is
imported where it runs instead of being pickled with its closures.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from spillway.channels.errors import ConfigError, PipelineDefinitionError
from spillway.recovery.job import jobconf
from spillway.recovery.job.plan import JobPlan


def load_plan(pipeline_ref: str, job_id: str, conf: Mapping[str, str] | None = None) -> JobPlan:
    """Import ``pipeline_ref`` and compile it for ``job_id`` (validating the graph).

    ``conf``: the job's pipeline settings (``--conf``), what
    :func:`spillway.recovery.job.jobconf.conf`
    returns while the pipeline is imported and built (none if not given).
    """
    jobconf.install(conf or {})
    module_name, sep, attr = pipeline_ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"pipeline {pipeline_ref!r} must look like MODULE:PIPELINE, "
            "e.g. spillway.examples.clicks:pipeline"
        )
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError, ValueError) as e:  # TypeError: relative module names
        raise ConfigError(
            f"cannot import pipeline module {module_name!r} ({e}); is it on PYTHONPATH "
            "(and shipped with --py-files on a cluster)?"
        ) from e
    obj = getattr(module, attr, None)
    if obj is None:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}")
    pipeline = obj
    if not hasattr(obj, "plan") and callable(obj):
        try:
            pipeline = obj()
        except TypeError as e:
            raise PipelineDefinitionError(
                f"{pipeline_ref} is a function that cannot be called without arguments ({e}); "
                "point at a Pipeline or at a function that takes none"
            ) from e
    if not hasattr(pipeline, "plan"):
        raise PipelineDefinitionError(f"{pipeline_ref} is not a pipeline (it has no plan() method)")
    plan = pipeline.plan(job_id)
    if not isinstance(plan, JobPlan):
        raise PipelineDefinitionError(f"{pipeline_ref}.plan() did not return a JobPlan")
    return plan
