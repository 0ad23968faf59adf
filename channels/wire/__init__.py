"""What a channel message is on the wire: the versioned envelope, the Avro and Arrow IPC
codecs, records that span several messages, schema ids and resolution of older schemas,
and the size- and linger-bounded batcher that packs encoded records into messages.

Pure encoding and decoding, no I/O. May import the root of :mod:`spillway.channels`
(errors, ids, config); nothing else of Spillway.
"""
