"""The async client (any event loop httpx runs on: asyncio or trio): the sync client's calls
with the same retries, Idempotency-Key and stream-following rules (genservice_client.client)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import anyio
import httpx
from httpx_sse import aconnect_sse

from .client import (
    FINAL,
    IDLE_S,
    MAX_ANSWER,
    RETRY_STATUS,
    RUN_FINAL,
    _backoff,
    _file_part,
    answer,
    asset_id,
    seen,
    submit_body,
    wait_seconds,
    waiting,
)
from .errors import GenserviceError, JobFailed, from_response
from .models import (
    Asset,
    AssetOutput,
    Balance,
    JobStatus,
    Product,
    ProductRun,
    SubmitAccepted,
)


async def read_to_bound(chunks: AsyncIterator[bytes]) -> bytes | None:
    """client.read_to_bound, reading as a coroutine."""
    content = bytearray()
    async for chunk in chunks:
        content += chunk
        if len(content) > MAX_ANSWER:
            return None
    return bytes(content)


class AsyncProducts:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self, category: str | None = None) -> list[Product]:
        params = {"category": category} if category else None
        answer = await self._c.request("GET", "/v1/workflows/products", params=params)
        return [Product.model_validate(p) for p in answer["data"]]

    async def get(self, slug: str) -> Product:
        return Product.model_validate((await self._c.request("GET", f"/v1/workflows/products/{slug}"))["data"])

    async def run(self, slug: str, wait: bool = True, timeout: float = 600.0, **inputs: Any) -> ProductRun:
        answer = await self._c.request("POST", f"/v1/workflows/products/{slug}/runs", json={"inputs": inputs},
                                       submit=True)
        run = ProductRun.model_validate(answer["data"])
        deadline = anyio.current_time() + timeout
        while wait and run.status not in RUN_FINAL:
            if anyio.current_time() > deadline:
                raise TimeoutError(f"run {run.id} still {run.status}")
            await anyio.sleep(0.5)
            run = await self.get_run(run.id)
        return run

    async def get_run(self, run_id: str) -> ProductRun:
        return ProductRun.model_validate((await self._c.request("GET", f"/v1/workflows/runs/{run_id}"))["data"])

    async def cancel_run(self, run_id: str) -> ProductRun:
        answer = await self._c.request("POST", f"/v1/workflows/runs/{run_id}/cancel")
        return ProductRun.model_validate(answer["data"])


class AsyncClient:
    def __init__(self, api_key: str | None = None, base_url: str | None = None, *, project: str | None = None,
                 max_retries: int = 3, timeout: float = 60.0) -> None:
        key = api_key or os.environ.get("GENSERVICE_API_KEY")
        url = base_url or os.environ.get("GENSERVICE_URL")
        if not key or not url:
            raise ValueError("api_key and base_url are required (or GENSERVICE_API_KEY and GENSERVICE_URL)")
        headers = {"Authorization": f"Bearer {key}"}
        if project:
            headers["X-Service-Project"] = project
        self.http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                      limits=httpx.Limits(keepalive_expiry=IDLE_S))
        self.max_retries = max_retries
        self.products = AsyncProducts(self)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, *, submit: bool = False, retry: bool | None = None, **kw) -> Any:
        if submit:
            kw.setdefault("headers", {})["Idempotency-Key"] = str(uuid.uuid4())
        safe = retry if retry is not None else (submit or method in ("GET", "PUT", "PATCH", "DELETE")
                                                or path.endswith("/cancel"))
        attempt = 0
        while True:
            error: GenserviceError | None = None
            try:
                async with self.http.stream(method, path, **kw) as r:
                    content = await read_to_bound(r.aiter_bytes())
            except httpx.TransportError:
                if not safe or attempt >= self.max_retries:
                    raise
            else:
                try:
                    return answer(r, content)
                except GenserviceError as e:
                    if r.status_code not in RETRY_STATUS or not safe or attempt >= self.max_retries:
                        raise
                    error = e
            await anyio.sleep(_backoff(attempt, error))
            attempt += 1

    async def submit(self, capability: str, prompt: str | None = None, *, model: str | None = None,
                     **fields: Any) -> SubmitAccepted:
        body = submit_body(prompt, model, fields)
        return SubmitAccepted.model_validate(
            await self.request("POST", f"/v1/generation/capabilities/{capability}", json=body, submit=True))

    async def generate(self, capability: str, prompt: str | None = None, *, wait: bool = True,
                       timeout: float = 600.0, on_event=None, model: str | None = None,
                       **fields: Any) -> JobStatus | SubmitAccepted:
        if not wait:
            return await self.submit(capability, prompt, model=model, **fields)
        seconds = wait_seconds(timeout, on_event)
        started = anyio.current_time()
        answer = await self.request("POST", f"/v1/generation/capabilities/{capability}", submit=True,
                                    json=submit_body(prompt, model, fields), **waiting(self.http, seconds))
        if answer["status"] in FINAL:
            job = JobStatus.model_validate(answer)
        else:
            job = await self.wait(answer["request_id"], timeout=timeout - (anyio.current_time() - started),
                                  on_event=on_event)
        if job.status != "completed":
            raise JobFailed(job)
        return job

    async def wait(self, job_id: str, timeout: float = 600.0, on_event=None) -> JobStatus:
        deadline = anyio.current_time() + timeout
        last_id: str | None = None
        for _ in range(5):
            final = None
            # keep-alives every 15 s: no read timeout ever ends the stream, the deadline does
            with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                try:
                    final, last_id = await self._follow(job_id, last_id, deadline, on_event)
                except (httpx.TransportError, ValueError):
                    continue
            if scope.cancelled_caught:
                break
            if final is not None:
                return final
        while anyio.current_time() < deadline:
            job = await self.status(job_id)
            if job.status in FINAL:
                return job
            await anyio.sleep(0.5)
        raise TimeoutError(f"job {job_id} did not end in {timeout} s")

    async def _follow(self, job_id: str, last_id: str | None, deadline: float, on_event):
        headers = {"Last-Event-ID": last_id} if last_id else {}
        timeout = httpx.Timeout(max(deadline - anyio.current_time(), 1.0), connect=10.0)
        async with aconnect_sse(self.http, "GET", f"/v1/generation/requests/{job_id}/events", headers=headers,
                                timeout=timeout) as source:
            r = source.response
            if r.status_code >= 400:
                await r.aread()
                raise from_response(r)
            final = None
            async for sse in source.aiter_sse():
                last_id = sse.id or last_id
                final = seen(sse, on_event) or final  # the node ends the stream after it: read to the end
        return final, last_id

    async def status(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(await self.request("GET", f"/v1/generation/requests/{job_id}/status"))

    async def cancel(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(await self.request("POST", f"/v1/generation/requests/{job_id}/cancel"))

    async def jobs(self, limit: int = 50) -> list[JobStatus]:
        answer = await self.request("GET", "/v1/generation/requests", params={"limit": limit})
        return [JobStatus.model_validate(j) for j in answer["data"]]

    async def balance(self) -> Balance:
        return Balance.model_validate((await self.request("GET", "/v1/billing/balance"))["data"])

    async def upload(self, file: str | os.PathLike | bytes | IO[bytes], *, filename: str | None = None,
                     content_type: str | None = None) -> Asset:
        answer = await self.request("POST", "/v1/generation/uploads",
                                    files={"file": _file_part(file, filename, content_type)}, retry=False)
        return Asset.model_validate(answer["data"])

    async def download(self, output: Asset | AssetOutput | dict | str,
                       path: str | os.PathLike | None = None) -> bytes:
        r = await self.http.get(f"/v1/generation/assets/{asset_id(output)}/content", follow_redirects=True)
        if r.status_code >= 400:
            raise from_response(r)
        if path is not None:
            Path(path).write_bytes(r.content)
        return r.content
