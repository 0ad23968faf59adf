"""Which ``--from-savepoint`` values are refused before a run, and what the refusal says."""

from __future__ import annotations

from spillway.channels.errors import ConfigError, SavepointNotFoundError
from spillway.channels.ids import JobId
from spillway.recovery.control.savepoint import savepoint_refusal

JOB = JobId("clicks")


def test_latest_of_a_job_that_never_ran_is_refused() -> None:
    refusal = savepoint_refusal(JOB, "b:9092", "latest", ran=False, completed=[])
    assert isinstance(refusal, SavepointNotFoundError)
    assert isinstance(refusal, ConfigError)  # exit code 2, one line, like every wrong option
    assert str(refusal) == (
        "--from-savepoint latest: job clicks has never run at b:9092, so it has no savepoint; "
        "check --job-id and --bootstrap, or run it without --from-savepoint to start it from "
        "scratch"
    )


def test_a_number_of_a_job_that_never_ran_is_refused() -> None:
    refusal = savepoint_refusal(JOB, "b:9092", "4", ran=False, completed=[])
    assert str(refusal) == (
        "--from-savepoint 4: job clicks has never run at b:9092, so it has no savepoint; "
        "check --job-id and --bootstrap, or savepoints of a running job are listed by "
        "spillway checkpoints --job clicks --bootstrap b:9092"
    )


def test_latest_of_a_job_that_ran_is_accepted_with_or_without_global_checkpoints() -> None:
    assert savepoint_refusal(JOB, "b:9092", "latest", ran=True, completed=[]) is None
    assert savepoint_refusal(JOB, "b:9092", "latest", ran=True, completed=[3]) is None


def test_a_retained_global_checkpoint_is_accepted() -> None:
    assert savepoint_refusal(JOB, "b:9092", "5", ran=True, completed=[4, 5, 6]) is None


def test_a_checkpoint_not_retained_is_refused_naming_the_retained_ones() -> None:
    refusal = savepoint_refusal(JOB, "b:9092", "2", ran=True, completed=[4, 5, 6])
    assert isinstance(refusal, SavepointNotFoundError)
    assert str(refusal) == (
        "--from-savepoint 2: job clicks has no completed global checkpoint 2 (retained: "
        "4, 5, 6); give one of those or 'latest' (spillway checkpoints --job clicks "
        "--bootstrap b:9092)"
    )


def test_a_job_without_global_checkpoints_is_told_how_they_are_taken() -> None:
    refusal = savepoint_refusal(JOB, "b:9092", "1", ran=True, completed=[])
    assert str(refusal) == (
        "--from-savepoint 1: job clicks has no completed global checkpoint at all (they are "
        "taken with --checkpoint-mode unaligned or aligned); give 'latest' to start from "
        "every subtask's latest checkpoint"
    )


def test_the_refusal_names_the_option_that_named_the_checkpoint() -> None:
    refusal = savepoint_refusal(JOB, "b:9092", "9", True, [4], option="--from-checkpoint")
    assert str(refusal).startswith(
        "--from-checkpoint 9: job clicks has no completed global checkpoint 9 (retained: 4)"
    )
