"""The sync client. Submits carry an automatic `Idempotency-Key`, so the retries this
client makes (network errors, 408, 429 with Retry-After, 5xx, with backoff) never pay
twice; other requests are retried only where the spec's "Retrying" table says it is safe."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
from httpx_sse import ServerSentEvent, connect_sse

from .errors import GenserviceError, JobFailed, from_response
from .models import STREAMS, Asset, AssetOutput, Balance, JobStatus, Product, ProductRun, SubmitAccepted

FINAL = ("completed", "failed", "nsfw", "canceled")
# The node closes a connection idle for 5 s (its HTTP keep-alive timeout). httpx keeps one
# for 5 s too, so a request sent at that moment could meet the node's close (a reset): this
# side lets an idle connection go a second sooner.
IDLE_S = 4.0


RUN_FINAL = ("completed", "failed", "canceled")
# A JSON answer is read to this many bytes at most: the node's largest (a page of jobs) is far
# smaller, and an address that is not the node's could send without end.
MAX_ANSWER = 16 * 2**20
SUBMIT_WAIT_S = 60  # the longest `Prefer: wait` the node honours


def typed_event(stream: str, name: str, data: dict) -> Any:
    """An event's data as the document's model for its name (models.STREAMS; a name the
    document does not list stays a dict: streams are open like every answer)."""
    model = STREAMS[stream].get(name)
    return model.model_validate(data) if model is not None else data


def seen(sse: ServerSentEvent, on_event) -> JobStatus | None:
    """One event of a job's stream, told to `on_event(name, data)` with `data` typed
    (`JobStatus` for `status` and `reset`, `ProgressEvent` for `progress`); the job's status
    when it is final."""
    if not sse.data:
        return None
    event = typed_event("job_events", sse.event, sse.json())
    if on_event is not None:
        on_event(sse.event, event)
    return event if isinstance(event, JobStatus) and event.status in FINAL else None


def submit_body(prompt: str | None, model: str | None, fields: dict) -> dict:
    return {k: v for k, v in {"prompt": prompt, "model": model, **fields}.items() if v is not None}


def wait_seconds(timeout: float, on_event) -> int:
    """How long a submit asks the node to wait for the job's end: none when every event is
    wanted (the stream gives them), else up to the node's 60 s within `timeout`."""
    return 0 if on_event is not None else max(0, min(SUBMIT_WAIT_S, int(timeout)))


def waiting(http: httpx.Client | httpx.AsyncClient, seconds: int) -> dict:
    """A waiting submit's request options: the Prefer header, and a read timeout that
    outlasts the wait."""
    if not seconds:
        return {}
    read = http.timeout.read
    return {"headers": {"Prefer": f"wait={seconds}"},
            "timeout": httpx.Timeout(http.timeout.connect, read=None if read is None else read + seconds,
                                     write=http.timeout.write, pool=http.timeout.pool)}


def answer(r: httpx.Response, content: bytes | None) -> Any:
    """A response's JSON (`content`: its body read to MAX_ANSWER, None past it); raises its error."""
    if content is None:
        raise GenserviceError(r.status_code, "response.too_large",
                              f"The answer is larger than {MAX_ANSWER // 2**20} MiB.")
    if r.status_code >= 400:
        raise from_response(r, content)
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        kind = r.headers.get("Content-Type", "").partition(";")[0] or "no content type"
        raise GenserviceError(r.status_code, "response.not_json",
                              f"The answer is not JSON ({kind}): is the URL the node's address?") from None


def read_to_bound(chunks: Iterable[bytes]) -> bytes | None:
    """A body's bytes; None once past MAX_ANSWER (what is left is not read)."""
    content = bytearray()
    for chunk in chunks:
        content += chunk
        if len(content) > MAX_ANSWER:
            return None
    return bytes(content)


class Until(httpx.SyncByteStream):
    """A response body that raises TimeoutError once `deadline` (time.monotonic) has passed:
    a job's stream brings a keep-alive every 15 s, so no read timeout ever ends it."""

    def __init__(self, stream: Any, deadline: float) -> None:
        self.stream, self.deadline = stream, deadline

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            if time.monotonic() > self.deadline:
                raise TimeoutError
            yield chunk

    def close(self) -> None:
        self.stream.close()


