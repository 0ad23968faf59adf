"""The task loop driven by fake parts: no broker, no clock (tests set the time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from spillway.recovery.runtime.lifecycle import Lifecycle, Phase
from spillway.recovery.runtime.requests import CheckpointRequest, Step
from spillway.recovery.runtime.taskloop import Outcome, TaskLoop


@dataclass
class FakeTask:
    """Ends after ``steps`` steps; records what the loop asked of it, in order."""

    steps: int
    log: list[str] = field(default_factory=list)
    done: int = 0

    def step(self) -> Step:
        self.done += 1
        self.log.append(f"step {self.done}")
        return Step(self.done >= self.steps)

    def tick(self, ended: bool) -> None:
        self.log.append(f"tick ended={ended}")

    def end(self) -> None:
        self.log.append("end")


@dataclass
class FakeCadence:
    waits: bool = False
    loops: list[bool] = field(default_factory=list)

    def on_loop(self, reads_channels: bool) -> int | None:
        self.loops.append(reads_channels)
        return None

    def interval_waits(self, now: float) -> bool:
        return self.waits


@dataclass
class FakeCheckpointer:
    """Due at every step from ``due_from`` on; records (finished, stopping) per checkpoint."""

    lifecycle: Lifecycle
    due_from: int = 10**9
    cadence: FakeCadence = field(default_factory=FakeCadence)
    taken: list[tuple[bool, bool]] = field(default_factory=list)
    asked: int = 0

    def due(self, now: float) -> bool:
        self.asked += 1
        return self.asked >= self.due_from

    def take(
        self,
        finished: bool = False,
        stopping: bool = False,
        request: CheckpointRequest | None = None,
    ) -> object:
        # What the real checkpointer does to the phase table
        # (spillway.recovery.runtime.checkpointer).
        self.lifecycle.to(Phase.CHECKPOINTING)
        self.taken.append((finished, stopping))
        if stopping:
            self.lifecycle.to(Phase.STOPPED)
        else:
            self.lifecycle.after_checkpoint()
        return None


def running() -> Lifecycle:
    lc = Lifecycle()
    lc.to(Phase.RESTORING)
    lc.to(Phase.RUNNING)
    return lc


def test_loop_finishes_with_one_final_checkpoint_when_inputs_end() -> None:
    lc = running()
    task, ckpt = FakeTask(steps=3), FakeCheckpointer(lc)
    outcome = TaskLoop(task, ckpt, ckpt.cadence, lambda: False, True, lc, clock=lambda: 0.0).run()
    assert outcome is Outcome.FINISHED
    assert ckpt.taken == [(True, False)]
    assert task.log == [
        "step 1",
        "tick ended=False",
        "step 2",
        "tick ended=False",
        "step 3",
        "tick ended=True",
        "end",
    ]
    assert lc.phase is Phase.FINISHED
    # The cadence is asked on every turn that did not end (the two before the last).
    assert ckpt.cadence.loops == [True, True]


def test_loop_takes_interval_checkpoints_and_goes_on() -> None:
    lc = running()
    task, ckpt = FakeTask(steps=5), FakeCheckpointer(lc, due_from=2)
    assert TaskLoop(task, ckpt, ckpt.cadence, lambda: False, False, lc).run() is Outcome.FINISHED
    # Due at turns 2, 3, 4 (turn 5 ended): three interval checkpoints, then the final one.
    assert ckpt.taken == [(False, False)] * 3 + [(True, False)]
    assert ckpt.cadence.loops == [False] * 4


def test_stop_is_asked_only_at_a_due_checkpoint_and_follows_one() -> None:
    lc = running()
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return True

    task, ckpt = FakeTask(steps=100), FakeCheckpointer(lc, due_from=4)
    assert TaskLoop(task, ckpt, ckpt.cadence, should_stop, True, lc).run() is Outcome.STOPPED
    assert task.done == 4
    assert len(asked) == 1
    assert ckpt.taken == [(False, True)]
    assert lc.phase is Phase.STOPPED


def test_interval_checkpoint_leaves_it_to_global_ones_while_they_come() -> None:
    lc = running()
    task, ckpt = FakeTask(steps=6), FakeCheckpointer(lc, due_from=1, cadence=FakeCadence(True))
    assert TaskLoop(task, ckpt, ckpt.cadence, lambda: False, True, lc).run() is Outcome.FINISHED
    assert ckpt.taken == [(True, False)]  # only the final one


def test_a_stop_request_beats_a_global_checkpoint_expected_soon() -> None:
    lc = running()
    task, ckpt = FakeTask(steps=6), FakeCheckpointer(lc, due_from=2, cadence=FakeCadence(True))
    assert TaskLoop(task, ckpt, ckpt.cadence, lambda: True, True, lc).run() is Outcome.STOPPED
    assert ckpt.taken == [(False, True)]
    assert task.done == 2
