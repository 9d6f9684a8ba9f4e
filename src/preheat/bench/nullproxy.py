"""A do-nothing gRPC hop: the floor that the router's overhead is measured against.

``python -m preheat.bench.nullproxy --target HOST:PORT`` serves ``preheat.v1.Inference``
(every Generate is forwarded to the target unchanged and every chunk relayed as is: no
tokenizing, routing, coalescing, metrics or logs) and ``preheat.v1.Router`` (Pick, PickBatch
and PickStream answer a constant endpoint without reading the request). It prints one
ready line, like a worker::

    {"event": "nullproxy_ready", "grpc_port": 41234, "http_port": 0}

and stops on SIGTERM. It runs on the same event loop as the router (uvloop when installed,
see ``preheat.process.aio``). Used by ``preheat bench router`` only; it is not part of the product.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Sequence

import grpc

from preheat.process import aio
from preheat.process.children import die_with_parent
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, router_pb2, router_pb2_grpc


class _Proxy(inference_pb2_grpc.InferenceServicer):
    def __init__(self, stub: inference_pb2_grpc.InferenceStub) -> None:
        self._stub = stub

    async def Generate(
        self, request: inference_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        async for chunk in self._stub.Generate(request):
            yield chunk


class _Picker(router_pb2_grpc.RouterServicer):
    def __init__(self, target: str) -> None:
        self._response = router_pb2.PickResponse(
            endpoint=router_pb2.PickedEndpoint(worker_id="null", address=target), reason="null"
        )
        self._result = router_pb2.PickResult(picked=self._response)

    async def Pick(
        self, request: router_pb2.PickRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.PickResponse:
        return self._response

    async def PickBatch(
        self, request: router_pb2.PickBatchRequest, context: grpc.aio.ServicerContext
    ) -> router_pb2.PickBatchResponse:
        return router_pb2.PickBatchResponse(results=[self._result] * len(request.picks))

    async def PickStream(
        self,
        request_iterator: AsyncIterator[router_pb2.PickStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[router_pb2.PickStreamResponse]:
        async for item in request_iterator:
            yield router_pb2.PickStreamResponse(id=item.id, result=self._result)


async def serve(target: str, host: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with grpc.aio.insecure_channel(target) as channel:
        server = grpc.aio.server()
        inference_pb2_grpc.add_InferenceServicer_to_server(
            _Proxy(inference_pb2_grpc.InferenceStub(channel)), server
        )
        router_pb2_grpc.add_RouterServicer_to_server(_Picker(target), server)
        port = server.add_insecure_port(f"{host}:0")
        await server.start()
        ready = {"event": "nullproxy_ready", "grpc_port": port, "http_port": 0}
        print(json.dumps(ready), flush=True)
        await stop.wait()
        await server.stop(0.5)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()  # started by the benchmark's spawner: go when it goes
    parser = argparse.ArgumentParser(prog="python -m preheat.bench.nullproxy", description=__doc__)
    parser.add_argument("--target", required=True, help="host:port of a worker")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    return aio.run(serve(args.target, args.host))


if __name__ == "__main__":
    sys.exit(main())