def asset_id(output: Asset | AssetOutput | dict | str) -> str:
    if isinstance(output, str):
        return output
    return output["id"] if isinstance(output, dict) else output.id
RETRY_STATUS = (408, 429, 500, 502, 503, 504)


def _backoff(attempt: int, error: GenserviceError | None) -> float:
    if error is not None and error.retry_after is not None:
        return min(error.retry_after, 30.0)
    return min(0.25 * 2 ** attempt, 8.0)


def _file_part(file: str | os.PathLike | bytes | IO[bytes], filename: str | None, content_type: str | None):
    if isinstance(file, (str, os.PathLike)):
        path = Path(file)
        return (filename or path.name, path.read_bytes(), content_type or "application/octet-stream")
    data = file if isinstance(file, bytes) else file.read()
    return (filename or getattr(file, "name", "upload.bin"), data, content_type or "application/octet-stream")


class Products:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, category: str | None = None) -> list[Product]:
        params = {"category": category} if category else None
        return [Product.model_validate(p) for p in self._c.request("GET", "/v1/workflows/products",
                                                                   params=params)["data"]]

    def get(self, slug: str) -> Product:
        return Product.model_validate(self._c.request("GET", f"/v1/workflows/products/{slug}")["data"])

    def run(self, slug: str, wait: bool = True, timeout: float = 600.0, **inputs: Any) -> ProductRun:
        """Start a product run (Idempotency-Key automatic) and, with `wait`, poll it to its end
        (a run that ends other than completed is returned as it is: its steps say why)."""
        run = self._c.request("POST", f"/v1/workflows/products/{slug}/runs", json={"inputs": inputs}, submit=True)
        run = ProductRun.model_validate(run["data"])
        deadline = time.monotonic() + timeout
        while wait and run.status not in RUN_FINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run.id} still {run.status}")
            time.sleep(0.5)
            run = self.get_run(run.id)
        return run

    def get_run(self, run_id: str) -> ProductRun:
        return ProductRun.model_validate(self._c.request("GET", f"/v1/workflows/runs/{run_id}")["data"])

    def cancel_run(self, run_id: str) -> ProductRun:
        return ProductRun.model_validate(self._c.request("POST", f"/v1/workflows/runs/{run_id}/cancel")["data"])


