"""The pipeline module's source, read on the driver and run in every task (live upgrade).

A task imports the pipeline module by reference (:mod:`spillway.recovery.job.loader`) from the
executor's Python path. On a cluster that path holds what was shipped when the
application started (``--py-files`` is read once), so code deployed later would never
reach the executors. ``spillway upgrade`` therefore reads the module's source on the
driver, checks the plan it builds there, and sends that very source with the tasks it
launches from then on: the code that was checked is the code that runs, on local mode
and on a cluster alike. Only the pipeline module itself travels this way; modules it
imports come from the executors' path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass

from spillway.channels.errors import ConfigError
from spillway.recovery.job import jobconf
from spillway.recovery.job.loader import load_plan
from spillway.recovery.job.plan import JobPlan


@dataclass(frozen=True)
class ModuleCode:
    """The source of one module as the driver read it."""

    module: str
    path: str  # where the driver found it (the module's __file__ in tasks too)
    source: str


def read_module(pipeline_ref: str) -> ModuleCode:
    """The current source of ``pipeline_ref``'s module (``MODULE:ATTRIBUTE``), read from
    where the driver's import system finds it now (not from what was imported before).

    :class:`ConfigError` if it cannot be found or has no source (e.g. only a .pyc)."""
    name = pipeline_ref.partition(":")[0]
    importlib.invalidate_caches()
    imported = sys.modules.pop(name, None)  # find it anew, not through the imported one
    try:
        spec = importlib.util.find_spec(name)
    finally:
        if imported is not None:
            sys.modules[name] = imported
    loader = spec.loader if spec is not None else None
    get_source = getattr(loader, "get_source", None)
    source = get_source(name) if get_source is not None else None
    if spec is None or spec.origin is None or source is None:
        raise ConfigError(
            f"cannot read the source of pipeline module {name!r} on the driver; "
            "upgrade needs it as a .py file (or in a zip) on the driver's PYTHONPATH"
        )
    return ModuleCode(name, spec.origin, source)


def install(code: ModuleCode) -> types.ModuleType:
    """Run ``code`` as module ``code.module`` and put it in ``sys.modules`` (replacing any
    imported version), so that importing it by name returns this code."""
    module = types.ModuleType(code.module)
    module.__file__ = code.path
    if os.path.basename(code.path) == "__init__.py":
        module.__path__ = [os.path.dirname(code.path)]
        module.__package__ = code.module
    else:
        module.__package__ = code.module.rpartition(".")[0]
    sys.modules[code.module] = module
    try:
        exec(compile(code.source, code.path, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[code.module]
        raise
    return module


def deployed(pipeline_ref: str, job_id: str, conf: Mapping[str, str]) -> tuple[ModuleCode, JobPlan]:
    """The pipeline module's source as now deployed, run here (in place of the imported
    module), and the plan it builds for ``job_id`` with pipeline settings ``conf``."""
    code = read_module(pipeline_ref)
    jobconf.install(conf)  # the module may read its settings at import
    install(code)
    return code, load_plan(pipeline_ref, job_id, conf)
