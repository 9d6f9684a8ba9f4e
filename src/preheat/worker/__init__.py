"""The worker: one engine behind gRPC (Inference, WorkerControl, health) and HTTP probes.

In-process (tests, benchmarks)::

    from preheat.worker import WorkerConfig, WorkerServer

    server = WorkerServer(engine, WorkerConfig(worker_id="w-1"))  # 127.0.0.1, ports 0
    ports = await server.start()      # Ports(grpc=..., http=..., control=0), bound at once
    await server.wait_warm()          # loading -> warming -> active/standby
    ...
    await server.stop()               # drain, stop gRPC with grace, shut the engine down

``control=0``: no ``control_token``, so no control port (Promote, Demote and Drain are
served only there, to callers with the token; see worker/README.md, "Ports").

As a process: ``preheat worker --engine sim|vllm ...`` (:mod:`preheat.worker.main`).
"""

from preheat.worker.server import Ports, WorkerConfig, WorkerServer

__all__ = ["Ports", "WorkerConfig", "WorkerServer"]
