"""Routing through the proxy: stickiness, prefix affinity, geography, two replicas."""

from __future__ import annotations

from frontendkit import Router, eventually, flooded, gen, router, words, workers

from preheat.proto.preheat.v1 import router_pb2

SLOW = {"engine": {"max_num_seqs": 2}}


def waiting(r: Router, wid: str) -> int:
    for e in r.server.store.snapshot():
        if e.id == wid:
            return e.num_waiting
    return 0


async def test_session_sticks_moves_when_overloaded_and_comes_back() -> None:
    async with (
        workers([{"id": f"w-{i}", **SLOW} for i in range(3)]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        prompt = words(20, "sess")
        homes = {await r.worker_of(gen(prompt, session_id="s-A")) for _ in range(5)}
        assert len(homes) == 1
        home = homes.pop()
        home_worker = next(w for w in ws if w.id == home)

        async with flooded(home_worker):
            await eventually(lambda: waiting(r, home) >= 5, 10)
            moved = await r.worker_of(gen(prompt, session_id="s-A"))
            assert moved != home  # past the hotspot margin: the binding yields
        # the flood is gone: once the store sees the queue empty, the session is back home
        await eventually(lambda: waiting(r, home) == 0, 10)

        async def back_home() -> bool:
            return await r.worker_of(gen(prompt, session_id="s-A")) == home

        await eventually(back_home, 10)


async def test_shared_long_prefix_lands_where_cached() -> None:
    async with (
        workers([{"id": f"w-{i}"} for i in range(3)]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        prefix = words(3000, "doc")
        first = await r.worker_of(gen(prefix + " " + words(8, "q0"), max_tokens=2))
        later = [
            await r.worker_of(gen(prefix + " " + words(8, f"q{k}"), max_tokens=2))
            for k in range(1, 6)
        ]
        assert later == [first] * 5


async def test_local_region_preferred_remote_used_when_local_saturated() -> None:
    async with (
        workers(
            [
                {"id": "local", "region": "eu", **SLOW},
                {"id": "remote", "region": "us", **SLOW},
            ]
        ) as ws,
        router([w.endpoint for w in ws], region="eu") as r,
    ):
        r.server.store.inject_rtt("local", 1.0)
        r.server.store.inject_rtt("remote", 80.0)
        picks = [await r.worker_of(gen(words(20, f"g{k}"), max_tokens=2)) for k in range(6)]
        assert picks == ["local"] * 6
        async with flooded(ws[0]):
            await eventually(lambda: waiting(r, "local") >= 5, 10)
            spilled = await r.worker_of(gen(words(20, "spill"), max_tokens=2))
            assert spilled == "remote"


async def test_two_replicas_route_a_session_to_the_same_pod() -> None:
    async with workers([{"id": f"w-{i}"} for i in range(4)]) as ws:
        eps = [w.endpoint for w in ws]
        async with router(eps) as r1, router(eps) as r2:
            for k in range(8):
                sid = f"user-{k}"
                prompt = words(24, sid)
                a = await r1.worker_of(gen(prompt, session_id=sid))
                b = await r2.worker_of(gen(prompt, session_id=sid))
                assert a == b, sid
            # via metadata too (x-session-id), and through Pick
            picks = {
                (
                    await r.router.Pick(
                        router_pb2.PickRequest(request=gen("hi there", session_id="meta")),
                        timeout=10,
                    )
                ).endpoint.worker_id
                for r in (r1, r2)
            }
            assert len(picks) == 1
            via_md = await r1.worker_of(gen("hi there"), metadata=(("x-session-id", "meta"),))
            assert {via_md} == picks
