"""The router: sends every request to the worker where it will start fastest.

``endpoints`` keeps the pool's view (discovery, Status, metrics, WatchCache, RTT);
``preheat.core.routing`` decides; the front ends carry requests.
"""
