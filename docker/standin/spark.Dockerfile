# Stand-in for the Spark image of docker/Dockerfile (docker/compose.standin.yaml), for
# machines that reach no container registry: Debian's OpenJDK 17 and Python 3.11, pyspark
# and Spillway's dependencies from PyPI, and this repository.
# `make compose-test` (composetest/images.py) assembles the build context:
#     debs/       Debian packages and their Packages index (fetched on the host with apt)
#     wheels/     wheels of pyspark and Spillway's dependencies, with requirements.txt
#     package/    the wheel of this repository
#     src/        the repository's package sources (spark-submit runs /opt/spillway/spark_jobs/run.py)
# Nothing is downloaded during the build: packages and wheels are bind-mounted (BuildKit)
# and installed offline, so they never end up in a layer. Layers go from rarely to often
# changed: a change to Spillway rebuilds only the last two.
ARG BASE
FROM ${BASE}

# curl is for the compose health checks.
RUN --mount=type=bind,source=debs,target=/mnt/debs \
    set -eux; \
    apt-get -o Dir::Etc::SourceList=/mnt/debs/local.list -o Dir::Etc::SourceParts=- update; \
    apt-get -o Dir::Etc::SourceList=/mnt/debs/local.list -o Dir::Etc::SourceParts=- \
        install -y --no-install-recommends openjdk-17-jre-headless python3 python3-venv curl; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

# The image's user, as in apache/spark (uid 185).
RUN set -eux; \
    echo 'spark:x:185:185::/home/spark:/bin/bash' >> /etc/passwd; \
    echo 'spark:x:185:' >> /etc/group; \
    mkdir -p /home/spark; \
    chown 185:185 /home/spark

# pyspark brings Spark itself (bin, sbin, jars): /opt/spark points into it.
RUN --mount=type=bind,source=wheels,target=/mnt/wheels \
    set -eux; \
    python3 -m venv /opt/spillway-venv; \
    /opt/spillway-venv/bin/pip install --no-cache-dir --no-index --find-links /mnt/wheels \
        -r /mnt/wheels/requirements.txt; \
    pyspark=$(/opt/spillway-venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'); \
    mkdir -p /opt/spark/work; \
    ln -s "$pyspark/bin" "$pyspark/sbin" "$pyspark/jars" /opt/spark/; \
    chown 185:185 /opt/spark/work

COPY src /opt/spillway
RUN --mount=type=bind,source=package,target=/mnt/package \
    set -eux; \
    /opt/spillway-venv/bin/pip install --no-cache-dir --no-index --no-deps /mnt/package/*.whl; \
    /opt/spillway-venv/bin/python -c "import spillway.cli, spillway.channels, spillway.recovery"; \
    mkdir -p /data/out; \
    chown 185:185 /data/out

# The driver (spark-submit) and the executors' Python workers both use the venv.
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    SPARK_HOME=/opt/spark \
    SPARK_WORKER_DIR=/opt/spark/work \
    PYSPARK_PYTHON=/opt/spillway-venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/spillway-venv/bin/python \
    PATH=/opt/spillway-venv/bin:/opt/spark/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

WORKDIR /home/spark
USER spark
