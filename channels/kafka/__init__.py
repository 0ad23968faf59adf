"""Thin, typed access to Kafka through confluent-kafka. The only place that talks to the broker."""