class Client:
    """`Client(api_key=None, base_url=None)`: the key and address default to the environment's
    GENSERVICE_API_KEY and GENSERVICE_URL."""

    def __init__(self, api_key: str | None = None, base_url: str | None = None, *, project: str | None = None,
                 max_retries: int = 3, timeout: float = 60.0, http: httpx.Client | None = None) -> None:
        key = api_key or os.environ.get("GENSERVICE_API_KEY")
        url = base_url or os.environ.get("GENSERVICE_URL")
        if not key or not url:
            raise ValueError("api_key and base_url are required (or GENSERVICE_API_KEY and GENSERVICE_URL)")
        headers = {"Authorization": f"Bearer {key}"}
        if project:
            headers["X-Service-Project"] = project
        self.http = http or httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                         limits=httpx.Limits(keepalive_expiry=IDLE_S))
        if http is not None:
            self.http.headers.update(headers)
        self.max_retries = max_retries
        self.products = Products(self)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # transport --------------------------------------------------------------------------
    def request(self, method: str, path: str, *, submit: bool = False, retry: bool | None = None, **kw) -> Any:
        """One API call, answered as parsed JSON; errors raise `GenserviceError` subclasses."""
        if submit:
            kw.setdefault("headers", {})["Idempotency-Key"] = str(uuid.uuid4())
        safe = retry if retry is not None else (submit or method in ("GET", "PUT", "PATCH", "DELETE")
                                                or path.endswith("/cancel"))
        attempt = 0
        while True:
            error: GenserviceError | None = None
            try:
                with self.http.stream(method, path, **kw) as r:
                    content = read_to_bound(r.iter_bytes())
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
            time.sleep(_backoff(attempt, error))
            attempt += 1

    # generation -------------------------------------------------------------------------
    def submit(self, capability: str, prompt: str | None = None, *, model: str | None = None,
               **fields: Any) -> SubmitAccepted:
        body = submit_body(prompt, model, fields)
        return SubmitAccepted.model_validate(
            self.request("POST", f"/v1/generation/capabilities/{capability}", json=body, submit=True))

    def generate(self, capability: str, prompt: str | None = None, *, wait: bool = True, timeout: float = 600.0,
                 on_event=None, model: str | None = None, **fields: Any) -> JobStatus | SubmitAccepted:
        """Submit, and with `wait` follow the job to its end: without `on_event`, the submit
        itself waits first (`Prefer: wait`, up to 60 s: a short job ends in its one
        request); then the job's event stream, resumed with Last-Event-ID after a drop,
        polling when the stream cannot be read. A job that ends other than completed raises
        `JobFailed`."""
        if not wait:
            return self.submit(capability, prompt, model=model, **fields)
        seconds = wait_seconds(timeout, on_event)
        started = time.monotonic()
        answer = self.request("POST", f"/v1/generation/capabilities/{capability}", submit=True,
                              json=submit_body(prompt, model, fields), **waiting(self.http, seconds))
        if answer["status"] in FINAL:
            job = JobStatus.model_validate(answer)
        else:
            job = self.wait(answer["request_id"], timeout=timeout - (time.monotonic() - started), on_event=on_event)
        if job.status != "completed":
            raise JobFailed(job)
        return job

    def wait(self, job_id: str, timeout: float = 600.0, on_event=None) -> JobStatus:
        deadline = time.monotonic() + timeout
        last_id: str | None = None
        for _ in range(5):  # stream drops: resume from the last event id
            try:
                final, last_id = self._follow(job_id, last_id, deadline, on_event)
            except (httpx.TransportError, ValueError):
                continue
            except TimeoutError:  # the stream went on past the deadline
                break
            if final is not None:
                return final
        while time.monotonic() < deadline:  # no usable stream: poll
            job = self.status(job_id)
            if job.status in FINAL:
                return job
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} did not end in {timeout} s")

    def _follow(self, job_id: str, last_id: str | None, deadline: float,
                on_event) -> tuple[JobStatus | None, str | None]:
        headers = {"Last-Event-ID": last_id} if last_id else {}
        timeout = httpx.Timeout(max(deadline - time.monotonic(), 1.0), connect=10.0)
        with connect_sse(self.http, "GET", f"/v1/generation/requests/{job_id}/events", headers=headers,
                         timeout=timeout) as source:
            r = source.response
            if r.status_code >= 400:
                r.read()
                raise from_response(r)
            r.stream = Until(r.stream, deadline)
            final = None
            for sse in source.iter_sse():
                last_id = sse.id or last_id
                final = seen(sse, on_event) or final  # the node ends the stream after it: read to the end
        return final, last_id

    def status(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(self.request("GET", f"/v1/generation/requests/{job_id}/status"))

    def cancel(self, job_id: str) -> JobStatus:
        return JobStatus.model_validate(self.request("POST", f"/v1/generation/requests/{job_id}/cancel"))

    def jobs(self, limit: int = 50) -> list[JobStatus]:
        answer = self.request("GET", "/v1/generation/requests", params={"limit": limit})
        return [JobStatus.model_validate(j) for j in answer["data"]]

    def balance(self) -> Balance:
        return Balance.model_validate(self.request("GET", "/v1/billing/balance")["data"])

    # files ------------------------------------------------------------------------------
    def upload(self, file: str | os.PathLike | bytes | IO[bytes], *, filename: str | None = None,
               content_type: str | None = None) -> Asset:
        """Upload from a path, bytes or a binary file object; answers the asset."""
        answer = self.request("POST", "/v1/generation/uploads",
                              files={"file": _file_part(file, filename, content_type)}, retry=False)
        return Asset.model_validate(answer["data"])

    def download(self, output: Asset | AssetOutput | dict | str, path: str | os.PathLike | None = None) -> bytes:
        """An output's bytes (an asset, a job's output, or an asset id); written to `path` if given."""
        r = self.http.get(f"/v1/generation/assets/{asset_id(output)}/content", follow_redirects=True)
        if r.status_code >= 400:
            raise from_response(r)
        if path is not None:
            Path(path).write_bytes(r.content)
        return r.content
