"""Outgoing HTTP for webhook deliveries: one guarded sender per process."""
