"""Shared fixtures: one real Kafka broker per test session, and names unique per test.

``kafka_bootstrap`` finds a broker in this order:

1. ``$SPILLWAY_BOOTSTRAP`` (a broker someone else runs; it must answer),
2. a testcontainers ``KafkaContainer`` when a Docker engine answers,
3. a :class:`~spillway.devtools.localbroker.LocalBroker` in a fresh temporary directory on
   free ports, stopped (by its PID) when the session ends.

If none can be had the fixture raises, so every test that needs a broker fails.
Nothing here ever skips a test.

Markers hold (checked at collection, which fails otherwise): a test that uses the
session broker (``kafka_bootstrap``, directly or through another fixture) is marked
``broker``. A test that starts a Spark context in the test process without the ``spark``
marker fails (checked as it runs). A ``soak`` or ``extended`` test that skips fails instead:
`make soak` must run each one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import uuid
from collections.abc import Generator, Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from spillway.channels.errors import BrokerUnavailableError
from spillway.devtools.localbroker import BrokerConfig, LocalBroker, free_ports
from spillway.devtools.localregistry import LocalRegistry

log = logging.getLogger(__name__)

BOOTSTRAP_ENV = "SPILLWAY_BOOTSTRAP"
BROKER_FIXTURE = "kafka_bootstrap"
REGISTRY_FIXTURE = "schema_registry_url"
_DOCKER_PING_TIMEOUT_S = 3


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is checked
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = [
        item.nodeid
        for item in items
        if BROKER_FIXTURE in getattr(item, "fixturenames", ())
        and item.get_closest_marker("broker") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) use the {BROKER_FIXTURE} fixture without the broker "
            "marker; add `pytestmark = pytest.mark.broker` to the module (or "
            "@pytest.mark.broker to the test): " + ", ".join(unmarked)
        )
    no_registry_mark = [
        item.nodeid
        for item in items
        if REGISTRY_FIXTURE in getattr(item, "fixturenames", ())
        and item.get_closest_marker("registry") is None
    ]
    if no_registry_mark:
        raise pytest.UsageError(
            f"{len(no_registry_mark)} test(s) use the {REGISTRY_FIXTURE} fixture without the "
            "registry marker: " + ", ".join(no_registry_mark)
        )


def _spark_contexts_started() -> int:
    """How many Spark contexts this process started since pyspark was first seen here.

    Counted by wrapping ``SparkContext.__init__`` once pyspark is imported, so a run
    that never imports pyspark pays nothing.
    """
    pyspark = sys.modules.get("pyspark")
    if pyspark is None:
        return 0
    context = pyspark.SparkContext
    if not hasattr(context, "_tests_started"):
        init = context.__init__

        def counting_init(self: object, *args: object, **kwargs: object) -> None:
            context._tests_started += 1
            init(self, *args, **kwargs)

        context._tests_started = int(context._active_spark_context is not None)
        context.__init__ = counting_init
    started: int = context._tests_started
    return started


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    before = _spark_contexts_started()
    yield
    if item.get_closest_marker("spark") is None and _spark_contexts_started() > before:
        pytest.fail(
            f"{item.nodeid} started Spark without the spark marker; add "
            "`pytestmark = pytest.mark.spark` to the module (or @pytest.mark.spark to the test)"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    tier = item.get_closest_marker("soak") or item.get_closest_marker("extended")
    if report.skipped and tier is not None and not hasattr(report, "wasxfail"):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a {tier.name} test must run, not skip ({why})"
    return report


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a real Kafka broker that supports transactions, for the whole session."""
    explicit = os.environ.get(BOOTSTRAP_ENV)
    if explicit:
        _check_answers(explicit)
        log.info("Using the broker at %s from $%s", explicit, BOOTSTRAP_ENV)
        yield explicit
        return
    if _docker_answers():
        with _kafka_container() as bootstrap:
            if bootstrap is not None:
                yield bootstrap
                return
    broker = LocalBroker(BrokerConfig.with_free_ports(tmp_path_factory.mktemp("session-broker")))
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible API URL of a schema registry the session starts itself
    (:class:`~spillway.devtools.localregistry.LocalRegistry`, in memory), for the session."""
    (port,) = free_ports(1)
    registry = LocalRegistry(tmp_path_factory.mktemp("session-registry"), port)
    registry.start()
    try:
        yield registry.url
    finally:
        registry.stop()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A name unique to this test run, usable as a job id, topic part or group id.

    The test's name (sanitised, without ``test_``) plus 8 random hex digits: only
    ``[A-Za-z0-9_-]`` and at most 40 characters.
    """
    name = request.node.name.removeprefix("test_")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:31].strip("_-") or "t"
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    """A confluent-kafka ``AdminClient`` on the session broker."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def _check_answers(bootstrap: str) -> None:
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"${BOOTSTRAP_ENV}={bootstrap} does not answer a metadata request ({exc}); "
            f"start that broker or unset ${BOOTSTRAP_ENV} to let the tests start their own"
        ) from exc


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=_DOCKER_PING_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure at all means "no usable Docker engine"
        return False


@contextlib.contextmanager
def _kafka_container() -> Iterator[str | None]:
    """Yield the bootstrap of a KRaft container, or None if it cannot be started."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.10 kept it at the old place
        from testcontainers.kafka import KafkaContainer

    container = (
        KafkaContainer()
        .with_kraft()
        # The image defaults need three brokers for transactions; we have one.
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    )
    try:
        container.start()
    except Exception:
        # Docker answers but cannot run the image (offline, no pull rights, ...): the
        # local broker can still serve, so fall back to it instead of failing the run.
        log.warning("Docker answered but the Kafka container did not start", exc_info=True)
        with contextlib.suppress(Exception):
            container.stop()  # it may have been created before the failure
        yield None
        return
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()
