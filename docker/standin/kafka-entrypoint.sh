#!/bin/bash
# Entrypoint of the Kafka stand-in image (kafka.Dockerfile), following apache/kafka's
# conventions: every KAFKA_<NAME> variable becomes the setting <name> ("_" -> ".",
# "__" -> "_", "___" -> "-"), except the JVM options below; CLUSTER_ID formats the KRaft
# storage on first start (--ignore-formatted: a restart keeps its data).
set -euo pipefail

config=/opt/kafka/config/server.properties
classpath='/opt/kafka/libs/*'
: "${CLUSTER_ID:?set CLUSTER_ID (22 characters of base64, the same on every node)}"

{
    echo "# Written by the entrypoint from the KAFKA_* environment on every start."
    for name in $(compgen -e | grep '^KAFKA_' | sort); do
        case "$name" in
            KAFKA_HEAP_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_OPTS) continue ;;
        esac
        key="${name#KAFKA_}"
        key="${key,,}"
        key="${key//___/-}"
        key="${key//__/@}"
        key="${key//_/.}"
        key="${key//@/_}"
        printf '%s=%s\n' "$key" "${!name}"
    done
} > "$config"

log4j="-Dlog4j2.configurationFile=/opt/kafka/log4j2.properties"
java -Xmx128m "$log4j" -cp "$classpath" kafka.tools.StorageTool format \
    -t "$CLUSTER_ID" -c "$config" --ignore-formatted

# shellcheck disable=SC2086  # the options are lists of words, as in kafka-run-class.sh
exec java ${KAFKA_HEAP_OPTS:--Xmx384m} ${KAFKA_JVM_PERFORMANCE_OPTS:-} ${KAFKA_OPTS:-} \
    -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true "$log4j" \
    -cp "$classpath" kafka.Kafka "$config"
