"""The balance actor (one per organization): lots, holds, ledger, spend limits, over the pure
money rules of service/credits/.

    actor.py     `BalanceActor`: batches, one commit per batch, replies after the commit
    messages.py  what it takes (PlaceHold, Capture, Release, Grant, ...)
"""
