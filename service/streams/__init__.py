"""Live progress: server-sent event streams of jobs, runs and projects (docs/streams.md)."""

from .hub import Hub

__all__ = ["Hub"]
