"""A DNS server that answers every question "no such name" (NXDOMAIN), on port 53.

It runs inside the engine's network namespace as the containers' upstream resolver
(the engine's ``dns`` setting). Docker's embedded DNS answers the names of running
services itself and forwards every other name upstream; with no upstream at all it
does not answer, and each look-up of a killed broker's name hung 10-20 s in the
clients (two glibc attempts of 5 s, for A and AAAA). A real deployment's resolver says
NXDOMAIN at once: so does this one. It never forwards anything anywhere.

``python -m composetest.nxdns ADDRESS`` serves until SIGTERM. It binds that one address:
a reply must come from the address the client asked (its UDP socket is connected).
"""

from __future__ import annotations

import signal
import socket
import sys
from types import FrameType

PORT = 53
_HEADER = 12
_NXDOMAIN = 3


def answer(query: bytes) -> bytes | None:
    """The NXDOMAIN response to ``query`` (its question echoed), or None if it is no query."""
    if len(query) < _HEADER or query[2] & 0x80:  # too short, or already a response
        return None
    flags = 0x8000 | (query[2] & 0x79) << 8 | 0x0080 | _NXDOMAIN  # QR, opcode, RD; RA; rcode
    end = _question_end(query)
    if end is None:
        return None
    counts = b"\x00\x01" + b"\x00\x00" * 3  # the one question, no answers
    return query[:2] + flags.to_bytes(2, "big") + counts + query[_HEADER:end]


def _question_end(query: bytes) -> int | None:
    """Offset after the first question (name, type, class), None if malformed."""
    if int.from_bytes(query[4:6], "big") < 1:
        return None
    i = _HEADER
    while i < len(query) and query[i] != 0:
        if query[i] & 0xC0:  # a compression pointer cannot occur in a query's first name
            return None
        i += query[i] + 1
    end = i + 1 + 4
    return end if end <= len(query) else None


def serve(address: str) -> None:
    """Answer queries on ``address`` (port 53) until SIGTERM."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, PORT))

    def stop(_signum: int, _frame: FrameType | None) -> None:
        sock.close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        query, peer = sock.recvfrom(4096)
        response = answer(query)
        if response is not None:
            sock.sendto(response, peer)


if __name__ == "__main__":
    serve(sys.argv[1])
