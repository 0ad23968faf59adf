"""``make compose-test``: the docker compose deployment brought up for real, with faults.

Development tooling, not part of the runtime (not in the wheel). It runs on a machine
with root and apt, or against a running Docker engine (``$DOCKER_HOST``):

1. :mod:`.host` installs what is missing (docker.io, docker-compose, debootstrap, ...);
2. :mod:`.engine` starts a private ``dockerd`` inside a network namespace of its own, on a
   private socket (never the default one, which the test suite takes for a testcontainers
   engine), and stops it by PID at the end;
3. :mod:`.fetch` fetches on the host what the images need (Debian rootfs and packages,
   wheels, Kafka jars), :mod:`.images` builds the stand-ins for the official images,
   each tagged by a hash of its inputs, so a second run rebuilds nothing unchanged;
4. :mod:`.scenario` (inside the namespace) brings ``docker/compose.yaml`` up, runs the
   example job, kills a broker and a worker, and checks the outcome (:mod:`.checks`).

Everything kept between runs lives in ``<cache>/compose`` (``~/.cache/spillway/compose``):
see :mod:`.cache`.
"""
