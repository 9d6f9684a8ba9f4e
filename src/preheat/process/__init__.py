"""What every long-running preheat process shares: its event loop (:mod:`~preheat.process.aio`),
its structured logs (:mod:`~preheat.process.logs`), ports reserved before a child binds them
(:mod:`~preheat.process.ports`) and serving an aiohttp app on a port
(:mod:`~preheat.process.httpserve`). Below the worker, the router and the drivers; imports
nothing of preheat's but :mod:`preheat.core`."""
