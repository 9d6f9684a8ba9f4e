"""``preheat load``: open-loop trace replay against a router or worker (gRPC or the OpenAI
HTTP API), every request's outcome recorded into a run folder (:mod:`preheat.report.record`).

From Python: ``await replay(target, requests, LoadOptions(...), writer)`` (see
:mod:`preheat.load.replay`)."""
