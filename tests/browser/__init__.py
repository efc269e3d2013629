"""Real-browser tests of the dashboard (a package, so its conftest does not shadow tests/conftest.py)."""
