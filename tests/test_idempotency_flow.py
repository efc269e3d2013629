"""The one Idempotency-Key flow (service/idempotency.py `Gate.once`) as job submits and run
starts use it, including the key race: a write for the same key commits between the flow's
look-up and its own write (as when a request whose ask timed out let go of the key's lock
while its actor still wrote). The loser undoes what it did (a submit releases its hold),
and the flow answers as the winner did."""

from __future__ import annotations

from service.catalog.request import SubmitRequest
from service.idempotency import Gate, request_hash
from service.storage.accounts import default_project

KEY = "same-key"


def held(node, org_id: str) -> list[str]:
    return [r["status"] for r in node.store.all(
        "SELECT status FROM credit_holds WHERE organization_id = ? ORDER BY rowid", (org_id,))]


async def test_a_submit_and_a_run_start_share_one_flow_and_each_survives_the_key_race(node, org):
    gen, products = node.parts.generation, node.parts.products
    org_id = org["organization_id"]
    project = default_project(node.store, org_id)
    assert type(gen.keys) is type(products.keys) is Gate

    # -- a submit: the rival's job commits the key first; ours loses and releases its hold
    plan = gen.plan(org_id, project["id"], capability="image.generate", request=SubmitRequest(prompt="race"))
    digest = request_hash({"route": "capabilities/image.generate", "body": {"prompt": "race"}})
    calls = []

    async def make_job(claim):
        calls.append(claim)
        if len(calls) == 1:  # the rival wins the key between our look-up and our write
            calls.append(await gen.submit(plan, org_id=org_id, project_id=project["id"], idempotency=claim))
        return await gen.submit(plan, org_id=org_id, project_id=project["id"], idempotency=claim)

    answer = await gen.idempotent(org_id, KEY, digest, make_job)
    rival = calls[1]
    assert answer == rival and len(calls) == 2  # replayed after KeyTaken, make not called again
    jobs = node.store.all("SELECT id FROM jobs WHERE organization_id = ?", (org_id,))
    assert [j["id"] for j in jobs] == [rival["request_id"]]
    assert sorted(held(node, org_id)) in (["held", "released"], ["captured", "released"])
    assert await gen.idempotent(org_id, KEY, digest, make_job) == rival and len(calls) == 2

    # -- a run start under the same key: keys are per kind, so it starts a run, and the
    # same race ends the same way (no second run)
    inputs = {"prompt": "a bell [[fail:internal]]"}
    run_digest = request_hash({"product": "text-to-clip", "body": {"inputs": inputs}})
    starts = []

    async def make_run(claim):
        starts.append(claim)
        if len(starts) == 1:
            starts.append(await products._start(org_id, None, "text-to-clip", inputs, project, claim))
        return await products._start(org_id, None, "text-to-clip", inputs, project, claim)

    view = await products.keys.once(org_id, KEY, run_digest, make_run)
    assert view == starts[1] and len(starts) == 2
    assert node.store.scalar("SELECT COUNT(*) FROM product_runs WHERE organization_id = ?", (org_id,)) == 1
    again = await products.start(org_id, None, "text-to-clip", inputs, project, idempotency_key=KEY,
                                 request_hash=run_digest)
    assert again == view
    assert node.store.scalar("SELECT COUNT(*) FROM product_runs") == 1
