"""The hook gate: the webhooks of the engine servers the operator runs, received by a
process of its own.

A Cog server reports each job's outcome in one webhook on a new connection. Received on
the node's port, that connection and its request cost the node's one trio thread about as
much as the rest of the job's HTTP (bench/README.md, "Throughput XIX"). With
`GENSERVICE_ENGINE_HOOKS_LISTEN` set, the node binds that address itself and runs a child
process (`child.py`, Hypercorn with the node's connection class) that accepts those
connections, reads each request and hands it to the node over one local socket
(`wire.py`); the node judges it exactly as the `POST /engine-hooks/...` route does
(`Context.judge`) and hands back the answer. The node's cost of a hook is then a frame
read among others and the delivery itself.

The child holds no secret and decides nothing: every answer, refusals included, is the
node's. The listening socket stays the node's, so a child that dies is started again on
the same port (`gate.py`), and connections that arrive meanwhile wait in its backlog.

Nothing is imported here: the child imports `wire` alone, without the node's modules.
"""
