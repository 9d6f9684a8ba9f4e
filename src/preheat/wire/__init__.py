"""The gRPC edge shared by the worker, the router and their callers (who may not import each
other): ``GenerateRequest`` -> ``GenerateSpec``, validated (:mod:`~preheat.wire.convert`),
``PreheatError`` <-> gRPC status (:mod:`~preheat.wire.errors`), token coalescing on a
``Generate`` stream (:mod:`~preheat.wire.coalesce`), the control token and its metadata
(:mod:`~preheat.wire.tokens`), control-port TLS (:mod:`~preheat.wire.controltls`), and the
clients of ``WorkerControl`` (:mod:`~preheat.wire.workerctl`) and ``Router/PickStream``
(:mod:`~preheat.wire.pickclient`). Imports :mod:`preheat.proto` and :mod:`preheat.core`
only."""
