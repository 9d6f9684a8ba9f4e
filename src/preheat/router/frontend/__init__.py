"""The router's front ends: gRPC ``preheat.v1.Inference`` (proxy) and ``preheat.v1.Router``
(lookaside ``Pick``), the OpenAI-compatible HTTP API, admission and the bounded queue, token
coalescing, prompt tokenization and the ``preheat_router_*`` metrics. All of them share one
request path, :class:`~preheat.router.frontend.dispatch.Dispatcher`."""
