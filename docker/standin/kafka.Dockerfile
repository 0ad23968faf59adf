# Stand-in for apache/kafka (docker/compose.standin.yaml), for machines that reach no
# container registry: Debian's OpenJDK 17 and Apache Kafka's jars from Maven Central.
# `make compose-test` (composetest/images.py) assembles the build context:
#     debs/    Debian packages and their Packages index (fetched on the host with apt)
#     jars/    the broker's runtime jars (devtools/localbroker/pom.xml, resolved by Maven)
#     kafka-entrypoint.sh, kafka-log4j2.properties   from this directory
# Nothing is downloaded during the build: the packages are bind-mounted (BuildKit) and
# installed from a file: apt source, so they never end up in a layer.
ARG BASE
FROM ${BASE}

RUN --mount=type=bind,source=debs,target=/mnt/debs \
    set -eux; \
    apt-get -o Dir::Etc::SourceList=/mnt/debs/local.list -o Dir::Etc::SourceParts=- update; \
    apt-get -o Dir::Etc::SourceList=/mnt/debs/local.list -o Dir::Etc::SourceParts=- \
        install -y --no-install-recommends openjdk-17-jre-headless; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

# The image's user and data directory, as in apache/kafka (uid 1000, /var/lib/kafka/data).
RUN set -eux; \
    echo 'appuser:x:1000:1000::/home/appuser:/bin/bash' >> /etc/passwd; \
    echo 'appuser:x:1000:' >> /etc/group; \
    mkdir -p /home/appuser /opt/kafka/config /var/lib/kafka/data; \
    chown 1000:1000 /home/appuser /opt/kafka/config /var/lib/kafka/data

COPY jars /opt/kafka/libs
COPY kafka-entrypoint.sh /opt/kafka/entrypoint.sh
COPY kafka-log4j2.properties /opt/kafka/log4j2.properties

USER appuser
ENTRYPOINT ["/opt/kafka/entrypoint.sh"]
