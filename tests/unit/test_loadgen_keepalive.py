"""The load generator never reuses a pooled connection the server may already have closed.

A real aiohttp server in its own thread closes idle connections after `SERVER_KA` seconds (vLLM's
uvicorn does after 5 s). The client's event loop is then held past that (a worker busy parsing
streams runs late the same way), so the server's FIN is waiting unread when the next request picks a
connection: aiohttp's default pool (15 s) reuses the closed socket and the request fails without
reaching the server, as one did on 12-07's H100 ladder; quantkit's pool opens a new one.
"""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from quantkit.measure.loadgen import client

SERVER_KA = client.KEEPALIVE_S + 0.5  # a server that keeps idle sockets a little longer than the client


@pytest.fixture
def server():
    """A loopback server with its own loop (the client's blocked loop must not stop its timer)."""
    port: list[int] = []
    started = threading.Event()
    served = []

    async def answer(request):
        await request.read()
        served.append(request.transport.get_extra_info("peername")[1])
        return web.Response(text="ok")

    async def run(stop: asyncio.Event):
        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app, keepalive_timeout=SERVER_KA)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port.append(site._server.sockets[0].getsockname()[1])
        started.set()
        await stop.wait()
        await runner.cleanup()

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(run(stop),), daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{port[0]}/", served
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


async def _second_request_after_a_late_loop(url: str, make_pool, idle_s: float) -> str:
    async with aiohttp.ClientSession(connector=make_pool()) as session:
        async with session.post(url, data=b"x") as response:
            await response.read()
        time.sleep(idle_s)  # the loop is held: the server's close arrives and waits unread
        try:
            async with session.post(url, data=b"x") as response:
                return await response.text()
        except aiohttp.ClientError as exc:
            return type(exc).__name__


def test_aiohttps_default_pool_fails_where_the_server_closed_first(server):
    """The fixture's truth: the failure is real without quantkit's setting."""
    url, _ = server
    got = asyncio.run(_second_request_after_a_late_loop(url, aiohttp.TCPConnector, SERVER_KA + 0.3))
    assert got in ("ServerDisconnectedError", "ClientOSError")


def test_quantkits_pool_opens_a_new_connection_instead(server):
    url, served = server
    got = asyncio.run(_second_request_after_a_late_loop(url, lambda: client.pool(4), SERVER_KA + 0.3))
    assert got == "ok"
    assert len(served) == 2 and served[0] != served[1]  # a fresh socket, not the closed one


def test_quantkits_pool_still_reuses_a_fresh_connection(server):
    url, served = server
    got = asyncio.run(_second_request_after_a_late_loop(url, lambda: client.pool(4), 0.2))
    assert got == "ok"
    assert len(served) == 2 and served[0] == served[1]  # keep-alive kept where it is safe
