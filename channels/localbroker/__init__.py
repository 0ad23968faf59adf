"""Local single-node KRaft broker from Apache Kafka's jars (no Docker needed)."""
