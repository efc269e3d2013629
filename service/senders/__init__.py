"""Sender tasks: long-running tasks that drain an outbox table to the outside world (the
shared dispatcher is service/outbox.py). They own no rules of the rows' owners."""
