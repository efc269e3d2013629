"""The job actor (one per generation job) and everything it owns.

    facade.py    `Generation`: what routes and runs call; reads rows, sends messages
    actor.py     `JobActor`: the one owner of a job (record, render, watchers, progress)
    record.py    `JobRecord`: the job row, typed and frozen
    context.py   `JobContext`: exactly the node parts the actor uses
    messages.py  what the actor takes
    effects.py   the JOB table's effects bound to the actor
    render.py    the render task (off the actor loop) and its request
    slots.py     per-model render slots (a fair line)
    queues.py    how busy each engine model is
    uploads.py   the uploads actor (one per organization)
"""
