""""Use the API" beside a Studio result: the exact request the job was made with, as curl,
Python (httpx and the genservice_client package) and, where the OpenAI-compatible front door
serves the capability, the OpenAI SDK. The key is never in the page: the snippets read it
from GENSERVICE_API_KEY. The body is the job's own settings, so running a snippet makes the
same job again (through the API, source `api`)."""

from __future__ import annotations

import json
from typing import Any, Mapping

SIDES = {"1k": 1024, "2k": 2048, "4k": 4096}


def body_of_job(job: Mapping[str, Any], prompt: str | None, params: dict) -> dict:
    """The submit body of `POST /v1/generation/capabilities/{capability}` for this job."""
    body: dict = {"model": job["model"]}
    if prompt:
        body["prompt"] = prompt
    for name in ("aspect_ratio", "resolution", "duration", "seed"):
        if params.get(name) is not None:
            body[name] = params[name]
    inputs = {k: v for k, v in (params.get("inputs") or {}).items() if v}
    if inputs:
        body["inputs"] = inputs
    return body


def _py(value) -> str:
    """A Python literal of a JSON value (True/False/None spelled the Python way)."""
    return repr(value)


def image_size(aspect_ratio: str | None, resolution: str | None) -> str | None:
    """The OpenAI `size` the front door maps back to this tier and aspect ratio."""
    if resolution not in SIDES:
        return None
    side = SIDES[resolution]
    a, b = (int(x) for x in (aspect_ratio or "1:1").split(":"))
    w, h = (side, round(side * b / a)) if a >= b else (round(side * a / b), side)
    return f"{w}x{h}"


def snippets(base_url: str, job: Mapping[str, Any], prompt: str | None, params: dict) -> list[dict]:
    """`[{id, label, code}]`: the request in each language, key elided."""
    cap = job["capability"]
    body = body_of_job(job, prompt, params)
    url = f"{base_url.rstrip('/')}/v1/generation/capabilities/{cap}"
    data = json.dumps(body, indent=2, ensure_ascii=False)
    curl = (f"curl -X POST {url} \\\n  -H \"Authorization: Bearer $GENSERVICE_API_KEY\" \\\n"
            f"  -H \"Content-Type: application/json\" \\\n  -d '{data.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}'")
    fields = ", ".join(f"{k}={_py(v)}" for k, v in body.items() if k != "prompt")
    httpx_code = (f"import os\n\nimport httpx\n\nr = httpx.post(\n    \"{url}\",\n"
                  f"    headers={{\"Authorization\": f\"Bearer {{os.environ['GENSERVICE_API_KEY']}}\"}},\n"
                  f"    json={_py(body)},\n)\nr.raise_for_status()\nprint(r.json()[\"status_url\"])")
    client_code = (f"from genservice_client import Client\n\n# GENSERVICE_API_KEY in the environment\n"
                   f"client = Client(base_url=\"{base_url.rstrip('/')}\")\n"
                   f"job = client.generate({_py(cap)}, {_py(body.get('prompt'))}, {fields})\n"
                   f"print([o[\"url\"] for o in job[\"outputs\"]])")
    out = [{"id": "curl", "label": "curl", "code": curl},
           {"id": "httpx", "label": "Python (httpx)", "code": httpx_code},
           {"id": "client", "label": "Python (genservice_client)", "code": client_code}]
    openai = openai_code(base_url, cap, body)
    if openai:
        out.append({"id": "openai", "label": "OpenAI SDK", "code": openai})
    return out


def openai_code(base_url: str, cap: str, body: dict) -> str | None:
    """The OpenAI SDK call, for the capabilities /openai/v1 serves (images, speech, chat)."""
    head = (f"from openai import OpenAI\n\n# GENSERVICE_API_KEY in the environment\nimport os\n"
            f"client = OpenAI(base_url=\"{base_url.rstrip('/')}/openai/v1\", api_key=os.environ[\"GENSERVICE_API_KEY\"])\n")
    prompt = body.get("prompt", "")
    if cap == "image.generate" and "inputs" not in body:
        size = image_size(body.get("aspect_ratio"), body.get("resolution"))
        extra = f", size={_py(size)}" if size else ""
        return head + f"img = client.images.generate(model={_py(body['model'])}, prompt={_py(prompt)}{extra})\nprint(img.data[0].url)"
    if cap == "audio.speech":
        voice = f", voice={_py(body['resolution'])}" if body.get("resolution") else ""
        return head + (f"speech = client.audio.speech.create(model={_py(body['model'])}, input={_py(prompt)}{voice})\n"
                       "speech.write_to_file(\"speech.out\")")
    if cap == "text.llm":
        return head + (f"chat = client.chat.completions.create(model={_py(body['model'])}, "
                       f"messages=[{{\"role\": \"user\", \"content\": {_py(prompt)}}}])\nprint(chat.choices[0].message.content)")
    return None
