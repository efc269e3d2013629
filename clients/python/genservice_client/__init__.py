"""A Python client for a genservice node (`docs/clients.md`)."""

from .aio import AsyncClient
from .client import Client
from .errors import (AuthenticationError, BadRequest, Conflict, GenserviceError, InsufficientCredits, JobFailed,
                     NotFound, PermissionDenied, RateLimited, ServerError, Unprocessable)
from .models import Asset, AssetOutput, Balance, JobStatus, Product, ProductRun, ProgressEvent, SubmitAccepted
from .webhooks import verify_webhook

__all__ = ["Client", "AsyncClient", "GenserviceError", "BadRequest", "AuthenticationError", "InsufficientCredits",
           "PermissionDenied", "NotFound", "Conflict", "Unprocessable", "RateLimited", "ServerError", "JobFailed",
           "verify_webhook", "Asset", "AssetOutput", "Balance", "JobStatus", "Product", "ProductRun",
           "ProgressEvent", "SubmitAccepted"]
