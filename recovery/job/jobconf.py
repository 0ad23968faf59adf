"""Pipeline configuration given when a job is submitted: ``--conf KEY=VALUE``, ``--env NAME``.

``spillway run ... --conf KEY=VALUE`` (repeatable) sets a *pipeline setting*, like
Spark's ``--conf`` or Flink's ``-D``. Pipeline code reads it with :func:`conf`
(``spillway.spark_jobs.api.pipeline.conf``) wherever the plan is built: on the driver, and in every
Spark task, which builds the plan again from the same settings (they travel with the
job, not through the executors' environment). ``--env NAME`` (repeatable) copies the
submitter's environment variable ``NAME`` into every task's ``os.environ`` before the
pipeline is built there, as the driver does for ``SPILLWAY_*`` and for the prefixes the
pipeline declares (``Pipeline(env_prefixes=...)``).

The ``submitted`` event records the settings, with the values of secret-looking keys
(password, secret, key, token, jaas) masked, and the *names* of forwarded variables,
never their values: ``spillway replay`` rebuilds the plan from them and asks for what
was not recorded. Secret values are also masked wherever Spillway scrubs text (logs,
errors, events).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spillway.channels.config import is_secret, remember_secrets
from spillway.channels.errors import ConfigError

MASK = "***"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The settings of the job whose plan this process builds (set by spillway.recovery.job.loader).
_settings: dict[str, str] = {}


def parse_conf(items: Iterable[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` items as a dict (a later one wins); :class:`ConfigError` if bad."""
    out: dict[str, str] = {}
    for n, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            shown = f"item {n}" if is_secret(item) else repr(item)  # may hold a secret
            raise ConfigError(
                f"--conf {shown} must look like KEY=VALUE (e.g. --conf out.dir=/data/out)"
            )
        out[key.strip()] = value
    return out


def parse_env_names(names: Iterable[str]) -> tuple[str, ...]:
    """``--env NAME`` items, checked to be variable names (not ``NAME=VALUE``)."""
    out: list[str] = []
    for name in names:
        if "=" in name:
            raise ConfigError(
                f"--env {name.partition('=')[0]}=...: --env takes only the NAME of a variable "
                "to forward (set it in the environment of spillway run); pass values with "
                "--conf KEY=VALUE"
            )
        if not _ENV_NAME.match(name):
            raise ConfigError(
                f"--env {name!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def forwarded_env(names: Iterable[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The values of the variables ``names`` in ``environ``; each must be set."""
    missing = [n for n in names if n not in environ]
    if missing:
        raise ConfigError(
            f"--env {missing[0]}: {missing[0]} is not set in this environment; set it, or drop "
            "--env to run without it"
        )
    values = {n: environ[n] for n in names}
    remember_secrets(v for n, v in values.items() if is_secret(n))
    return values


def install(settings: Mapping[str, str]) -> None:
    """Make ``settings`` what :func:`conf` returns in this process (replacing earlier ones)."""
    remember_secrets(v for k, v in settings.items() if is_secret(k))
    _settings.clear()
    _settings.update(settings)


def conf(key: str, default: str | None = None) -> str:
    """The pipeline setting ``key`` (``--conf KEY=VALUE``), else ``default``.

    :class:`ConfigError` if it is not set and there is no default. Call it while the
    pipeline is built (in the function ``spillway run MODULE:FUNCTION`` names), so the
    driver and every task see the same settings.
    """
    value = _settings.get(key, default)
    if value is None:
        given = ", ".join(sorted(_settings)) or "none"
        raise ConfigError(
            f"pipeline setting {key!r} is not set; pass --conf {key}=VALUE to spillway run "
            f"(settings given: {given})"
        )
    return value


def masked(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` as the ``submitted`` event records them (secret values masked)."""
    return {k: MASK if is_secret(k) else v for k, v in settings.items()}


def recorded_conf(submitted: Mapping[str, Any] | None) -> dict[str, str]:
    """The settings a ``submitted`` event recorded (secret ones still masked)."""
    rec = submitted.get("conf") if submitted else None
    return {str(k): str(v) for k, v in rec.items()} if isinstance(rec, dict) else {}


def replay_conf(
    job: str,
    submitted: Mapping[str, Any] | None,
    given: Mapping[str, str],
    environ: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The settings to rebuild ``job``'s plan with: as recorded, overridden by ``given``.

    :class:`ConfigError` naming what is missing: a secret setting (recorded masked) not
    given again, or a variable the job forwarded (``--env``) not set in ``environ``.
    """
    settings = {**recorded_conf(submitted), **given}
    for key, value in settings.items():
        if value == MASK and is_secret(key) and key not in given:
            raise ConfigError(
                f"job {job} was submitted with the secret setting {key!r}, which is not "
                f"recorded; pass it again: --conf {key}=VALUE"
            )
    names = submitted.get("env", []) if submitted else []
    for name in names if isinstance(names, list) else []:
        if name not in environ:
            raise ConfigError(
                f"job {job} forwards ${name} to its tasks (--env {name}); set {name} in "
                "this environment too"
            )
    return settings
