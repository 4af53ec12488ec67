"""KV events over ZeroMQ, as vLLM sends them, and the router around the index.

* :mod:`~kachedb_radix.spec.router.publisher` -- a worker's publisher: PUB frames and a
  ROUTER replay socket over a bounded buffer;
* :mod:`~kachedb_radix.spec.router.subscriber` -- a router's subscriber: one SUB socket per
  worker feeding a :class:`~kachedb_radix.reference.router.RouterIndex`, gaps filled from
  the worker's replay socket.
"""
