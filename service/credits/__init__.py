"""The money rules of one organization, pure: no event loop, no SQL (see `book`)."""
