"""The temporary Prefect server's middleware (flows/prefect_api.py `RetryWhileLocked`): a request that SQLite refused
as locked (Prefect's app answers 503, then its error middleware raises the error again) is run again at once with
its body and an unrewritten scope, rather than by the client after ~2 s; other answers pass as they are. A fake
ASGI app stands in for Prefect's: the behaviour here is the middleware's own."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mai.flows.prefect_api import RetryWhileLocked

Message = dict[str, Any]


def serve(middleware: RetryWhileLocked, body_chunks: list[bytes]) -> list[Message]:
    """What the middleware sends for one HTTP request whose body arrives in `body_chunks`."""
    incoming: list[Message] = [{"type": "http.request", "body": chunk, "more_body": index < len(body_chunks) - 1}
                               for index, chunk in enumerate(body_chunks)]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    anyio.run(middleware, {"type": "http", "path": "/api/task_runs/"}, receive, send)
    return sent


def locked_twice(calls: list[tuple[str, bytes]]) -> Any:
    """An app that refuses its first two requests as Prefect's does for a locked database, then answers 201."""

    async def app(scope: Message, receive: Any, send: Any) -> None:
        message = await receive()
        calls.append((scope["path"], message["body"]))
        scope["path"] = "/task_runs/"  # routing rewrites the scope it is given (a mounted sub-app)
        if len(calls) <= 2:
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b'{"exception_message": "Service Unavailable"}'})
            raise RuntimeError("database is locked")  # Starlette's error middleware raises it again after its answer
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"created"})

    return app


def test_a_request_refused_as_locked_is_run_again_with_its_body_and_scope() -> None:
    calls: list[tuple[str, bytes]] = []
    sent = serve(RetryWhileLocked(locked_twice(calls), retry_s=0), [b'{"name": ', b'"mai-shard-0"}'])
    assert calls == [("/api/task_runs/", b'{"name": "mai-shard-0"}')] * 3
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [201]  # nothing of the 503s
    assert sent[-1]["body"] == b"created"


def test_past_its_patience_the_refusal_and_its_error_reach_the_client_as_before() -> None:
    calls: list[tuple[str, bytes]] = []
    with pytest.raises(RuntimeError, match="database is locked"):
        serve(RetryWhileLocked(locked_twice(calls), retry_s=0, patience_s=0.0), [b"{}"])
    assert len(calls) == 1


def test_any_other_answer_passes_at_once() -> None:
    calls: list[tuple[str, bytes]] = []

    async def app(scope: Message, receive: Any, send: Any) -> None:
        calls.append((scope["path"], (await receive())["body"]))
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"not found"})

    sent = serve(RetryWhileLocked(app, retry_s=0), [b""])
    assert len(calls) == 1 and [m.get("status") for m in sent if m["type"] == "http.response.start"] == [404]
