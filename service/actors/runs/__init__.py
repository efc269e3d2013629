"""The run actor (one per product run) and everything it owns.

    facade.py    `Products`: what routes call; reads rows, sends messages
    actor.py     `RunActor`: the one owner of a run (run, steps, op tasks)
    record.py    `RunRecord`, `StepRecord`: the run's and its steps' rows, typed and frozen
    context.py   `RunContext`: exactly the node parts the actor uses (jobs through a port)
    messages.py  what the actor takes
    effects.py   the RUN and STEP tables' effects bound to the actor
    ops.py       op steps (free local media work) off the actor loop
"""
