"""Persistent channels: Kafka topics that carry batched Avro records between subtasks."""
