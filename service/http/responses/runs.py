"""Response shapes of products (spec "Product"), built by service/catalog/products.py (declared in
service/views/catalog_shapes.py). The
ProductRun and the merged `GET /v1/runs` feed are service/views/shapes.py's, re-exported here."""

from __future__ import annotations

from service.views.catalog_shapes import Product, ProductInput, ProductStep
from service.views.shapes import FeedItem, FeedJob, FeedRun, ProductRun, RunsPage, RunStep

__all__ = ["FeedItem", "FeedJob", "FeedRun", "ProductRun", "RunsPage", "RunStep", "ProductInput", "ProductStep",
           "Product"]
