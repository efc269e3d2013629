"""Media work with Pillow and PyAV: sniff and inspect uploads, local ops, H.264 encode."""
