"""Peak memory of inspecting PNG-coded MP4 bombs (issue 22, M5), before and after.

Builds a file like the probe's (an MP4 of one PNG-coded 16,000 x 16,000 frame of zeros:
0.8 MB that decodes to 0.77 GB; FFmpeg's PNG muxing stops near 16,300 a side) and a second
one whose header says 64 x 64, then runs
`service.media.inspect.inspect_file` on three copies at once, in threads, in a fresh
process per source tree, and prints the process's peak RSS growth and the outcome.
Prints figures only.

    python bench/video_decode_memory.py [--before /work/main] [--side 16000]

`--before` is a checkout of the code before the fix (skipped when absent).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from service.media.inspect import inspect_file

def kb(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])

paths = sys.argv[2:]
Path("/proc/self/clear_refs").write_text("5")
base = kb("VmRSS:")
out = []

def one(p):
    try:
        info = inspect_file(p, "video/mp4")
        out.append(f"accepted {info.width}x{info.height}")
    except Exception as e:
        out.append(f"{type(e).__name__}: {getattr(e, 'message', e)}")

threads = [threading.Thread(target=one, args=(p,)) for p in paths]
for t in threads: t.start()
for t in threads: t.join()
print(f"{(kb('VmHWM:') - base) / 1024:.0f}")
print(sorted(set(out)))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="/work/main", help="a checkout before the fix")
    ap.add_argument("--side", type=int, default=16000, help="the PNG frame's width and height")
    ap.add_argument("--copies", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from media_bombs import png_mp4, png_zeros

    t = time.perf_counter()
    frame = png_zeros(args.side, args.side)
    print(f"frame {args.side}x{args.side}: {len(frame) / 1e6:.2f} MB of PNG, "
          f"{args.side * args.side * 3 / 1e9:.2f} GB decoded (built in {time.perf_counter() - t:.1f} s)")
    trees = [("after", ROOT)]
    if Path(args.before, "service").is_dir() and Path(args.before).resolve() != ROOT:
        trees.insert(0, ("before", Path(args.before)))
    with tempfile.TemporaryDirectory() as tmp:
        for label, header in (("honest header", (args.side, args.side)), ("header says 64x64", (64, 64))):
            paths = [str(png_mp4(Path(tmp) / f"{i}.mp4", frame, header)) for i in range(args.copies)]
            size = Path(paths[0]).stat().st_size / 1e6
            for tree, path in trees:
                t = time.perf_counter()
                run = subprocess.run([sys.executable, "-c", CHILD, str(path), *paths],
                                     capture_output=True, text=True)
                lines = run.stdout.strip().splitlines()
                peak = lines[0] if lines else "?"
                outcome = lines[1] if len(lines) > 1 else run.stderr.strip().splitlines()[-1:]
                print(f"{label:18} {size:.2f} MB x{args.copies}  {tree:6}  peak +{peak} MB  "
                      f"{time.perf_counter() - t:.1f} s  {outcome}")


if __name__ == "__main__":
    main()
