#!/usr/bin/env python3
"""loss_scaler_ref — torch.cuda.amp.GradScaler's scale update, for test_precision.

torch 1.13 updates the scale in ATen's _amp_update_scale_cuda_kernel (CUDA only; the
CPU build has no kernel, so the rule is reproduced here line by line):

    if found_inf: scale = float(scale * backoff_factor); growth_tracker = 0
    else:
        successful = growth_tracker + 1
        if successful == growth_interval:
            new_scale = float(scale * growth_factor)     # double product, rounded to float
            if isfinite(new_scale): scale = new_scale
            growth_tracker = 0
        else: growth_tracker = successful

Usage: loss_scaler_ref.py INIT GROWTH BACKOFF INTERVAL FLAGS   (FLAGS: a string of 0/1)
Prints one line per step: "<scale as %.9g> <growth_tracker>". No clamp: torch has none.
"""
import math
import struct
import sys


def f32(x):
    """Round a Python float (double) to the nearest float32, as a C cast does."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:  # struct refuses out-of-range values; a C cast gives inf
        return math.copysign(math.inf, x)


def main():
    init, growth, backoff, interval, flags = sys.argv[1:6]
    scale, growth, backoff, interval = f32(float(init)), float(growth), float(backoff), int(interval)
    tracker = 0
    for c in flags:
        if c == "1":
            scale = f32(scale * backoff)
            tracker = 0
        else:
            successful = tracker + 1
            if successful == interval:
                new_scale = f32(scale * growth)
                if math.isfinite(new_scale):
                    scale = new_scale
                tracker = 0
            else:
                tracker = successful
        print("%.9g %d" % (scale, tracker))


if __name__ == "__main__":
    main()
