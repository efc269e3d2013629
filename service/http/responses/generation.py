"""Response shapes of the generation routes built outside service/views: capabilities,
models, estimate, asset URL (spec "Capabilities", "Models"), declared in
service/views/catalog_shapes.py beside their builders' other shapes. The job status object and the
asset shapes are service/views/shapes.py's, re-exported here."""

from __future__ import annotations

from service.views.catalog_shapes import (
    AssetUrl, Capability, CapabilitySlot, Estimate, Model, ModelCapability, ModelQueue, ModelSlot, Offering, Price,
)
from service.views.shapes import (
    Asset, AssetOutput, CreditsPair, JobState, JobStatus, Progress, Source, SubmitAccepted,
)

__all__ = ["Asset", "AssetOutput", "CreditsPair", "JobState", "JobStatus", "Progress", "Source", "SubmitAccepted",
           "Estimate", "CapabilitySlot", "ModelSlot", "Price", "Offering", "Capability", "ModelCapability",
           "ModelQueue", "Model", "AssetUrl"]
