"""The Kafka ACLs a job needs, by prefix: pure data, rendered for the admin API or kafka-acls.

Every name a job uses starts with ``spillway.<job>.``: its topics (:mod:`spillway.channels.naming`),
its transactional ids and its consumer groups (:class:`spillway.channels.ids.SubtaskId` and the
readers' groups). So three prefixed grants cover any job, whatever its operators.
"""

from __future__ import annotations

from dataclasses import dataclass

from spillway.channels.ids import JobId
from spillway.channels.naming import job_topic_prefix

# What each call of the job needs (Kafka's authorization model, checked by
# tests/integration/test_security.py against a broker that enforces ACLs):
TOPIC_OPERATIONS = (
    "CREATE",  # the driver creates the job's topics (CreateTopics)
    "DESCRIBE",  # metadata, ListOffsets
    "READ",  # channel, changelog, checkpoint and event reads (Fetch)
    "WRITE",  # channel, changelog, checkpoint, event and dead-letter writes (Produce)
    "DELETE",  # DeleteRecords: old checkpoint records are pruned
)
TRANSACTIONAL_ID_OPERATIONS = ("WRITE", "DESCRIBE")  # InitProducerId, AddPartitions, EndTxn
GROUP_OPERATIONS = ("READ",)  # AddOffsetsToTxn / TxnOffsetCommit of each subtask's positions


@dataclass(frozen=True)
class AclGrant:
    """Allow ``principal`` ``operation`` on every ``resource`` whose name starts with ``prefix``."""

    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID
    prefix: str
    operation: str
    principal: str


def job_acls(job: JobId, principal: str) -> list[AclGrant]:
    """Every grant ``principal`` (e.g. ``User:spillway``) needs to run ``job``."""
    prefix = job_topic_prefix(job)
    grants = [AclGrant("TOPIC", prefix, op, principal) for op in TOPIC_OPERATIONS]
    grants += [
        AclGrant("TRANSACTIONAL_ID", prefix, op, principal) for op in TRANSACTIONAL_ID_OPERATIONS
    ]
    grants += [AclGrant("GROUP", prefix, op, principal) for op in GROUP_OPERATIONS]
    return grants


_CLI_RESOURCE = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
_CLI_OPERATION = {
    "CREATE": "Create",
    "DESCRIBE": "Describe",
    "READ": "Read",
    "WRITE": "Write",
    "DELETE": "Delete",
}


def kafka_acls_commands(grants: list[AclGrant], bootstrap: str = "BROKER:9092") -> list[str]:
    """``kafka-acls.sh`` command lines that create ``grants`` (one per resource)."""
    out = []
    for resource in ("TOPIC", "TRANSACTIONAL_ID", "GROUP"):
        mine = [g for g in grants if g.resource == resource]
        if not mine:
            continue
        ops = " ".join(f"--operation {_CLI_OPERATION[g.operation]}" for g in mine)
        out.append(
            f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal "
            f"{mine[0].principal} {ops} {_CLI_RESOURCE[resource]} {mine[0].prefix} "
            "--resource-pattern-type prefixed"
        )
    return out
