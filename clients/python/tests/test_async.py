"""The asyncio client against the real server: concurrent tasks, every endpoint."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from test_client import REWORDED

import loopguard
from loopguard import Failure, NotFoundError, Verdict


def test_concurrent_tasks_each_loop_on_their_own(server) -> None:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:8]

    async def one_task(lg: loopguard.AsyncClient, i: int) -> list:
        # Events of one task go in order; the tasks themselves run at once.
        return [await lg.evaluate(Failure(m), task_id=f"async-{run}-{i}") for m in REWORDED]

    async def main() -> None:
        async with server.async_client() as lg:
            results = await asyncio.gather(*(one_task(lg, i) for i in range(8)))
            for verdicts in results:
                assert [v.action.type for v in verdicts] == ["continue", "warn", "pivot"]
                assert verdicts[2].action.message
            view = await lg.get_task(f"async-{run}-3")
            assert (view.loop_count, view.pivot_count) == (2, 1)

    asyncio.run(main())


def test_every_endpoint_through_the_async_client(server) -> None:  # type: ignore[no-untyped-def]
    t = f"async-ep-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        async with server.async_client() as lg:
            assert await lg.livez()
            assert (await lg.wait_ready(timeout=30)).ready
            batch = await lg.evaluate_batch([Failure(m) for m in REWORDED], task_id=t)
            assert all(isinstance(v, Verdict) for v in batch)
            assert [v.loop for v in batch if isinstance(v, Verdict)] == [False, True, True]
            history = await lg.history(t)
            assert "pivot_issued" in [r.event for r in history.records]
            fb = await lg.feedback(t, 2, "false_positive", note="not the same component")
            assert fb.label == "false_positive" and fb.seq == 2
            assert any(r["label"] == "no_loop" for r in await lg.export_feedback("runs"))
            assert isinstance(await lg.similar_loops(REWORDED[0]), list)
            view = await lg.reset(t, "success", by="ci")
            assert view.loop_count == 0
            assert "loopguard_http_requests_total" in await lg.metrics()
            assert "/v1/feedback" in (await lg.openapi())["paths"]
            await lg.delete_task(t)
            with pytest.raises(NotFoundError):
                await lg.get_task(t)

    asyncio.run(main())
